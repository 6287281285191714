"""Live tool arguments through a real stream: ArgumentDelta events, ArgumentStream handles
taken before, during and after the call, eager ToolCallDone, and failures that never end the
chat."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from llamaclient import (
    ArgumentDelta,
    ChatRequest,
    Client,
    Config,
    ProtocolError,
    StreamClosedEarlyError,
    ToolCall,
    ToolCallDelta,
    ToolCallDone,
    UserMessage,
)
from llamaclient._types.events import ChatEvent
from tests.support.faultserver import DONE, FaultServer, chat_chunk, sse, stream

pytestmark = pytest.mark.anyio

ARGS = json.dumps({"path": "notes.txt", "content": 'line "1"\nline 2 \u00e9 \U0001f600'})
PIECES = [ARGS[i : i + 7] for i in range(0, len(ARGS), 7)]
REQUEST = ChatRequest([UserMessage("write it")])


def tool_stream(
    pieces: list[str], *, second: bool = True, finish: str = "tool_calls", gap: float = 0.0
) -> list[Any]:
    events = [
        sse(
            chat_chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "c0",
                            "type": "function",
                            "function": {"name": "write_file", "arguments": pieces[0]},
                        }
                    ]
                }
            )
        )
    ]
    events += [
        sse(chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}))
        for p in pieces[1:]
    ]
    if second:
        events.append(
            sse(
                chat_chunk(
                    {
                        "tool_calls": [
                            {
                                "index": 1,
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "list_dir", "arguments": "{}"},
                            }
                        ]
                    }
                )
            )
        )
    events.append(sse(chat_chunk({}, finish_reason=finish)))
    events.append(DONE)
    return stream(events, delay=gap)


async def run(srv: FaultServer, **kwargs: Any) -> tuple[list[ChatEvent], Client]:
    client = Client(Config(srv.url))
    events = []
    async with client, client.chat(REQUEST, **kwargs) as s:
        events = [e async for e in s]
    return events, client


async def test_argument_delta_events_decode_every_string_field() -> None:
    async with FaultServer() as srv:
        srv.route("POST", "/v1/chat/completions", tool_stream(PIECES))
        events, _ = await run(srv, live_arguments=True)
    deltas = [e for e in events if isinstance(e, ArgumentDelta)]
    assert {e.name for e in deltas} == {"write_file"}
    text: dict[str, str] = {}
    for e in deltas:
        text[e.field] = text.get(e.field, "") + e.text
    assert text == json.loads(ARGS)
    assert [e.field for e in deltas if e.done] == ["path", "content"]
    # each ArgumentDelta follows the ToolCallDelta that carried its text
    first = events.index(deltas[0])
    assert isinstance(events[first - 1], ToolCallDelta)


async def test_live_arguments_for_named_tools_only() -> None:
    async with FaultServer() as srv:
        srv.route("POST", "/v1/chat/completions", tool_stream(PIECES))
        events, _ = await run(srv, live_arguments={"list_dir"})
    assert not [e for e in events if isinstance(e, ArgumentDelta)]


async def test_tool_call_done_is_yielded_before_the_next_call_streams() -> None:
    async with FaultServer() as srv:
        srv.route("POST", "/v1/chat/completions", tool_stream(PIECES))
        events, _ = await run(srv)
    kinds = [(type(e).__name__, getattr(e, "index", None)) for e in events]
    done0 = kinds.index(("ToolCallDone", 0))
    assert kinds[done0 + 1] == ("ToolCallDelta", 1)
    done = [e for e in events if isinstance(e, ToolCallDone)]
    assert done[0].call == ToolCall("c0", "write_file", ARGS)
    assert done[1].call == ToolCall("c1", "list_dir", "{}")


async def test_handle_taken_before_streaming_reads_text_live_from_another_task() -> None:
    async with FaultServer() as srv:
        srv.route("POST", "/v1/chat/completions", tool_stream(PIECES, gap=0.005))
        async with Client(Config(srv.url)) as client, client.chat(REQUEST) as s:
            args = s.arguments(tool="write_file")
            content = args.field("content")
            pieces: list[str] = []

            async def reader() -> None:
                while (piece := await content.delta()) is not None:
                    pieces.append(piece)

            with anyio.fail_after(5):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(reader)
                    async for _ in s:
                        pass
    assert "".join(pieces) == json.loads(ARGS)["content"]
    assert len(pieces) > 2  # it arrived in pieces, not at the end
    assert await args.field("path").wait() == "notes.txt"
    assert args.finished


async def test_handle_by_index_taken_mid_stream_catches_up() -> None:
    async with FaultServer() as srv:
        srv.route("POST", "/v1/chat/completions", tool_stream(PIECES))
        async with Client(Config(srv.url)) as client, client.chat(REQUEST) as s:
            late = None
            async for event in s:
                if isinstance(event, ToolCallDelta) and event.index == 0 and late is None:
                    late = s.arguments(0)
            after = s.arguments(1)
    assert late is not None
    assert await late.field("content").wait() == json.loads(ARGS)["content"]
    assert after.fields == {}
    assert after.finished


async def test_stream_cut_mid_call_fails_the_handles_instead_of_hanging() -> None:
    async with FaultServer() as srv:
        events = tool_stream(PIECES[:3], second=False)[:-3]  # no finish, no DONE, no End
        srv.route("POST", "/v1/chat/completions", events)
        async with Client(Config(srv.url)) as client:
            s = client.chat(REQUEST)
            args = s.arguments(tool="write_file")
            with pytest.raises(StreamClosedEarlyError):
                async for _ in s:
                    pass
    with pytest.raises(ProtocolError, match="incomplete"), anyio.fail_after(5):
        await args.field("content").wait()


async def test_malformed_arguments_fail_the_handle_not_the_chat() -> None:
    bad = ['{"path": "a", ', "oops}"]
    async with FaultServer() as srv:
        srv.route("POST", "/v1/chat/completions", tool_stream(bad, second=False))
        async with Client(Config(srv.url)) as client:
            s = client.chat(REQUEST, live_arguments=True, lenient_arguments=False)
            args = s.arguments(0)
            events = [e async for e in s]
    assert s.completion.tool_calls[0].arguments == "".join(bad)
    assert [e.text for e in events if isinstance(e, ArgumentDelta)] == ["a"]
    with pytest.raises(ProtocolError) as info:
        await args.field("content").wait()
    assert "oops" in info.value.raw


async def test_arguments_taken_after_the_stream_ended_never_hang() -> None:
    async with FaultServer() as srv:
        srv.route("POST", "/v1/chat/completions", tool_stream(PIECES))
        async with Client(Config(srv.url)) as client, client.chat(REQUEST) as s:
            async for _ in s:
                pass
            done = s.arguments(0)  # a call that happened: complete, caught up
            never = s.arguments(tool="no_such_tool")  # a call that never came
    with anyio.fail_after(2):
        assert await done.field("path").wait() == "notes.txt"
    with pytest.raises(ProtocolError, match="already ended"), anyio.fail_after(2):
        await never.field("x").wait()


async def test_chat_streams_decode_leniently_by_default() -> None:
    sloppy = ['{"path": "a", "content": "say "hi"', "\nnow", '"}']  # unescaped quotes, raw newline
    async with FaultServer() as srv:
        srv.route("POST", "/v1/chat/completions", tool_stream(sloppy, second=False))
        async with Client(Config(srv.url)) as client:
            s = client.chat(REQUEST, live_arguments=True)
            args = s.arguments(0)
            events = [e async for e in s]
            strict = client.chat(REQUEST, lenient_arguments=False)
            assert not strict.arguments(0).is_lenient
            await strict.aclose()
    assert args.is_lenient
    deltas = [e for e in events if isinstance(e, ArgumentDelta) and e.field == "content"]
    assert "".join(e.text for e in deltas) == 'say "hi"\nnow'
    assert deltas[-1].done
    assert await args.field("content").wait() == 'say "hi"\nnow'
