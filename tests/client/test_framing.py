"""How the body is cut into reads never changes the events or the Completion.

Through respx (in-memory httpx, exact control of every read) and through the fault server
over both transports (real sockets; one HTTP chunk per byte, UTF-8 split across reads, ``:``
pings, several events per read, a last event without its blank line, 1 MB lines).
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from itertools import pairwise
from typing import Any

import httpx
import msgspec
import pytest
import respx

from llamaclient import (
    CacheReport,
    ChatEvent,
    Client,
    Completion,
    Config,
    Content,
    FinishReason,
    Progress,
    Reasoning,
    ServerError,
    ThinkingCapped,
    Timings,
    ToolCall,
    ToolCallDelta,
    ToolCallDone,
    Usage,
)
from tests.conftest import CHAT, CONTROL, ClientFactory, drain, user
from tests.support.faultserver import (
    DEFAULT_ID,
    DEFAULT_MODEL,
    DONE,
    PING,
    Chunk,
    End,
    FaultServer,
    Sleep,
    Status,
    Step,
    chat_chunk,
    chat_chunks,
    error_event,
    sse,
    stream,
    timings,
)

pytestmark = pytest.mark.anyio

BASE = "http://llama.test"
ROLE = {"role": "assistant", "content": None}
CALL_ID = "x" * 32


def rich_body() -> bytes:
    """A llama-server stream with everything: progress, role deltas, multi-byte UTF-8 in
    reasoning, content and tool-call arguments, pings, usage and ``[DONE]``."""
    progress = {"total": 20, "cache": 0, "processed": 0, "time_ms": 0.0}
    usage = {"completion_tokens": 6, "prompt_tokens": 20, "total_tokens": 26,
             "prompt_tokens_details": {"cached_tokens": 0}}
    return b"".join([
        sse(chat_chunk(ROLE, prompt_progress=progress)),
        sse(chat_chunk(ROLE, prompt_progress=dict(progress, processed=20, time_ms=3.5))),
        PING,
        sse(chat_chunk(ROLE)) + sse(chat_chunk({"reasoning_content": "Let me — é ✓ 好"},
                                               timings=timings(1))),
        sse(chat_chunk({"reasoning_content": " 😀."}, timings=timings(2))),
        sse(chat_chunk({"content": "Hé"}, timings=timings(3))),
        PING,
        sse(chat_chunk({"content": "llo 世界 🎉"}, timings=timings(4))),
        sse(chat_chunk({"tool_calls": [{"index": 0, "id": CALL_ID, "type": "function",
                                        "function": {"name": "find", "arguments": "{\"q\": \""}}]},
                       timings=timings(5))),
        sse(chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": "ünï😀\"}"}}]},
                       timings=timings(6))),
        sse(chat_chunk({}, finish_reason="tool_calls")) + sse(
            chat_chunk(None, usage=usage, timings=timings(6))),
        PING,
        DONE,
    ])


RICH_EVENTS: list[ChatEvent] = [
    Progress(20, 0, 0, 0.0),
    Progress(20, 0, 20, 3.5),
    Reasoning("Let me — é ✓ 好"),
    Reasoning(" 😀."),
    Content("Hé"),
    Content("llo 世界 🎉"),
    ToolCallDelta(0, CALL_ID, "find", "{\"q\": \""),
    ToolCallDelta(0, None, None, "ünï😀\"}"),
    ToolCallDone(0, ToolCall(CALL_ID, "find", "{\"q\": \"ünï😀\"}")),
]
RICH_COMPLETION = Completion(
    id=DEFAULT_ID,
    model=DEFAULT_MODEL,
    content="Héllo 世界 🎉",
    reasoning_content="Let me — é ✓ 好 😀.",
    tool_calls=(ToolCall(CALL_ID, "find", "{\"q\": \"ünï😀\"}"),),
    finish_reason=FinishReason.TOOL_CALLS,
    timings=Timings(cache_n=0, prompt_n=20, predicted_n=6, prompt_ms=50.0,
                    prompt_per_second=400.0, predicted_ms=60.0, predicted_per_second=100.0),
    usage=Usage(prompt_tokens=20, completion_tokens=6, cached_tokens=0),
    reasoning_tokens=2,
    cache=CacheReport(prompt=20, reused=0),
)
RICH = rich_body()


def compact_body() -> bytes:
    """A short stream with the same kinds of events (fewer bytes: every split point of it is
    tried one by one)."""

    def ev(obj: dict[str, Any]) -> bytes:
        return sse({"id": DEFAULT_ID, **obj})

    def delta(d: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        return ev({"choices": [{"finish_reason": finish, "index": 0, "delta": d}], **extra})

    return b"".join([
        delta(ROLE, prompt_progress={"total": 3, "cache": 1, "processed": 3, "time_ms": 1.5}),
        PING,
        delta({"reasoning_content": "é✓"}) + delta({"reasoning_content": "好😀"}),
        delta({"content": "Hé"}),
        PING,
        delta({"content": "😀 世"}),
        delta({"tool_calls": [{"index": 0, "id": CALL_ID, "type": "function",
                               "function": {"name": "f", "arguments": "{\"q\": \"ü"}}]}),
        delta({"tool_calls": [{"index": 0, "function": {"arguments": "😀\"}"}}]}),
        delta({}, "tool_calls") + ev({"choices": [], "usage": {"completion_tokens": 5,
                                                             "prompt_tokens": 3}}),
        DONE,
    ])


COMPACT = compact_body()
COMPACT_EVENTS: list[ChatEvent] = [
    Progress(3, 1, 3, 1.5),
    Reasoning("é✓"),
    Reasoning("好😀"),
    Content("Hé"),
    Content("😀 世"),
    ToolCallDelta(0, CALL_ID, "f", "{\"q\": \"ü"),
    ToolCallDelta(0, None, None, "😀\"}"),
    ToolCallDone(0, ToolCall(CALL_ID, "f", "{\"q\": \"ü😀\"}")),
]


def summary(events: list[ChatEvent]) -> list[tuple[str, int, str]]:
    """Events in short (type, text length, text head): readable diffs for 1 MB texts."""
    return [(type(e).__name__, len(getattr(e, "text", "")), getattr(e, "text", "")[:12])
            for e in events]


BIG = ("0123456789abcdé" * 70000)[: 1 << 20]  # 1 MiB of text, ~1.07 MB of UTF-8
BIG_BODY = b"".join(chat_chunks(["<", BIG, ">"], reasoning=BIG))
BIG_EVENTS: list[ChatEvent] = [Reasoning(BIG), Content("<"), Content(BIG), Content(">")]


def every_byte(body: bytes) -> list[bytes]:
    return [body[i : i + 1] for i in range(len(body))]


# -- respx: exact reads ------------------------------------------------------------------------
class Reads(httpx.AsyncByteStream):
    """A response body delivered as exactly these reads."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            yield piece


