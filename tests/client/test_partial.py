"""``stream.partial``, ``stream.state`` and the message of ``stream.completion`` before the end
(issue #15.1): what arrived so far is exactly what the events showed, at any time, and the
state says how the stream ended.

Fault server, both transports.
"""

from __future__ import annotations

import anyio
import pytest

from llamaclient import (
    ChatEvent,
    Content,
    Reasoning,
    StalledError,
    StreamState,
    ToolCallDelta,
)
from tests.conftest import CHAT, ClientFactory, user
from tests.support.faultserver import FaultServer, Hold, chat_chunk, chat_chunks, sse, stream

pytestmark = pytest.mark.anyio

HEAD = chat_chunks(["Hel", "lo"], finish_reason=None, done=False)


async def test_a_finished_stream_has_its_completion_as_partial(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("POST", CHAT, stream(chat_chunks(["Hel", "lo"])))
    stream_ = make_client().chat(user())
    states = [stream_.state]
    assert stream_.partial.content is None
    assert stream_.partial.finish_reason is None
    with pytest.raises(RuntimeError, match="not been iterated yet"):
        stream_.completion  # noqa: B018
    async with stream_:
        async for _ in stream_:
            states.append(stream_.state)
            with pytest.raises(RuntimeError, match="not finished yet"):
                stream_.completion  # noqa: B018
    states.append(stream_.state)
    assert states == ["pending", "streaming", "streaming", "finished"]
    assert stream_.finished
    assert stream_.error is None
    assert stream_.partial is stream_.completion
    assert stream_.completion.content == "Hello"


async def test_stopped_stream_keeps_what_arrived(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("POST", CHAT, [*stream([b"".join(HEAD)], end=False), Hold()])
    stream_ = make_client().chat(user())
    events: list[ChatEvent] = []
    async with stream_:
        async for event in stream_:
            events.append(event)
            assert stream_.partial.content == "".join(
                e.text for e in events if isinstance(e, Content)
            )
            if len(events) == 2:
                break
    assert events == [Content("Hel"), Content("lo")]
    assert stream_.state is StreamState.STOPPED
    assert not stream_.finished
    assert stream_.partial.content == "Hello"
    assert stream_.partial.finish_reason is None
    with pytest.raises(RuntimeError, match="not finished: it was stopped"):
        stream_.completion  # noqa: B018


async def test_partial_shows_only_the_events_received_from_a_batch(
    server: FaultServer, make_client: ClientFactory
) -> None:
    """Both pieces come in one read (one batch); breaking after the first leaves the second
    unseen, so the partial does not show it."""
    server.route("POST", CHAT, [*stream([b"".join(HEAD)], end=False), Hold()])
    stream_ = make_client().chat(user())
    async with stream_:
        async for event in stream_:
            assert event == Content("Hel")
            break
    assert stream_.partial.content == "Hel"


async def test_a_cancelled_stream_is_stopped_with_its_partial(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("POST", CHAT, [*stream([b"".join(HEAD)], end=False), Hold()])
    stream_ = make_client().chat(user())
    with anyio.move_on_after(0.5):
        async for _ in stream_:
            pass
    assert stream_.state is StreamState.STOPPED
    assert stream_.partial.content == "Hello"


async def test_a_failed_stream_names_its_error(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("POST", CHAT, [*stream([b"".join(HEAD)], end=False), Hold()])
    stream_ = make_client(stall_timeout=0.2).chat(user())
    with pytest.raises(StalledError) as info:
        await stream_.collect()
    assert stream_.state is StreamState.FAILED
    assert stream_.error is info.value
    assert stream_.partial == info.value.partial
    assert stream_.partial.content == "Hello"
    why = r"not finished: it failed with StalledError: no bytes for 0\.2 s"
    with pytest.raises(RuntimeError, match=why):
        stream_.completion  # noqa: B018


async def test_closed_before_iterating_is_stopped(
    server: FaultServer, make_client: ClientFactory
) -> None:
    stream_ = make_client().chat(user())
    await stream_.aclose()
    assert stream_.state is StreamState.STOPPED
    assert stream_.partial.id == ""


async def test_unseen_tool_call_and_reasoning_pieces_are_not_in_the_partial(
    server: FaultServer, make_client: ClientFactory
) -> None:
    call0 = {"index": 0, "id": "c0", "type": "function",
             "function": {"name": "read", "arguments": '{"a'}}
    call0_more = {"index": 0, "function": {"arguments": '": 1}'}}
    call1 = {"index": 1, "id": "c1", "type": "function",
             "function": {"name": "list", "arguments": "{"}}
    pieces = [
        sse(chat_chunk({"reasoning_content": "Hm"})),
        sse(chat_chunk({"tool_calls": [call0]})),
        sse(chat_chunk({"tool_calls": [call0_more]})),
        sse(chat_chunk({"tool_calls": [call1]})),
        sse(chat_chunk({"reasoning_content": "!"})),
    ]
    server.route("POST", CHAT, [*stream([b"".join(pieces)], end=False), Hold()])
    for stop_after, content in [(1, ("Hm", ())), (2, ("Hm", (("read", '{"a'),))),
                                (3, ("Hm", (("read", '{"a": 1}'),))),
                                (4, ("Hm", (("read", '{"a": 1}'), ("list", "{"))))]:
        stream_ = make_client().chat(user())
        seen: list[ChatEvent] = []
        async with stream_:
            async for event in stream_:
                if isinstance(event, Reasoning | ToolCallDelta):
                    seen.append(event)
                if len(seen) == stop_after:
                    break
        partial = stream_.partial
        calls = tuple((c.name, c.arguments) for c in partial.tool_calls)
        assert (partial.reasoning_content, calls) == content, stop_after
