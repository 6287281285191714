"""ChatTurn's pre-flight stage, synchronously: off by default; on, ``/props`` for a slot's
context (once: ``Known``), the server's count (``input_tokens``, else ``apply-template``
then ``tokenize``, learnt once), and a prompt that with ``max_tokens`` does not fit is a
``ContextOverflowError`` before the chat; anything the stage cannot learn lets the chat go."""

from __future__ import annotations

import msgspec
import pytest

from llamaclient import ChatRequest, ContextOverflowError, UserMessage
from llamaclient._turn.commands import Call
from llamaclient._turn.known import Known
from llamaclient._turn.preflight import tokens_counted
from tests.turn.script import CallAnswer, Fail, Run, Server, config, drive, turn

CHAT = "/v1/chat/completions"
COUNT = "/v1/chat/completions/input_tokens"
PROPS = (200, b'{"default_generation_settings": {"n_ctx": 100}, "total_slots": 1}')


def counted(n: int) -> tuple[int, bytes]:
    return 200, msgspec.json.encode({"object": "response.input_tokens", "input_tokens": n})


def ask(max_tokens: int | None = 20, preflight: bool | None = True) -> ChatRequest:
    return ChatRequest([UserMessage("hi")], max_tokens=max_tokens, preflight=preflight)


def run(
    calls: dict[str, list[CallAnswer]],
    request: ChatRequest,
    known: Known | None = None,
    **conf: object,
) -> Run:
    return drive(turn(request, conf=config(**conf), known=known or Known()), Server(calls=calls))


def test_off_by_default_nothing_is_counted() -> None:
    done = run({}, ask(preflight=None))
    assert done.paths() == [CHAT]


def test_a_prompt_that_fits_goes_and_what_was_learnt_is_kept() -> None:
    known = Known()
    done = run({"/props": [PROPS], COUNT: [counted(80)]}, ask(20), known)
    assert done.paths() == ["/props", COUNT, CHAT]
    assert (known.n_ctx, known.input_tokens) == (100, True)
    again = run({COUNT: [counted(80)]}, ask(20), known)
    assert again.paths() == [COUNT, CHAT]


def test_one_token_over_is_refused_with_the_numbers() -> None:
    done = run({"/props": [PROPS], COUNT: [counted(81)]}, ask(20))
    error = done.done.error
    assert isinstance(error, ContextOverflowError)
    assert (error.n_prompt_tokens, error.max_tokens, error.n_ctx, error.preflight) == (
        81, 20, 100, True,
    )  # fmt: skip
    assert done.paths() == ["/props", COUNT]


@pytest.mark.parametrize(("max_tokens", "fits"), [(None, True), (-1, True), (0, True)])
def test_without_max_tokens_only_the_prompt_must_fit(max_tokens: int | None, fits: bool) -> None:
    done = run({"/props": [PROPS], COUNT: [counted(100)]}, ask(max_tokens))
    assert (done.done.completion is not None) is fits


def test_the_configs_max_tokens_counts_when_the_request_sets_none() -> None:
    done = run({"/props": [PROPS], COUNT: [counted(90)]}, ask(None), max_tokens=11)
    assert isinstance(done.done.error, ContextOverflowError)
    assert done.done.error.max_tokens == 11


def test_an_older_build_is_counted_by_template_then_tokenizer() -> None:
    known = Known()
    calls: dict[str, list[CallAnswer]] = {
        "/props": [PROPS],
        COUNT: [(404, b"")],
        "/apply-template": [(200, b'{"prompt": "<|user|>hi"}')],
        "/tokenize": [(200, b'{"tokens": [1, 2, 3]}')],
    }
    done = run(calls, ask(20), known)
    assert done.paths() == ["/props", COUNT, "/apply-template", "/tokenize", CHAT]
    assert known.input_tokens is False
    [tokenize] = [c for c in done.sent(Call) if c.path == "/tokenize"]
    assert msgspec.json.decode(tokenize.body or b"") == {
        "content": "<|user|>hi", "add_special": True, "parse_special": True,
    }  # fmt: skip
    again = run(calls, ask(20), known)
    assert again.paths() == ["/apply-template", "/tokenize", CHAT]


@pytest.mark.parametrize(
    "calls",
    [
        {"/props": [(500, b"")]},
        {"/props": [(200, b"not json")]},
        {"/props": [(200, b'{"default_generation_settings": {}}')]},
        {"/props": [Fail("connect")]},
        {"/props": [PROPS], COUNT: [(500, b"")]},
        {"/props": [PROPS], COUNT: [(200, b"[]")]},
        {"/props": [PROPS], COUNT: [Fail("read")]},
        {"/props": [PROPS], COUNT: [(404, b"")], "/apply-template": [(200, b"{}")]},
        {"/props": [PROPS], COUNT: [(404, b"")], "/apply-template": [(200, b"no")]},
    ],
)
def test_what_cannot_be_learnt_lets_the_chat_go(calls: dict[str, list[CallAnswer]]) -> None:
    done = run(calls, ask(20))
    assert done.done.completion is not None
    assert done.paths()[-1] == CHAT


def test_tokens_counted_reads_both_answers() -> None:
    assert tokens_counted(b'{"input_tokens": 5}') == 5
    assert tokens_counted(b'{"tokens": [1, {"id": 2, "piece": "x"}]}') == 2
    assert tokens_counted(b'{"input_tokens": "5"}') is None
    assert tokens_counted(b"[1]") is None
    assert tokens_counted(b"nope") is None
