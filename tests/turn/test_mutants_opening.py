"""ChatTurn sending the chat and picking a stream up, at the edges the other suites leave
open (found by mutation testing, ``devtools/mutation.py turn``): retries counted across a
loading wait and a router's look, a chat sent again that stays "sent again" through them,
the exact errors of a break, of a resume that fails and of a session that is gone.
Synchronous."""

from __future__ import annotations

import msgspec
import pytest

from llamaclient import (
    ChatRequest,
    ConnectError,
    HTTPStatusError,
    ImagePart,
    ResumeError,
    Resuming,
    Retrying,
    StreamClosedEarlyError,
    UserMessage,
)
from llamaclient._turn.commands import Call, Done, Send, Sleep
from llamaclient._turn.known import Known
from llamaclient._turn.phase import TurnError
from tests.support import streams
from tests.turn.script import (
    Answer,
    CallAnswer,
    Fail,
    Server,
    answer,
    config,
    drive,
    status,
    stream_body,
    turn,
)

LOADING = (503, b'{"error":{"code":503,"message":"Loading model"}}')
NOT_LOADED = (400, b'{"error":{"code":400,"message":"model is not loaded","type":"x"}}')
LOADED = (200, msgspec.json.encode({"data": [{"id": "m", "status": {"value": "loaded"}}]}))
BODY = stream_body(streams.reasoning_answer())
PICTURE = ChatRequest([UserMessage([ImagePart(url="https://x/a.png")])])


def retrying(run: object) -> list[Retrying]:
    return [e for e in run.events if isinstance(e, Retrying)]  # type: ignore[attr-defined]


def a_router() -> Known:
    known = Known()
    known.router = True
    return known


# -- retries are counted for the whole turn -------------------------------------------------
def test_the_retries_of_a_look_count_across_a_loading_wait() -> None:
    calls: dict[str, list[CallAnswer]] = {
        "/props": [(502, b""), LOADING, (502, b""), (502, b"")],
        "/health": [(200, b"")],
    }
    run = drive(
        turn(PICTURE, media=frozenset({"vision"}), conf=config(max_retries=2)),
        Server(calls=calls),
    )
    assert [(e.attempt, e.error) for e in retrying(run)] == [(1, "HTTP 502"), (2, "HTTP 502")]
    assert run.paths().count("/props") == 4
    assert run.done.completion is not None  # a look that still fails leaves it unjudged


def test_the_retries_of_the_chat_count_across_a_loading_wait() -> None:
    sends: list[Answer | Fail] = [status(502), status(*LOADING), status(502), answer()]
    run = drive(turn(conf=config(max_retries=1)), Server(sends, calls={"/health": [(200, b"")]}))
    assert [e.attempt for e in retrying(run)] == [1]
    assert isinstance(run.done.error, HTTPStatusError)
    assert run.done.error.status == 502


def test_the_retries_of_the_chat_count_across_a_routers_look() -> None:
    """A refused connection is retried with the chat as it was (optimistic); the router
    then refuses it, the turn looks, and the chat goes on with the retries it has left."""
    sends: list[Answer | Fail] = [
        Fail("connect", "refused"),
        status(*NOT_LOADED),
        status(502),
        answer(),
    ]
    run = drive(
        turn(conf=config(model="m", max_retries=1), known=a_router()),
        Server(sends, calls={"/models": [LOADED]}),
    )
    assert run.paths() == [
        "/v1/chat/completions?autoload=false",
        "/v1/chat/completions?autoload=false",
        "/models",
        "/v1/chat/completions",
    ]
    assert [e.attempt for e in retrying(run)] == [1]
    assert isinstance(run.done.error, HTTPStatusError)
    assert run.done.error.status == 502