def sse_response(pieces: list[bytes]) -> httpx.Response:
    return httpx.Response(200, headers={"Content-Type": "text/event-stream"},
                          stream=Reads(pieces))


Outcome = tuple[list[ChatEvent], Completion | BaseException]


async def run_reads(
    client: Client, route: respx.Route, pieces: list[bytes], **request: Any
) -> Outcome:
    route.mock(return_value=sse_response(pieces))
    stream_ = client.chat(user(**request))
    events, error = await drain(stream_)
    return events, error if error is not None else stream_.completion


def same(a: Outcome, b: Outcome) -> bool:
    """Equal events, and equal Completions (or errors of one type with equal partials)."""
    (events_a, end_a), (events_b, end_b) = a, b
    if isinstance(end_a, BaseException) or isinstance(end_b, BaseException):
        return (
            type(end_a) is type(end_b)
            and events_a == events_b
            and getattr(end_a, "partial", None) == getattr(end_b, "partial", None)
        )
    return events_a == events_b and end_a == end_b


async def test_one_read_per_byte_gives_the_same_events_and_completion() -> None:
    async with respx.mock(base_url=BASE) as router, Client(Config(BASE, transport="httpx")) as c:
        route = router.post(CHAT)
        whole = await run_reads(c, route, [RICH])
        assert whole == (RICH_EVENTS, RICH_COMPLETION)
        assert same(await run_reads(c, route, every_byte(RICH)), whole)


