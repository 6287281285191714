"""ChatTurn, resuming: a stream that breaks is picked up on the server's session at the
byte it stopped at (nothing lost, nothing repeated, wherever the cut falls), a server
without resume reports the break as it would without it, a session that is gone is a
``ResumeError``, and ``reattach`` picks a turn up from nothing. Synchronous."""

from __future__ import annotations

import pytest

from llamaclient import (
    ProtocolError,
    ResumeError,
    Resuming,
    StalledError,
    StreamClosedEarlyError,
)
from llamaclient._turn.commands import Close, Send, Sleep
from llamaclient._turn.known import Known
from llamaclient._types.events import ChatEvent
from tests.support import streams
from tests.turn.script import JSON, Answer, Fail, Server, config, drive, stream_body, turn

BODY = stream_body(streams.reasoning_answer())
WHOLE = drive(turn(), Server([Answer(body=[BODY])]))


def cut_at(offset: int, kind: str = "read", **server: object) -> Server:
    head: list[bytes | Fail] = [BODY[:offset]] if offset else []  # (a read is never empty)
    sends = [Answer(body=[*head, Fail(kind, "cut")])]
    return Server(sends, session=BODY, **server)  # type: ignore[arg-type]


def without_resuming(events: list[ChatEvent]) -> list[ChatEvent]:
    return [e for e in events if not isinstance(e, Resuming)]


FINISHED = BODY.index(b"\n\n", BODY.index(b'"finish_reason":"stop"')) + 2


@pytest.mark.parametrize("kind", ["read", "stall", "protocol"])
def test_a_cut_at_every_byte_is_resumed_with_nothing_lost_or_repeated(kind: str) -> None:
    # (Silence after the finish reason is the end of the answer: tested below.)
    for offset in range(FINISHED if kind == "stall" else len(BODY)):
        run = drive(turn(), cut_at(offset, kind))
        assert without_resuming(run.events) == WHOLE.events, offset
        assert run.done == WHOLE.done, offset
        [resume] = [c for c in run.sent(Send) if c.method == "GET"]
        assert resume.path == f"/v1/stream?conv_id=c0ffee&from={offset}"


def test_resuming_shows_after_the_first_reconnect_then_before_the_next() -> None:
    known = Known()
    first = drive(turn(known=known), cut_at(300))
    events = first.events
    resumed = [i for i, e in enumerate(events) if isinstance(e, Resuming)]
    assert [events[i] for i in resumed] == [Resuming(1, 300, "cut")]
    assert known.resume is True
    second = drive(turn(known=known), cut_at(300))
    i = next(i for i, c in enumerate(second.commands) if isinstance(c, Close))
    assert isinstance(second.commands[i + 1], Send)  # the first reconnect goes at once
    assert Resuming(1, 300, "cut") in second.events


def test_a_second_break_backs_off_and_the_reconnects_are_bounded() -> None:
    def session_cut() -> list[Answer]:
        return [Answer(body=[BODY[300:600], Fail("read", "again")])]

    run = drive(turn(), cut_at(300, resumes=session_cut()))
    assert without_resuming(run.events) == WHOLE.events
    assert len(run.sent(Sleep)) == 1  # the second reconnect waited
    once = drive(turn(conf=config(max_retries=1)), cut_at(300, resumes=session_cut()))
    assert isinstance(once.done.error, StreamClosedEarlyError)  # one reconnect per turn


def test_a_reconnect_that_fails_is_tried_again_then_given_up() -> None:
    run = drive(turn(), cut_at(300, resumes=[Fail("connect", "refused")]))
    assert run.done == WHOLE.done
    down = cut_at(900, resumes=[Fail("connect", "refused")] * 5)
    run = drive(turn(conf=config(max_retries=2)), down)
    assert isinstance(run.done.error, StreamClosedEarlyError)
    assert str(run.done.error) == "could not reconnect: refused"
    assert run.done.error.partial is not None


@pytest.mark.parametrize(
    ("kind", "error"),
    [("read", StreamClosedEarlyError), ("stall", StalledError), ("protocol", ProtocolError)],
)
def test_a_server_without_resume_reports_the_break_as_it_was(kind: str, error: type) -> None:
    missing = Answer(404, JSON, [b"File Not Found"])
    server = cut_at(300, kind, resumes=[missing], calls={"/v1/streams/lookup": [(404, b"")]})
    known = Known()
    run = drive(turn(known=known), server)
    assert type(run.done.error) is error
    assert not any(isinstance(e, Resuming) for e in run.events)  # never shown for it
    assert known.resume is False
    assert "/v1/stream?conv_id=c0ffee" not in run.paths()  # no cancel: nothing to cancel there


