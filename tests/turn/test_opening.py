"""ChatTurn, opening: the chat's POST and what each answer means before any output (retries
with backoff, the loading wait, typed errors, a request the server may have read and not
answered), and the cleanup that follows (no cancel after a non-2xx). Synchronous."""

from __future__ import annotations

import json

import pytest

from llamaclient import (
    AuthenticationError,
    ChatRequest,
    ConnectError,
    Content,
    HTTPStatusError,
    LoadTimeoutError,
    ModelNotFoundError,
    ProtocolError,
    Resuming,
    Retrying,
    StalledError,
    StreamClosedEarlyError,
    UserMessage,
    Waiting,
    WaitTimeoutError,
)
from llamaclient._turn.commands import Arm, Call, Close, Done, ReadAll, Send, Sleep
from llamaclient._turn.known import Known
from tests.turn.script import (
    FIRE,
    JSON,
    Answer,
    Fail,
    Server,
    answer,
    config,
    drive,
    status,
    turn,
)

LOADING = Answer(503, JSON, [b'{"error":{"code":503,"message":"Loading model"}}'])
HEALTHY = (200, b'{"status":"ok"}')


def test_a_plain_turn_sends_the_body_with_the_conversation_id() -> None:
    run = drive(turn(body=b'{"m":1}'), Server())
    [send] = run.sent(Send)
    assert (send.method, send.path, send.body) == ("POST", "/v1/chat/completions", b'{"m":1}')
    assert send.headers == (("X-Session-Id", "c0ffee"), ("X-Conversation-Id", "c0ffee"))
    assert (send.wait, send.stall) == (600.0, 120.0)
    assert run.done.completion is not None


def test_without_resume_no_conversation_id_is_sent() -> None:
    [send] = drive(turn(conversation_id=None), Server()).sent(Send)
    assert send.headers == ()


def test_autoload_off_is_asked_for_in_the_path() -> None:
    request = ChatRequest([UserMessage("q")], autoload=False)
    [send] = drive(turn(request), Server()).sent(Send)
    assert send.path == "/v1/chat/completions?autoload=false"


@pytest.mark.parametrize("code", [429, 502, 503, 504])
def test_a_busy_answer_is_retried_with_backoff(code: int) -> None:
    run = drive(turn(), Server([status(code), answer()]))
    assert len(run.sent(Send)) == 2
    [retry] = [e for e in run.events if isinstance(e, Retrying)]
    assert (retry.attempt, retry.error) == (1, f"HTTP {code}")
    assert 5 <= retry.after_ms <= 10
    assert run.done.completion is not None


def test_retry_after_is_honoured() -> None:
    run = drive(turn(), Server([status(429, b"", **{"retry-after": "3"}), answer()]))
    assert [c.seconds for c in run.sent(Sleep)] == [0.16]  # retry_max_backoff * 8 caps it


def test_retry_after_as_a_date_counts_from_the_responses_date() -> None:
    """The machine reads no clock: an HTTP-date is counted from the response's ``Date``."""
    head = {"retry-after": "Fri, 02 Jan 2026 03:04:05 GMT", "date": "Fri, 02 Jan 2026 03:04:04 GMT"}
    server = Server([status(503, b"", **head), answer()])
    run = drive(turn(conf=config(retry_max_backoff=1.0)), server)
    assert [c.seconds for c in run.sent(Sleep)] == [1.0]  # the date's 1 s, over the jitter's


def test_retries_run_out_with_the_last_status() -> None:
    run = drive(turn(conf=config(max_retries=2)), Server([status(502)]))
    assert len(run.sent(Send)) == 3
    assert isinstance(run.done.error, HTTPStatusError)
    assert run.done.error.status == 502


@pytest.mark.parametrize("code", [400, 500])
def test_other_statuses_are_never_retried(code: int) -> None:
    run = drive(turn(), Server([status(code, b'{"error":{"code":1,"message":"no"}}')]))
    assert len(run.sent(Send)) == 1
    assert isinstance(run.done.error, HTTPStatusError)
    assert run.done.error.message == "no"


def test_a_refused_key_is_an_authentication_error_and_nothing_is_cancelled() -> None:
    """A non-2xx answer started no generation: no DELETE after it."""
    run = drive(turn(), Server([status(401, b'{"error":{"code":401,"message":"Invalid"}}')]))
    assert isinstance(run.done.error, AuthenticationError)
    assert run.paths() == ["/v1/chat/completions"]
    assert [type(c) for c in run.commands] == [Send, ReadAll, Done]