async def test_every_single_split_point_gives_the_same_result() -> None:
    async with respx.mock(base_url=BASE) as router, Client(Config(BASE, transport="httpx")) as c:
        route = router.post(CHAT)
        whole = await run_reads(c, route, [COMPACT])
        assert whole[0] == COMPACT_EVENTS
        completion = whole[1]
        assert isinstance(completion, Completion)
        assert completion.content == "Hé😀 世"
        assert completion.reasoning_content == "é✓好😀"
        assert completion.usage == Usage(prompt_tokens=3, completion_tokens=5)
        bad = []
        for cut in range(1, len(COMPACT)):
            if not same(await run_reads(c, route, [COMPACT[:cut], COMPACT[cut:]]), whole):
                bad.append(cut)
        assert bad == []


async def test_random_sets_of_split_points_give_the_same_result() -> None:
    rng = random.Random(20261130)
    async with respx.mock(base_url=BASE) as router, Client(Config(BASE, transport="httpx")) as c:
        route = router.post(CHAT)
        for _ in range(200):
            cuts = sorted(rng.sample(range(1, len(RICH)), rng.randint(2, 60)))
            bounds = [0, *cuts, len(RICH)]
            pieces = [RICH[a:b] for a, b in pairwise(bounds)]
            assert await run_reads(c, route, pieces) == (RICH_EVENTS, RICH_COMPLETION), cuts


@pytest.mark.parametrize("size", [4096, 65536], ids=["4KiB-reads", "64KiB-reads"])
async def test_one_megabyte_line_in_exact_reads(size: int) -> None:
    pieces = [BIG_BODY[i : i + size] for i in range(0, len(BIG_BODY), size)]
    async with respx.mock(base_url=BASE) as router, Client(Config(BASE, transport="httpx")) as c:
        events, end = await run_reads(c, router.post(CHAT), pieces)
    assert summary(events) == summary(BIG_EVENTS)
    assert events == BIG_EVENTS
    assert isinstance(end, Completion)
    assert end.content == "<" + BIG + ">"
    assert end.reasoning_content == BIG


async def test_events_before_an_in_band_error_do_not_depend_on_reads() -> None:
    body = b"".join([*chat_chunks(["Hel", "lo"], finish_reason=None, done=False),
                     error_event("Compute error.")])
    async with respx.mock(base_url=BASE) as router, Client(Config(BASE, transport="httpx")) as c:
        route = router.post(CHAT)
        by_byte = await run_reads(c, route, every_byte(body))
        events, error = by_byte
        assert events == [Content("Hel"), Content("lo")]
        assert isinstance(error, ServerError)
        whole = await run_reads(c, route, [body])
        assert same(whole, by_byte), whole


async def test_thinking_budget_does_not_depend_on_reads() -> None:
    body = b"".join(chat_chunks(["Answer"], reasoning=["a", "b", "c", "d"]))
    expected = [Reasoning("a"), Reasoning("b"), ThinkingCapped(2), Reasoning("c"),
                Reasoning("d"), Content("Answer")]
    config = Config(BASE, transport="httpx", thinking_budget=2, thinking_grace=10)
    async with respx.mock(base_url=BASE) as router, Client(config) as c:
        router.post(CONTROL).respond(200, json={"success": True})
        route = router.post(CHAT)
        by_byte = await run_reads(c, route, every_byte(body), thinking=True)
        assert by_byte[0] == expected
        whole = await run_reads(c, route, [body], thinking=True)
        assert whole[0] == expected
        assert isinstance(whole[1], Completion)
        assert whole[1].thinking_capped is True


async def test_own_httpx_client_is_used_and_left_open() -> None:
    async with respx.mock(base_url=BASE) as router, httpx.AsyncClient() as http:
        route = router.post(CHAT)
        async with Client(Config(BASE), http_client=http) as c:
            assert await run_reads(c, route, every_byte(RICH)) == (RICH_EVENTS, RICH_COMPLETION)
        assert not http.is_closed
        assert route.call_count == 1


