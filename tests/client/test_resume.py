"""Resumable streams against the fault server's llama-server-like sessions
(``tests/support/resumable.py``): a cut anywhere in the body is picked up where it was, with
no event lost or repeated; the bookkeeping is one byte count; closing a stream cancels the
generation; a server without the feature behaves exactly as without resume."""

from __future__ import annotations

import random
import re

import pytest

from llamaclient import (
    ChatEvent,
    Client,
    Completion,
    Reasoning,
    ResumeError,
    Resuming,
    Retrying,
    StalledError,
    StreamClosedEarlyError,
)
from tests.conftest import ClientFactory, TransportName, drain, make_config, user
from tests.support.faultserver import (
    Close,
    FaultServer,
    Raw,
    Request,
    Step,
    chat_chunks,
    stream,
)
from tests.support.resumable import CHAT, LOOKUP, STREAM, Cut, Sessions

pytestmark = pytest.mark.anyio

EVENTS = chat_chunks(["Hé", "llo", " wörld", " 🌊", "!"], reasoning=["hm", "m…"])
BODY = b"".join(EVENTS)


def without_resuming(events: list[ChatEvent]) -> list[ChatEvent]:
    return [e for e in events if not isinstance(e, Resuming)]


async def uncut(make_client: ClientFactory, server: FaultServer) -> tuple[list[ChatEvent],
                                                                            Completion]:
    Sessions(server, EVENTS)
    stream_ = make_client().chat(user())
    events, error = await drain(stream_)
    assert error is None
    return events, stream_.completion


def cut_points() -> list[int]:
    """Every offset inside the first two events (a split in the head of the body, in a JSON
    string, in a multi-byte character), each event boundary, and random others."""
    first = len(EVENTS[0]) + len(EVENTS[1])
    bounds = [sum(len(e) for e in EVENTS[:i]) for i in range(1, len(EVENTS))]
    rng = random.Random(7)
    others = rng.sample(range(first, len(BODY)), 12)
    return sorted({*range(1, first, 3), *bounds, *(b - 1 for b in bounds), *others})


async def test_cut_anywhere_loses_and_repeats_nothing(
    server: FaultServer, make_client: ClientFactory
) -> None:
    expected, completion = await uncut(make_client, server)
    for cut in cut_points():
        sessions = Sessions(server, EVENTS, cuts=[(cut, "close")])
        stream_ = make_client().chat(user())
        events, error = await drain(stream_)
        assert error is None, (cut, error)
        assert without_resuming(events) == expected, cut
        resumes = [(e.attempt, e.offset) for e in events if isinstance(e, Resuming)]
        assert resumes == [(1, cut)], cut
        assert stream_.completion == completion
        conv = stream_.conversation_id
        assert conv is not None
        assert sessions.gets == [(conv, cut)]
        assert sessions.deleted == []  # a finished turn needs no cancel


@pytest.mark.parametrize("how", ["reset", "hold"])
async def test_a_reset_or_a_stall_is_resumed_too(
    server: FaultServer, make_client: ClientFactory, how: str
) -> None:
    expected, completion = await uncut(make_client, server)
    cut = len(EVENTS[0]) + 5
    Sessions(server, EVENTS, cuts=[(cut, how)])  # type: ignore[list-item]
    stream_ = make_client(stall_timeout=0.3).chat(user())
    events, error = await drain(stream_)
    assert error is None
    assert without_resuming(events) == expected
    assert stream_.completion == completion


async def test_resuming_comes_before_the_rest_once_the_server_is_known(
    server: FaultServer, make_client: ClientFactory
) -> None:
    client = make_client()
    cut = len(EVENTS[0]) + len(EVENTS[1]) + 3
    for _ in range(2):
        Sessions(server, EVENTS, cuts=[(cut, "close")])
        events, error = await drain(client.chat(user()))
        assert error is None
        at = next(i for i, e in enumerate(events) if isinstance(e, Resuming))
        assert events[:at] == [Reasoning("hm"), Reasoning("m…")]  # what came before the cut


async def test_every_stream_has_its_own_conversation_id(
    server: FaultServer, make_client: ClientFactory
) -> None:
    Sessions(server, EVENTS)
    client = make_client()
    ids = []
    for _ in range(3):
        stream_ = client.chat(user())
        await drain(stream_)
        ids.append(stream_.conversation_id)
    sent = [r.headers["x-conversation-id"] for r in server.requests if r.path == CHAT]
    assert sent == ids
    assert len(set(ids)) == 3
    assert all(re.fullmatch(r"[0-9a-f]{32}", i or "") for i in ids)