def test_a_routers_answer_names_the_model() -> None:
    body = b'{"error":{"code":400,"message":"model \'m\' not found"}}'
    known = Known()
    known.router = False
    run = drive(turn(conf=config(model="m"), known=known), Server([status(400, body)]))
    assert isinstance(run.done.error, ModelNotFoundError)


def test_an_error_body_over_the_limit_is_cut_and_still_an_http_status_error() -> None:
    run = drive(turn(conf=config(max_error_body_bytes=8)), Server([status(502, b"x" * 50)]))
    error = run.done.error
    assert isinstance(error, HTTPStatusError)
    assert error.body == "x" * 8
    assert "cut at max_error_body_bytes, 8 bytes" in str(error)


def test_an_error_body_that_stalls_is_a_stall_and_one_that_breaks_is_judged_alone() -> None:
    stalled = drive(turn(), Server([Answer(500, JSON, [Fail("stall")])]))
    assert isinstance(stalled.done.error, StalledError)
    broken = drive(turn(), Server([Answer(500, JSON, [Fail("read")])]))
    assert isinstance(broken.done.error, HTTPStatusError)
    assert broken.done.error.body == ""


def test_a_redirect_is_never_followed() -> None:
    run = drive(turn(), Server([status(307, location="http://elsewhere/")]))
    assert isinstance(run.done.error, HTTPStatusError)
    assert "redirect to 'http://elsewhere/' not followed" in str(run.done.error)


# -- the loading wait -------------------------------------------------------------------------
def test_a_loading_model_is_waited_for_then_the_chat_goes_again() -> None:
    server = Server([LOADING, LOADING, answer()], {"/health": [(503, b""), HEALTHY]})
    run = drive(turn(), server)
    assert run.events[0] == Waiting(slot_busy=False)
    assert run.events.count(Waiting(slot_busy=False)) == 1  # once per turn
    assert run.sent(Arm) == [Arm("load", 5.0)]  # one deadline for the whole turn
    assert [c.seconds for c in run.sent(Sleep)] == [0.05, 0.1, 0.2]
    assert run.done.completion is not None


def test_a_loading_wait_that_outlasts_load_timeout() -> None:
    server = Server([LOADING], {"/health": [(503, b"")]}, sleeps=["woke", FIRE])
    run = drive(turn(), server)
    assert isinstance(run.done.error, LoadTimeoutError)
    assert "still loading after 5.0 s" in str(run.done.error)
    fired = Server([LOADING], {"/health": [FIRE]})
    assert isinstance(drive(turn(), fired).done.error, LoadTimeoutError)


def test_a_server_that_dies_while_loading_fails_after_the_retries() -> None:
    server = Server([LOADING], {"/health": [Fail("connect", "refused")]})
    run = drive(turn(conf=config(max_retries=2)), server)
    assert isinstance(run.done.error, ConnectError)
    assert "stopped answering while the model loaded" in str(run.done.error)
    assert run.paths().count("/health") == 3


def test_a_slow_health_is_no_answer_yet() -> None:
    server = Server([LOADING, answer()], {"/health": [Fail("timeout"), HEALTHY]})
    assert drive(turn(), server).done.completion is not None


# -- transport failures before the head ------------------------------------------------------
def test_a_refused_connection_is_retried_then_fails() -> None:
    run = drive(turn(conf=config(max_retries=2)), Server([Fail("connect", "refused")]))
    assert [e.attempt for e in run.events if isinstance(e, Retrying)] == [1, 2]
    assert isinstance(run.done.error, ConnectError)
    assert str(run.done.error) == "refused"
    assert "/v1/stream?conv_id=c0ffee" not in run.paths()  # nothing started: no cancel


def test_the_api_key_never_shows_in_a_retry_or_an_error() -> None:
    key = "sk-secret-key-0123456789"
    why = f"refused (Authorization: Bearer {key})"
    run = drive(turn(conf=config(api_key=key, max_retries=1)), Server([Fail("connect", why)]))
    assert all(key not in repr(e) for e in run.events)
    assert key not in str(run.done.error)