# -- fault server: real sockets, both transports ----------------------------------------------
def byte_chunks(body: bytes, gap: float = 0.0) -> list[Step]:
    steps: list[Step] = [Status(200)]
    for i, piece in enumerate(every_byte(body)):
        if gap and i:
            steps.append(Sleep(gap))
        steps.append(Chunk(piece))
    return [*steps, End()]


async def run_server(make_client: ClientFactory) -> Outcome:
    stream_ = make_client().chat(user())
    events, error = await drain(stream_)
    return events, error if error is not None else stream_.completion


async def test_one_http_chunk_per_byte(server: FaultServer, make_client: ClientFactory) -> None:
    server.route("POST", CHAT, byte_chunks(RICH))
    assert await run_server(make_client) == (RICH_EVENTS, RICH_COMPLETION)


async def test_all_events_in_one_http_chunk(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("POST", CHAT, stream([RICH]))
    assert await run_server(make_client) == (RICH_EVENTS, RICH_COMPLETION)


async def test_utf8_sequences_split_across_reads(
    server: FaultServer, make_client: ClientFactory
) -> None:
    text = "é✓好😀"
    body = b"".join(chat_chunks([text]))
    at = body.index(text.encode())
    # Cut inside each multi-byte character, with a pause so that each piece is its own read.
    cuts = [at + 1, at + 3, at + 4, at + 7, at + 8, at + 9, at + 11, at + 12]
    bounds = [0, *cuts, len(body)]
    pieces = [body[a:b] for a, b in pairwise(bounds)]
    server.route("POST", CHAT, stream(pieces, delay=0.01))
    events, end = await run_server(make_client)
    assert events == [Content(text)]
    assert isinstance(end, Completion)
    assert end.content == text


async def test_pings_anywhere_are_ignored(
    server: FaultServer, make_client: ClientFactory
) -> None:
    head, *rest = chat_chunks(["a", "b"])
    server.route("POST", CHAT, stream([PING, PING, head, PING, *rest[:1], PING * 3, *rest[1:-1],
                                       PING, rest[-1], PING], delay=0.01))
    events, end = await run_server(make_client)
    assert events == [Content("a"), Content("b")]
    assert isinstance(end, Completion)
    assert end.content == "ab"
    assert end.finish_reason is FinishReason.STOP


@pytest.mark.parametrize("tail", [b"", b"\n"], ids=["no-newline", "one-newline"])
async def test_last_event_without_its_blank_line(
    server: FaultServer, make_client: ClientFactory, tail: bytes
) -> None:
    body = b"".join(chat_chunks(["Hi"], usage=False, done=False))
    assert body.endswith(b"\n\n")
    server.route("POST", CHAT, stream([body[:-2] + tail]))
    events, end = await run_server(make_client)
    assert events == [Content("Hi")]
    assert isinstance(end, Completion)
    assert end.finish_reason is FinishReason.STOP


@pytest.mark.parametrize("piece", [None, 65536, 4096], ids=["one-chunk", "64KiB", "4KiB"])
async def test_one_megabyte_lines(
    server: FaultServer, make_client: ClientFactory, piece: int | None
) -> None:
    line = max(BIG_BODY.split(b"\n"), key=len)
    assert len(line) > 1 << 20
    body = BIG_BODY
    pieces = [body] if piece is None else [body[i : i + piece] for i in range(0, len(body), piece)]
    server.route("POST", CHAT, stream(pieces))
    events, end = await run_server(make_client)
    assert summary(events) == summary(BIG_EVENTS)
    assert events == BIG_EVENTS
    assert isinstance(end, Completion)
    assert end.content == "<" + BIG + ">"
    assert end.reasoning_content == BIG


def test_rich_body_is_what_the_wire_doc_describes() -> None:
    # Guard for the fixture itself: compact JSON, one line per event, "\n\n" terminators.
    events = [e for e in RICH.split(b"\n\n") if e]
    assert events[-1] == b"data: [DONE]"
    for event in events:
        assert event == b":" or event.startswith(b"data: ")
        if event.startswith(b"data: {"):
            msgspec.json.decode(event[6:])
