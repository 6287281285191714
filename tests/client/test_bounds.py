"""Answers that stop half-way or are not what llama-server sends never hang the client and
only raise our own errors."""

from __future__ import annotations

import time
import tracemalloc

import pytest

from llamaclient import (
    ChatEvent,
    ChatStream,
    Content,
    HTTPStatusError,
    ProtocolError,
    StalledError,
)
from tests.conftest import CHAT, ClientFactory, TransportName, drain, user
from tests.support.faultserver import (
    Chunk,
    Close,
    End,
    FaultServer,
    Hold,
    Json,
    Raw,
    Response,
    Status,
    Step,
    chat_chunk,
    chat_chunks,
    sse,
    stream,
)
from tests.support.nesting import TOO_DEEP

pytestmark = pytest.mark.anyio

HALF_BODY = [
    Status(500, {"Content-Type": "application/json", "Content-Length": "100"}, chunked=False),
    Raw(b'{"error":'),
    Hold(),
]
HALF_JSON_200 = [
    Status(200, {"Content-Type": "application/json", "Content-Length": "100"}, chunked=False),
    Raw(b'{"id":'),
    Hold(),
]


@pytest.mark.parametrize("script", [HALF_BODY, HALF_JSON_200], ids=["error-body", "json-200"])
async def test_a_body_that_stops_half_way_is_a_stall(
    server: FaultServer, make_client: ClientFactory, script: list[Step]
) -> None:
    server.route("POST", CHAT, script)
    started = time.monotonic()
    events, error = await drain(make_client(stall_timeout=0.3).chat(user()))
    assert time.monotonic() - started < 3
    assert isinstance(error, StalledError), error
    assert events == []


