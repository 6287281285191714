"""Keeping the API key out of what a turn shows, at the edges the other suites leave open
(found by mutation testing, ``devtools/mutation.py turn2``): a start of the key clipped to
exactly 12 characters is hidden, 11 are not (too short to be the key); every text field
of an error is cleaned, in every error of its chain."""

from __future__ import annotations

from llamaclient import ConnectError, HTTPStatusError, ProtocolError, StreamClosedEarlyError
from llamaclient._turn.secret import hide_key, redact
from tests.turn.script import Server, config, drive, status, turn

KEY = "sk-0123456789abcdefghij"  # 23 characters


def test_a_start_of_the_key_of_exactly_twelve_characters_is_hidden() -> None:
    assert redact(f"echo: {KEY[:12]}", KEY) == "echo: ***"
    assert redact(f"echo: {KEY[:13]}…", KEY) == "echo: ***…"
    assert redact(f"echo: {KEY}", KEY) == "echo: ***"


def test_a_start_shorter_than_twelve_is_left_as_it_is() -> None:
    assert redact(f"echo: {KEY[:11]}", KEY) == f"echo: {KEY[:11]}"
    both = f"{KEY[:12]} then {KEY[:11]}"
    assert redact(both, KEY) == f"*** then {KEY[:11]}"


def test_a_short_key_is_hidden_whole_only() -> None:
    key = "short-key"
    assert redact(f"a {key} b {key[:8]}", key) == f"a *** b {key[:8]}"


def test_the_key_is_hidden_in_every_text_field_of_an_error_and_its_whole_chain() -> None:
    status = HTTPStatusError(
        401, f"bad key {KEY}", message=f"key {KEY} refused", type=f"auth {KEY[:12]}"
    )
    framing = ProtocolError("not HTTP", f"Authorization: Bearer {KEY}")
    cause, context = ConnectError(f"cause {KEY}"), ConnectError(f"context {KEY}")
    outer = StreamClosedEarlyError("outer")
    outer.__cause__, outer.__context__ = cause, context
    context.__context__ = status
    status.__cause__ = framing
    hide_key(outer, KEY)
    assert (status.body, status.message, status.type) == (
        "bad key ***",
        "key *** refused",
        "auth ***",
    )
    assert framing.raw == "Authorization: Bearer ***"
    assert (str(cause), str(context)) == ("cause ***", "context ***")
    assert KEY[:12] not in str(status)


def test_an_error_answer_that_echoes_the_key_is_shown_without_it() -> None:
    """A proxy that echoes the request headers into its error page."""
    body = f'{{"error":{{"code":401,"message":"bad key {KEY}","type":"auth"}}}}'.encode()
    run = drive(turn(conf=config(api_key=KEY)), Server([status(401, body)]))
    error = run.done.error
    assert isinstance(error, HTTPStatusError)
    assert (error.message, KEY in error.body) == ("bad key ***", False)


def test_a_chain_that_loops_back_is_cleaned_once_through_and_ends() -> None:
    """Re-raising can make a chain loop (a context that is an earlier error): every error
    in it is cleaned, each once, and the cleaning ends; other arguments stay as they are."""
    outer = StreamClosedEarlyError(f"outer {KEY}")
    first, second = ConnectError(f"first {KEY}"), OSError(111, f"refused {KEY}")
    last = ConnectError(f"last {KEY}")
    outer.__cause__, outer.__context__ = last, first
    first.__context__ = second
    second.__context__ = first  # back to an error already cleaned
    hide_key(outer, KEY)
    assert [str(e) for e in (outer, first, last)] == ["outer ***", "first ***", "last ***"]
    assert second.args == (111, "refused ***")