async def test_resume_off_sends_no_id_and_a_cut_is_stream_closed_early(
    server: FaultServer, make_client: ClientFactory
) -> None:
    sessions = Sessions(server, EVENTS, cuts=[(len(EVENTS[0]) + 10, "close")])
    stream_ = make_client(resume=False).chat(user())
    _, error = await drain(stream_)
    assert isinstance(error, StreamClosedEarlyError)
    assert not isinstance(error, ResumeError)
    assert error.partial is not None
    assert error.partial.reasoning_content == "hm"
    assert stream_.conversation_id is None
    assert "x-conversation-id" not in server.requests[0].headers
    assert sessions.gets == []
    assert sessions.deleted == []


async def test_a_server_without_resume_is_learnt_once(
    server: FaultServer, make_client: ClientFactory
) -> None:
    """No /v1/stream routes: the cut is reported as without resume (the same error, the
    partial), no Resuming is shown, and the next cut on the same client asks nothing."""
    cut = len(EVENTS[0]) + 10
    server.route("POST", CHAT, *[stream(EVENTS[:2], end=False)] * 2)
    client = make_client()
    for round_ in range(2):
        events, error = await drain(client.chat(user()))
        assert isinstance(error, StreamClosedEarlyError), round_
        assert not isinstance(error, ResumeError)
        assert error.partial is not None
        assert not [e for e in events if isinstance(e, Resuming)]
    paths = [(r.method, r.path) for r in server.requests]
    assert paths == [("POST", CHAT), ("GET", STREAM), ("POST", LOOKUP), ("POST", CHAT)]
    assert cut  # the cut point only matters for the sessions' tests


@pytest.mark.parametrize("code", [405, 501])
async def test_a_resume_route_answering_405_or_501_means_no_resume_here(
    server: FaultServer, make_client: ClientFactory, code: int
) -> None:
    """A proxy, an older build or another server: the cut is reported exactly as without
    resume (not a ResumeError), and the next cut on the same client asks nothing."""
    from tests.support.faultserver import Json

    server.route("POST", CHAT, *[stream(EVENTS[:2], end=False)] * 2)
    server.route("GET", STREAM, [Json(code, {"error": {"message": "no"}})])
    client = make_client()
    for round_ in range(2):
        events, error = await drain(client.chat(user()))
        assert type(error) is StreamClosedEarlyError, (round_, error)
        assert error.partial is not None
        assert not [e for e in events if isinstance(e, Resuming)]
    paths = [(r.method, r.path) for r in server.requests]
    assert paths == [("POST", CHAT), ("GET", STREAM), ("POST", CHAT)]


async def test_a_stall_on_a_server_without_resume_is_still_a_stall(
    server: FaultServer, make_client: ClientFactory
) -> None:
    chunks = chat_chunks(["Hel"], finish_reason=None, done=False)
    server.route("POST", CHAT, [*stream(chunks, end=False), *[]])
    from tests.support.faultserver import Hold

    server.route("POST", CHAT, [*stream(chunks, end=False), Hold()])
    _, error = await drain(make_client(stall_timeout=0.3).chat(user()))
    assert isinstance(error, StalledError)
    assert error.partial is not None
    assert error.partial.content == "Hel"


async def test_an_expired_session_is_resume_error_with_the_partial(
    server: FaultServer, make_client: ClientFactory
) -> None:
    sessions = Sessions(server, EVENTS, cuts=[(len(EVENTS[0]) + 10, "close")], expired=True)
    events, error = await drain(make_client().chat(user()))
    assert isinstance(error, ResumeError)
    assert isinstance(error, StreamClosedEarlyError)
    assert error.partial is not None
    assert error.partial.reasoning_content == "hm"
    assert without_resuming(events)[-1] == Reasoning("hm")
    assert len(sessions.gets) == 1