@pytest.mark.parametrize("code", [405, 501])
def test_a_405_or_501_from_the_route_means_no_resume_here(code: int) -> None:
    known = Known()
    run = drive(turn(known=known), cut_at(300, resumes=[Answer(code, JSON, [b""])]))
    assert type(run.done.error) is StreamClosedEarlyError
    assert known.resume is False
    again = drive(turn(known=known), cut_at(300))
    assert not [c for c in again.sent(Send) if c.method == "GET"]  # learnt once


def test_a_lookup_that_cannot_answer_asks_again_next_time() -> None:
    missing = Answer(404, JSON, [b""])
    known = Known()
    calls = {"/v1/streams/lookup": [Fail("connect")], "/v1/stream": [Fail("connect")]}
    server = cut_at(300, resumes=[missing], calls=calls)
    run = drive(turn(known=known), server)
    assert type(run.done.error) is StreamClosedEarlyError
    assert known.resume is None


def test_a_session_that_is_gone_is_a_resume_error() -> None:
    missing = Answer(404, JSON, [b"File Not Found"])
    server = cut_at(900, resumes=[missing], calls={"/v1/streams/lookup": [(200, b"[]")]})
    run = drive(turn(), server)
    error = run.done.error
    assert isinstance(error, ResumeError)
    assert str(error) == "the stream could not be resumed at byte 900: HTTP 404 File Not Found"
    assert error.partial is not None


@pytest.mark.parametrize("known_first", [True, False])
def test_other_answers_of_the_route_are_resume_errors(known_first: bool) -> None:
    known = Known()
    known.resume = True if known_first else None
    broken = Answer(500, JSON, [Fail("read")])  # and its body broke off too
    run = drive(turn(known=known), cut_at(300, resumes=[broken]))
    assert isinstance(run.done.error, ResumeError)
    assert "HTTP 500" in str(run.done.error)


def test_no_resume_for_a_refused_connection_or_on_a_server_without_it() -> None:
    known = Known()
    known.resume = False
    run = drive(turn(known=known), cut_at(300))
    assert type(run.done.error) is StreamClosedEarlyError
    assert not [c for c in run.sent(Send) if c.method == "GET"]


def test_silence_after_the_finish_reason_is_the_end_not_a_break() -> None:
    body = stream_body(streams.answer_only(), done=False)
    end = body.index(b"\n\n", body.index(b'"finish_reason":"length"')) + 2
    run = drive(turn(), Server([Answer(body=[body[:end], Fail("stall")])], session=body))
    assert run.done.completion is not None
    assert not [c for c in run.sent(Send) if c.method == "GET"]


# -- reattach -----------------------------------------------------------------------------
def reattach(offset: int = 0, **server: object) -> object:
    t = turn(body=None, reattach=True, offset=offset)
    return drive(t, Server(**server))  # type: ignore[arg-type]


def test_reattach_from_zero_gives_the_whole_turn() -> None:
    run = reattach(session=BODY)
    assert run.events == WHOLE.events  # type: ignore[attr-defined]
    assert run.done == WHOLE.done  # type: ignore[attr-defined]


def test_reattach_from_an_offset_skips_what_was_seen() -> None:
    run = reattach(600, session=BODY)
    [get] = run.sent(Send)  # type: ignore[attr-defined]
    assert get.path == "/v1/stream?conv_id=c0ffee&from=600"


def test_reattach_to_a_server_without_resume_or_a_session_gone() -> None:
    missing = Answer(404, JSON, [b"File Not Found"])
    run = reattach(resumes=[missing], calls={"/v1/streams/lookup": [(404, b"")]})
    assert isinstance(run.done.error, ResumeError)  # type: ignore[attr-defined]
    assert str(run.done.error) == "this server has no resumable streams"  # type: ignore[attr-defined]
    gone = reattach(resumes=[missing], calls={"/v1/streams/lookup": [(200, b"")]})
    assert "could not be resumed at byte 0" in str(gone.done.error)  # type: ignore[attr-defined]