def unanswered_then(refusal: Answer, **kw: object) -> Server:
    """A chat that got no answer (no session for it on the server), sent again, refused
    with ``refusal``, then sent once more and refused a connection."""
    return Server(
        [Fail("read", "cut"), refusal, Fail("connect", "refused")],
        resumes=[status(404)],
        calls={"/v1/streams/lookup": [(200, b'{"conversation_ids":[]}')], **kw},  # type: ignore[dict-item]
    )


def test_a_chat_sent_again_stays_sent_again_through_a_loading_wait() -> None:
    server = unanswered_then(status(*LOADING), **{"/health": [(200, b"")]})
    run = drive(turn(conf=config(max_retries=1)), server)
    error = run.done.error
    assert type(error) is StreamClosedEarlyError
    assert str(error) == "refused"  # not "could not connect": it was sent before


def test_a_chat_sent_again_stays_sent_again_through_a_routers_look() -> None:
    server = unanswered_then(status(*NOT_LOADED), **{"/models": [LOADED]})
    run = drive(turn(conf=config(model="m", max_retries=1), known=a_router()), server)
    error = run.done.error
    assert type(error) is StreamClosedEarlyError
    assert str(error) == "refused"


def test_a_chat_with_no_session_and_no_retry_left_says_so() -> None:
    server = Server(
        [Fail("read", "cut")],
        resumes=[status(404)],
        calls={"/v1/streams/lookup": [(200, b"{}")]},
    )
    run = drive(turn(conf=config(max_retries=0)), server)
    error = run.done.error
    assert type(error) is StreamClosedEarlyError
    assert str(error) == "cut; the server has no session for it: sending it again"


def test_a_turn_stopped_while_an_unanswered_chat_is_looked_for_cancels_it() -> None:
    """No status line came: the server may be generating, so the cleanup cancels."""
    run = drive(turn(), Server([Fail("read", "cut")]), stop_after=1)
    assert run.paths()[-1] == "/v1/stream?conv_id=c0ffee"
    [cancel] = run.sent(Call)
    assert cancel.method == "DELETE"


# -- the chat's own answers -----------------------------------------------------------------
def test_without_a_model_a_router_refusal_is_a_plain_status_error() -> None:
    run = drive(turn(conf=config(max_retries=0)), Server([status(*NOT_LOADED)]))
    assert type(run.done.error) is HTTPStatusError


def test_a_body_handed_over_whole_is_not_taken_for_a_cut_one() -> None:
    t = turn()
    t.opened(500, {"content-type": "application/json"}.get)
    t.body(b'{"error":{"code":500,"message":"boom"}}')
    assert isinstance(t.outcome, HTTPStatusError)
    assert "cut at max_error_body_bytes" not in str(t.outcome)


def test_a_body_before_any_status_is_a_driver_bug_named_exactly() -> None:
    t = turn()
    with pytest.raises(TurnError) as caught:
        t.body(b"")
    assert str(caught.value) == f"body() while the turn is sending the chat ({t.command!r})"
    r = turn()
    r.opened(200, {"content-type": "text/event-stream"}.get)
    r.failed("read", "cut")
    r.performed()  # the broken response is closed: the resume request goes
    with pytest.raises(TurnError) as resumed:
        r.body(b"")
    assert str(resumed.value) == f"body() while the turn is resuming ({r.command!r})"


# -- a stream that breaks -------------------------------------------------------------------
def broken(**server: object) -> Server:
    return Server([Answer(body=[BODY[:300], Fail("read", "cut")])], **server)  # type: ignore[arg-type]


def resumes_known() -> Known:
    known = Known()
    known.resume = True
    return known


def test_on_a_server_known_to_resume_the_resume_shows_before_it_is_tried() -> None:
    run = drive(turn(known=resumes_known()), broken(resumes=[status(404, b"gone")]))
    assert Resuming(1, 300, "cut") in run.events
    assert isinstance(run.done.error, ResumeError)