async def test_helper_answers_that_are_not_json_are_protocol_errors(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("GET", "/slots", [Response(200, b"<html>proxy</html>", "text/html")])
    with pytest.raises(ProtocolError, match="not JSON"):
        await make_client().slots()


@pytest.mark.parametrize("body", [{"slots": []}, [1, 2], ["x"]])
async def test_a_slots_answer_of_another_shape_does_not_block_a_pinned_chat(
    server: FaultServer, make_client: ClientFactory, body: object
) -> None:
    from tests.support.faultserver import chat_chunks, stream

    server.route("GET", "/slots", [Json(200, body)])
    server.route("POST", CHAT, stream(chat_chunks(["Hi"])))
    events, error = await drain(make_client().chat(user(slot=1, wait=False)))
    assert error is None, error
    assert events == [Content("Hi")]


@pytest.mark.parametrize("ending", ["close", "reset"])
async def test_a_cut_after_the_finish_reason_is_a_whole_answer(
    server: FaultServer, make_client: ClientFactory, ending: str
) -> None:
    from tests.support.faultserver import Close, Reset, chat_chunks, stream

    chunks = chat_chunks(["Hel", "lo"], usage=False, done=False)
    server.route(
        "POST", CHAT, [*stream(chunks, end=False), Close() if ending == "close" else Reset()]
    )
    chat = make_client().chat(user())
    events, error = await drain(chat)
    assert error is None, error
    assert chat.completion.content == "Hello"
    assert events == [Content("Hel"), Content("lo")]


# -- the reliability rules over real sockets (both transports, asyncio and trio) --------------
MiB = 1024 * 1024
PIECE = b"x" * 65536  # one object, sent 800 times: the server itself holds 64 KiB


def _many(n: int, *, chunked: bool = True) -> list[Step]:
    return [Chunk(PIECE) if chunked else Raw(PIECE) for _ in range(n)]


async def _peak(stream: ChatStream) -> tuple[list[ChatEvent], BaseException | None, int]:
    """Drain ``stream`` under tracemalloc: events, error, peak bytes allocated meanwhile."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        events, error = await drain(stream)
        return events, error, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


async def test_a_50_mb_error_body_is_not_read_whole(
    server: FaultServer, make_client: ClientFactory
) -> None:
    """The bug: a 50 MB error body was read whole (100 MiB peak) and kept in
    HTTPStatusError.body. Now reading stops past max_error_body_bytes (64 KiB), and the
    answer is still an HTTPStatusError (a caller who catches those for 5xx catches this one
    too), with the start of the body."""
    head = Status(500, {"Content-Type": "text/html", "Connection": "close"}, chunked=False)
    server.route("POST", CHAT, [head, *_many(800, chunked=False), Close()])
    events, error, peak = await _peak(make_client().chat(user()))
    assert isinstance(error, HTTPStatusError), error
    assert error.status == 500
    assert "HTTP 500" in str(error)
    assert "cut at max_error_body_bytes, 65536 bytes" in str(error)
    assert 0 < len(error.body) <= 65536
    assert events == []
    assert peak < 4 * MiB, peak
    print(f"peak, 50 MB error body: {peak} bytes")


async def test_a_50_mb_answer_that_is_not_a_stream_stops_at_max_body_bytes(
    server: FaultServer, make_client: ClientFactory
) -> None:
    head = Status(200, {"Content-Type": "application/json"}, chunked=True)
    server.route("POST", CHAT, [head, *_many(800), Close()])
    events, error, peak = await _peak(make_client(max_body_bytes=MiB).chat(user()))
    assert isinstance(error, ProtocolError), error
    assert "max_body_bytes (1048576 bytes)" in str(error)
    assert events == []
    assert peak < 5 * MiB, peak
    print(f"peak, 50 MB JSON body, max_body_bytes=1 MiB: {peak} bytes")


async def test_a_50_mb_sse_line_stops_at_max_event_bytes_with_the_partial(
    server: FaultServer, make_client: ClientFactory
) -> None:
    """The bug: one SSE line of 200 MB without a newline peaked at 600 MiB and was kept in
    ProtocolError.raw."""
    head = sse(chat_chunk({"content": "Hel"}))
    server.route("POST", CHAT, [Status(200), Chunk(head + b"data: "), *_many(800), Close()])
    chat = make_client(max_event_bytes=MiB).chat(user())
    events, error, peak = await _peak(chat)
    assert isinstance(error, ProtocolError), error
    assert "max_event_bytes (1048576 bytes)" in str(error)
    assert len(error.raw) <= 65536
    assert events == [Content("Hel")]
    assert error.partial is not None
    assert error.partial.content == "Hel"
    assert peak < 5 * MiB, peak
    print(f"peak, 50 MB SSE line, max_event_bytes=1 MiB: {peak} bytes")


async def test_the_default_limits_let_a_big_event_through(
    server: FaultServer, make_client: ClientFactory
) -> None:
    big = "y" * (3 * MiB)
    server.route("POST", CHAT, stream(chat_chunks([big, "!"])))
    events, error = await drain(make_client().chat(user()))
    assert error is None, error
    assert events == [Content(big), Content("!")]


# 2 KB on 3.11, 20 KB on 3.13 (tests/support/nesting.py): msgspec raised a bare RecursionError
DEEP = b'{"x":' + b"[" * TOO_DEEP


@pytest.mark.parametrize("path", ["/slots", "/props", "/health"])
async def test_deep_json_in_a_helper_answer_is_a_protocol_error(
    server: FaultServer, make_client: ClientFactory, path: str
) -> None:
    server.route("GET", path, [Response(200, DEEP, "application/json")])
    client = make_client()
    call = {"/slots": client.slots, "/props": client.props, "/health": client.health}[path]
    with pytest.raises(ProtocolError, match="nested too deeply"):
        await call()


async def test_a_helper_answer_over_max_body_bytes_is_a_protocol_error(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("GET", "/slots", [Response(200, b"[" + b"1," * 5000 + b"1]", "application/json")])
    with pytest.raises(ProtocolError, match=r"max_body_bytes \(1000 bytes\)"):
        await make_client(max_body_bytes=1000).slots()


@pytest.mark.parametrize(
    "where",
    ["sse", "whole", "error", "error-deep-field"],
)
async def test_deep_json_anywhere_gives_only_typed_errors(
    server: FaultServer, make_client: ClientFactory, where: str
) -> None:
    if where == "sse":
        body = sse(chat_chunk({"content": "Hel"})) + b"data: " + DEEP + b"\n\n"
        script: list[Step] = [Status(200), Chunk(body), End()]
    elif where == "whole":
        script = [Response(200, b'{"id":"x","y":' + DEEP + b"}", "application/json")]
    elif where == "error":
        script = [Response(500, DEEP, "application/json")]
    else:
        script = [Response(400, b'{"error":{"type":"x","y":' + DEEP + b"}}", "application/json")]
    server.route("POST", CHAT, script)
    events, error = await drain(make_client().chat(user()))
    if where.startswith("error"):
        assert type(error) is HTTPStatusError, error
        assert error.status in (400, 500)
        return
    assert type(error) is ProtocolError, error
    assert "nested too deeply" in str(error)
    if where == "sse":
        assert events == [Content("Hel")]
        assert error.partial is not None
        assert error.partial.content == "Hel"


async def test_the_partial_is_what_the_events_showed(
    server: FaultServer, make_client: ClientFactory
) -> None:
    """A payload whose choice 0 is fine and choice 1 is not: nothing of it is kept."""
    two = chat_chunk({"content": "x"})
    two["choices"].append({"finish_reason": None, "index": 1, "delta": {"content": "y"}})
    server.route("POST", CHAT, stream([sse(chat_chunk({"content": "Hel"})), sse(two)]))
    events, error = await drain(make_client().chat(user()))
    assert isinstance(error, ProtocolError), error
    assert events == [Content("Hel")]
    assert error.partial is not None
    assert error.partial.content == "Hel"


async def test_broken_framing_mid_stream_is_a_typed_error_with_the_partial(
    server: FaultServer, make_client: ClientFactory, transport: TransportName
) -> None:
    """Broken framing after the head is a ProtocolError on both stacks (our parser's
    Http11Error; httpx's RemoteProtocolError mid-body), with the partial."""
    server.route(
        "POST", CHAT, [Status(200), Chunk(sse(chat_chunk({"content": "Hel"}))), Raw(b"zz\r\n")]
    )
    events, error = await drain(make_client(resume=False).chat(user()))
    assert type(error) is ProtocolError, (transport, error)
    assert events == [Content("Hel")]
    assert error.partial is not None
    assert error.partial.content == "Hel"