@pytest.mark.parametrize(
    ("kind", "error"), [("timeout", WaitTimeoutError), ("protocol", ProtocolError)]
)
def test_a_timeout_or_bad_http_before_the_head(kind: str, error: type) -> None:
    run = drive(turn(), Server([Fail(kind)]))
    assert isinstance(run.done.error, error)
    if kind == "timeout":
        assert str(run.done.error) == "no response headers within 600.0 s"


def test_unanswered_without_resume_is_never_sent_again() -> None:
    run = drive(turn(conversation_id=None), Server([Fail("read", "closed")]))
    assert isinstance(run.done.error, StreamClosedEarlyError)
    assert str(run.done.error) == "no response: closed"
    assert len(run.sent(Send)) == 1


def test_unanswered_on_a_server_known_not_to_resume_is_not_asked() -> None:
    known = Known()
    known.resume = False
    run = drive(turn(known=known), Server([Fail("read", "closed")]))
    assert run.paths() == ["/v1/chat/completions"]


def test_unanswered_with_a_session_goes_on_from_its_first_byte() -> None:
    run = drive(turn(), Server([Fail("read", "closed"), answer()]))
    assert [c.path for c in run.sent(Send)] == [
        "/v1/chat/completions",
        "/v1/stream?conv_id=c0ffee&from=0",
    ]
    assert run.events[0] == Resuming(1, 0, "closed")
    assert Content("Hi") in run.events
    assert run.done.completion is not None


def test_unanswered_and_no_session_there_is_sent_again_with_the_same_id() -> None:
    missing = Answer(404, JSON, [b"File Not Found"])
    server = Server(
        [Fail("read", "closed"), missing, answer()], {"/v1/streams/lookup": [(200, b"")]}
    )
    run = drive(turn(), server)
    posts = [c for c in run.sent(Send) if c.method == "POST"]
    assert len(posts) == 2
    [retry] = [e for e in run.events if isinstance(e, Retrying)]
    assert "the server has no session for it: sending it again" in retry.error
    assert run.done.completion is not None


def test_unanswered_and_no_session_with_no_retry_left() -> None:
    missing = Answer(404, JSON, [b""])
    server = Server([Fail("read", "closed"), missing], {"/v1/streams/lookup": [(200, b"")]})
    run = drive(turn(conf=config(max_retries=0)), server)
    assert isinstance(run.done.error, StreamClosedEarlyError)
    assert "sending it again" in str(run.done.error)


def test_unanswered_on_a_server_without_resume() -> None:
    missing = Answer(404, JSON, [b""])
    server = Server([Fail("read", "closed"), missing], {"/v1/streams/lookup": [(404, b"")]})
    known = Known()
    run = drive(turn(known=known), server)
    assert str(run.done.error) == "no response: closed"
    assert known.resume is False


def test_a_connect_failure_after_an_unanswered_attempt_is_closed_early() -> None:
    missing = Answer(404, JSON, [b""])
    server = Server(
        [Fail("read", "closed"), missing, Fail("connect", "refused")],
        {"/v1/streams/lookup": [(200, b"")]},
    )
    run = drive(turn(conf=config(max_retries=1)), server)
    assert isinstance(run.done.error, StreamClosedEarlyError)


def test_a_stream_that_breaks_is_cancelled_in_the_cleanup_and_a_404_says_no_resume() -> None:
    body = answer().body[:2]
    known = Known()
    known.resume = True  # a cut would be resumed: stop it first instead
    run = drive(
        turn(known=known), Server([Answer(body=body)], {"/v1/stream": [(404, b"")]}), stop_after=3
    )
    assert run.done == Done()
    assert isinstance(run.commands[-3], Close)
    delete = run.commands[-2]
    assert isinstance(delete, Call)
    assert (delete.method, delete.path, delete.quiet) == (
        "DELETE",
        "/v1/stream?conv_id=c0ffee",
        2.0,
    )
    assert known.resume is False


def test_a_cancel_that_fails_is_let_go() -> None:
    body = answer().body[:2]
    run = drive(turn(), Server([Answer(body=body)], {"/v1/stream": [Fail()]}), stop_after=2)
    assert run.done == Done()


def test_the_same_body_is_sent_on_every_attempt() -> None:
    run = drive(turn(body=b"B"), Server([status(503), status(502), answer()]))
    assert {c.body for c in run.sent(Send)} == {b"B"}
    assert json.loads(b"{}") == {}