def test_a_break_on_a_server_without_resume_is_reported_with_its_own_message() -> None:
    run = drive(turn(), broken(resumes=[status(405)]))
    assert type(run.done.error) is StreamClosedEarlyError
    assert str(run.done.error) == "the stream broke: cut"
    off = drive(turn(conversation_id=None), broken())
    assert str(off.done.error) == "the stream broke: cut"


def test_a_gone_session_quotes_the_start_of_the_answer_decoded_leniently() -> None:
    body = b"\xff" + b"x" * 299
    run = drive(turn(known=resumes_known()), broken(resumes=[status(404, body)]))
    error = run.done.error
    assert isinstance(error, ResumeError)
    quoted = "\ufffd" + "x" * 199
    assert str(error) == f"the stream could not be resumed at byte 300: HTTP 404 {quoted}"


def test_a_gone_session_whose_answer_breaks_is_judged_by_its_status() -> None:
    refusal = Answer(404, {"content-type": "application/json"}, [Fail("read", "x")])
    run = drive(turn(known=resumes_known()), broken(resumes=[refusal]))
    assert str(run.done.error) == "the stream could not be resumed at byte 300: HTTP 404 "


def test_a_second_break_waits_a_backoff_before_reconnecting() -> None:
    again = Answer(body=[BODY[300:400], Fail("read", "cut")])
    conf = config(retry_backoff=0.5, retry_max_backoff=4.0, max_retries=3)
    run = drive(turn(conf=conf), broken(resumes=[again], session=BODY))
    [sleep] = run.sent(Sleep)
    assert 0 < sleep.seconds <= 4.0
    assert run.done.completion is not None


def test_a_failed_whole_body_read_needs_no_close() -> None:
    """``ReadAll`` releases the response whatever happens: a failure closes nothing more
    (the cleanup only cancels the generation)."""
    json = {"content-type": "application/json"}
    run = drive(turn(), Server([Answer(200, json, [Fail("read", "cut")])]))
    assert [type(c).__name__ for c in run.commands] == ["Send", "ReadAll", "Call", "Done"]
    assert str(run.done.error) == "the stream broke: cut"
    stalled = drive(
        turn(conf=config(stall_timeout=9.0)), Server([Answer(200, json, [Fail("stall", "x")])])
    )
    assert str(stalled.done.error) == "no bytes for 9.0 s while reading a response body"
    assert not isinstance(stalled.done.error, ConnectError)


def test_a_stream_cut_by_a_refused_connection_is_not_resumed() -> None:
    run = drive(turn(), Server([Answer(body=[BODY[:300], Fail("connect", "cut")])], session=BODY))
    assert type(run.done.error) is StreamClosedEarlyError
    assert not [s for s in run.sent(Send) if s.method == "GET"]


def test_a_resume_answered_300_is_no_stream() -> None:
    run = drive(turn(known=resumes_known()), broken(resumes=[status(300, b"moved")]))
    error = run.done.error
    assert isinstance(error, ResumeError)
    assert str(error) == "the stream could not be resumed at byte 300: HTTP 300 moved"


def test_a_reattached_turn_stopped_while_streaming_cancels_the_generation() -> None:
    t = turn(body=None, reattach=True)
    run = drive(t, Server(session=BODY), stop_after=2)  # the head, then one read
    assert run.paths()[0] == "/v1/stream?conv_id=c0ffee&from=0"
    assert [c.method for c in run.sent(Call)] == ["DELETE"]
    assert run.done == Done()


@pytest.mark.parametrize(
    ("conversation", "query"), [("c0ffee", "c0ffee"), ("a b/c", "a%20b/c"), ("", "")]
)
def test_a_reattached_turn_asks_for_exactly_its_conversation(conversation: str, query: str) -> None:
    t = turn(body=None, reattach=True, offset=7, conversation_id=conversation)
    [get] = drive(t, Server(resumes=[status(410)])).sent(Send)
    assert get.path == f"/v1/stream?conv_id={query}&from=7"