async def test_attempts_are_bounded(server: FaultServer, make_client: ClientFactory) -> None:
    cut = len(EVENTS[0]) + 10
    again: tuple[int | None, Cut] = (3, "close")
    cuts: list[tuple[int | None, Cut]] = [(cut, "close"), *[again] * 10]
    sessions = Sessions(server, EVENTS, cuts=cuts)
    events, error = await drain(make_client(max_retries=2).chat(user()))
    assert isinstance(error, StreamClosedEarlyError)
    assert error.partial is not None
    offsets = [offset for _, offset in sessions.gets]
    assert len(offsets) == 2
    assert offsets == [cut, cut + 3]  # each reconnect picks up what the last one delivered
    assert [e.attempt for e in events if isinstance(e, Resuming)] == [1, 2]


async def test_closing_a_stream_early_cancels_its_generation(
    server: FaultServer, make_client: ClientFactory
) -> None:
    sessions = Sessions(server, EVENTS)
    async with make_client().chat(user()) as stream_:
        async for _ in stream_:
            break
    assert sessions.deleted == [stream_.conversation_id]


async def test_reattach_from_zero_replays_the_whole_turn(
    server: FaultServer, make_client: ClientFactory, transport: TransportName
) -> None:
    expected, completion = await uncut(make_client, server)
    sessions = Sessions(server, EVENTS)
    sessions.known["abc123"] = BODY
    async with Client(make_config(server.url, transport)) as other:
        stream_ = other.reattach("abc123")
        assert stream_.conversation_id == "abc123"
        events, error = await drain(stream_)
    assert error is None
    assert events == expected
    assert stream_.completion == completion
    assert sessions.gets == [("abc123", 0)]


async def test_reattach_to_an_unknown_conversation_is_resume_error(
    server: FaultServer, make_client: ClientFactory
) -> None:
    Sessions(server, EVENTS)
    events, error = await drain(make_client().reattach("nope"))
    assert events == []
    assert isinstance(error, ResumeError)
    assert error.partial is None


async def test_cancel_deletes_the_session(server: FaultServer, make_client: ClientFactory) -> None:
    sessions = Sessions(server, EVENTS)
    assert await make_client().cancel("c0ffee") is True
    assert sessions.deleted == ["c0ffee"]


async def test_cancel_never_raises(transport: TransportName) -> None:
    from tests.support.faultserver import refused_url

    async with Client(make_config(refused_url(), transport)) as client:
        assert await client.cancel("c0ffee") is False


async def test_a_drop_inside_the_head_picks_the_turn_up_from_the_session(
    server: FaultServer, make_client: ClientFactory
) -> None:
    """The server had the request (its session exists) but the head was cut: the turn is
    read from the session from byte 0, and the request is not sent again."""
    expected, completion = await uncut(make_client, server)
    sessions = Sessions(server, EVENTS)

    def cut_head(request: Request) -> list[Step]:
        sessions.known[request.headers["x-conversation-id"]] = BODY
        return [Raw(b"HTTP/1.1 200 OK\r\nServer: llama"), Close()]

    server.route("POST", CHAT, cut_head)
    stream_ = make_client(max_retries=0).chat(user())
    events, error = await drain(stream_)
    assert error is None
    assert events == [Resuming(1, 0, events[0].error), *expected]  # type: ignore[union-attr]
    assert stream_.completion == completion
    assert [r.path for r in server.requests].count(CHAT) == 2  # uncut(), then ours once
    assert sessions.gets == [(stream_.conversation_id, 0)]


async def test_a_drop_before_the_server_made_a_session_sends_again_with_the_same_id(
    server: FaultServer, make_client: ClientFactory
) -> None:
    expected, _ = await uncut(make_client, server)
    before = len(server.requests)
    sessions = Sessions(server, EVENTS)
    server.route("POST", CHAT, [Close()], lambda request: sessions._chat(request))
    stream_ = make_client(max_retries=1).chat(user())
    events, error = await drain(stream_)
    assert error is None
    assert [type(e) for e in events[:1]] == [Retrying]
    assert events[1:] == expected
    posts = [r for r in server.requests[before:] if r.path == CHAT]
    assert len(posts) == 2
    assert {r.headers["x-conversation-id"] for r in posts} == {stream_.conversation_id}


async def test_without_attempts_left_a_drop_before_the_head_is_stream_closed_early(
    server: FaultServer, make_client: ClientFactory
) -> None:
    Sessions(server, EVENTS)
    server.route("POST", CHAT, [Close()])
    events, error = await drain(make_client(max_retries=0).chat(user()))
    assert events == []
    assert isinstance(error, StreamClosedEarlyError)
    assert [r.path for r in server.requests].count(CHAT) == 1
