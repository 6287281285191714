"""``AsyncioTransport``: the HTTP/1.1 client written directly on ``asyncio.Protocol``.

Framing is checked twice: feeding the protocol directly (every split of the bytes into
reads, deterministic) and over real loopback sockets (the fault server and raw asyncio
servers). Then the failure kinds, connection reuse, closing, cancellation, flow control, a
differential test against httpx, and the real ``Client`` over it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import gzip
import itertools
import os
import random
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import httpx
import pytest
import pytest_asyncio

from llamaclient import ChatEvent, ChatRequest, Client, Completion, Config, UserMessage
from llamaclient._protocol.http11 import DONE, MAX_DECODED, ResponseParser
from llamaclient._transports.base import Response, TransportError
from llamaclient._transports.native import _HIGH_WATER, AsyncioTransport, _Connection
from tests.support.faultserver import (
    Chunk,
    Close,
    End,
    FaultServer,
    Hold,
    Json,
    Raw,
    Reset,
    Sleep,
    Status,
    Step,
    Wait,
    chat_chunks,
    refused_url,
    stream,
)
from tests.support.faultserver import Response as Full

pytestmark = pytest.mark.asyncio

CHAT = "/v1/chat/completions"
CLOSE = {"Connection": "close"}


# -- helpers -----------------------------------------------------------------------------------


@pytest_asyncio.fixture
async def server() -> AsyncIterator[FaultServer]:
    async with FaultServer(hold_timeout=10.0) as srv:
        yield srv


@pytest_asyncio.fixture
async def transport(server: FaultServer) -> AsyncIterator[AsyncioTransport]:
    """Our transport; on teardown it is closed and the server must see every connection
    closed (a leaked connection fails the test)."""
    t = AsyncioTransport(connect_timeout=5)
    yield t
    await t.aclose()
    await server.wait_closed_connections(timeout=5.0)


async def read_all(response: Response) -> list[bytes]:
    """Every piece ``read()`` returns, up to the end (the empty piece is left out)."""
    pieces = []
    while piece := await response.read():
        pieces.append(piece)
    return pieces


async def fetch(
    t: AsyncioTransport,
    url: str,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
) -> tuple[int, bytes]:
    response = await t.send(method, url, headers or {}, body)
    try:
        return response.status, b"".join(await read_all(response))
    finally:
        await response.aclose()


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def settle(done: Callable[[], bool]) -> None:
    """Give the loop up to 2 s for ``done()`` to hold (sockets close one iteration after
    ``close()``); the caller asserts it after."""
    for _ in range(200):
        if done():
            return
        await asyncio.sleep(0.01)


def chunked(pieces: list[bytes], ext: bytes = b"", trailers: bytes = b"") -> bytes:
    """A chunked body: each piece one chunk (with ``ext`` after its size), then the
    terminator with ``trailers`` (header lines, each ending in CRLF)."""
    out = b"".join(b"%x%s\r\n%s\r\n" % (len(p), ext, p) for p in pieces)
    return out + b"0" + ext + b"\r\n" + trailers + b"\r\n"


HEAD_CHUNKED = (
    b"HTTP/1.1 200 OK\r\nServer: llama.cpp\r\nContent-Type: text/event-stream\r\n"
    b"transfer-encoding: Chunked\r\nKeep-Alive: timeout=5, max=100\r\n\r\n"
)
EVENTS = [b'data: {"a":1}\n\n', b'data: {"b":"\xc3\xa9"}\n\n', b"x" * 300, b"data: [DONE]\n\n"]
WIRE = HEAD_CHUNKED + chunked(EVENTS, ext=b';name=val;q="x"', trailers=b"X-Trailer: yes\r\n")


# -- the protocol, fed directly ------------------------------------------------------------------


class _FakeTransport(asyncio.Transport):
    """Just enough of a transport for feeding ``_Connection`` by hand."""

    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.closed = False
        self.reading = True

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)

    def is_closing(self) -> bool:
        return self.closed

    def abort(self) -> None:
        self.closed = True

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


def feed(pieces: Iterator[bytes] | list[bytes]) -> tuple[_Connection, list[bytes]]:
    """Feed a response to a fresh connection read by read; return it and the body pieces
    taken after each read (what ``read()`` would hand out)."""
    conn = _Connection(asyncio.get_running_loop(), ("http", "h", 80), memoryview(bytearray(16)))
    conn.connection_made(_FakeTransport())
    parser = conn.begin(b"GET / HTTP/1.1\r\n\r\n", head_only=False, keep_alive=True)
    out = []
    for piece in pieces:
        conn.data_received(piece)
        if parser.body:
            out.append(b"".join(parser.body))
            parser.body.clear()
    return conn, out


def parser_of(conn: _Connection) -> ResponseParser:
    assert conn.parser is not None
    return conn.parser


def splits(data: bytes, cuts: tuple[int, ...]) -> list[bytes]:
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds) if b > a]


async def test_protocol_every_single_split_gives_the_same_body() -> None:
    expected = b"".join(EVENTS)
    for cut in range(1, len(WIRE)):
        conn, out = feed(splits(WIRE, (cut,)))
        assert conn.error is None, cut
        assert b"".join(out) == expected, cut
        parser = parser_of(conn)
        assert parser.status == 200
        assert parser.headers["transfer-encoding"] == "Chunked"
        assert "x-trailer" not in parser.headers
        assert parser.trailers == [("X-Trailer", "yes")]
        assert parser.state == DONE, cut
        assert parser.keep_alive
        assert conn.keep_alive


async def test_protocol_every_pair_of_splits_and_byte_by_byte() -> None:
    wire = HEAD_CHUNKED + chunked(
        [*EVENTS[:2], b"data: [DONE]\n\n"], ext=b";e=1", trailers=b"T: 1\r\n"
    )
    expected = b"".join(EVENTS[:2]) + b"data: [DONE]\n\n"
    for a in range(1, len(wire)):
        for b in range(a + 1, len(wire), 3):
            conn, out = feed(splits(wire, (a, b)))
            assert b"".join(out) == expected, (a, b)
            assert parser_of(conn).state == DONE, (a, b)
            assert conn.error is None, (a, b)
    conn, out = feed(wire[i : i + 1] for i in range(len(wire)))
    assert b"".join(out) == expected
    assert parser_of(conn).state == DONE


async def test_protocol_one_whole_chunk_per_read_is_one_piece_each() -> None:
    head_and_first = HEAD_CHUNKED + chunked(EVENTS[:1])[: -len(b"0\r\n\r\n")]
    reads = [head_and_first] + [b"%x\r\n%s\r\n" % (len(e), e) for e in EVENTS[1:]] + [b"0\r\n\r\n"]
    _, out = feed(reads)
    assert out == EVENTS


async def test_protocol_several_chunks_in_one_read_come_out_joined() -> None:
    conn, out = feed([HEAD_CHUNKED, chunked(EVENTS)])
    assert out == [b"".join(EVENTS)]
    assert parser_of(conn).state == DONE


@pytest.mark.parametrize(
    "bad",
    [
        b"zz\r\nabc\r\n",  # not hex
        b"-3\r\nabc\r\n",  # negative
        b"3\r\nabcXY",  # no CRLF after the data
        b"3\r\nabc\rX",
        b"1" * 5000,  # an endless size line
        b"0x3\r\nabc\r\n",  # int(x, 16) accepts these
        b"+3\r\nabc\r\n",
        b"1_0\r\n" + b"a" * 16 + b"\r\n",
        b" 3\r\nabc\r\n",
        b"1" * 20 + b"\r\n",  # 20 digits
    ],
)
async def test_protocol_bad_chunking_is_a_protocol_error(bad: bytes) -> None:
    conn, _ = feed([HEAD_CHUNKED, bad])
    assert conn.error is not None
    assert conn.error.kind == "protocol"
    assert conn.broken


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"FTP/1.1 200 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n",
        b"HTTP/1.1 2x0 OK\r\n\r\n",
        b"HTTP/1.1 20 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX : y\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX: y\r\n z\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX: a\x00b\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 1\r\n\r\nx",
    ],
)
async def test_protocol_bad_head_is_a_protocol_error(head: bytes) -> None:
    conn, _ = feed([head])
    assert conn.error is not None
    assert conn.error.kind == "protocol"


# -- framing over sockets --------------------------------------------------------------------------


async def test_chunked_body_over_a_socket_split_anywhere(
    server: FaultServer, transport: AsyncioTransport
) -> None:
    """The same response written in pieces, with a pause between, cut at many places."""
    expected = b"".join(EVENTS)
    step = 7
    for cut in range(1, len(WIRE), step):
        server.route("GET", "/s", [Raw(WIRE[:cut]), Sleep(0.002), Raw(WIRE[cut:]), End()])
        status, body = await fetch(transport, server.url + "/s")
        assert (status, body) == (200, expected), cut
    assert server.connections_accepted == 1  # and the connection was reused every time


async def test_each_chunk_is_one_read_and_headers_are_case_insensitive(
    server: FaultServer, transport: AsyncioTransport
) -> None:
    steps: list[Step] = [Status(200, {"X-Thing": "A"})]
    for event in EVENTS:
        steps += [Chunk(event), Sleep(0.005)]
    server.route("GET", "/s", [*steps, End()])
    response = await transport.send("GET", server.url + "/s", {}, None)
    assert response.status == 200
    assert response.header("x-thing") == response.header("X-THING") == "A"
    assert response.header("Content-Type") == "text/event-stream"
    assert response.header("nope") is None
    assert await read_all(response) == EVENTS
    assert await response.read() == b""
    await response.aclose()


async def test_content_length_body(server: FaultServer, transport: AsyncioTransport) -> None:
    body = bytes(range(256)) * 40
    server.route(
        "GET",
        "/cl",
        [Status(200, {"Content-Length": str(len(body))}, chunked=False)]
        + [step for i in range(0, len(body), 1000) for step in (Raw(body[i : i + 1000]), Sleep(0))]
        + [End()],
    )
    server.route("GET", "/full", [Full(200, body)])
    assert await fetch(transport, server.url + "/cl") == (200, body)
    assert await fetch(transport, server.url + "/full") == (200, body)
    assert server.connections_accepted == 1


async def test_empty_bodies(server: FaultServer, transport: AsyncioTransport) -> None:
    server.route("GET", "/empty", [Full(200, b"")])
    server.route("GET", "/204", [Raw(b"HTTP/1.1 204 No Content\r\n\r\n"), End()])
    server.route("HEAD", "/h", [Raw(b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n"), End()])
    server.route("GET", "/c0", stream([]))
    for path, method in (("/empty", "GET"), ("/204", "GET"), ("/h", "HEAD"), ("/c0", "GET")):
        status, body = await fetch(transport, server.url + path, method)
        assert body == b"", path
        assert status in (200, 204)
    assert server.connections_accepted == 1


async def test_interim_responses_are_skipped(
    server: FaultServer, transport: AsyncioTransport
) -> None:
    server.route(
        "POST",
        "/x",
        [
            Raw(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"),
            Sleep(0.005),
            Json(201, {"ok": True}),
        ],
    )
    assert await fetch(transport, server.url + "/x", "POST", body=b"{}") == (201, b'{"ok":true}')


async def test_close_delimited_body(server: FaultServer, transport: AsyncioTransport) -> None:
    server.route(
        "GET",
        "/c",
        [Status(200, chunked=False), Chunk(b"abc"), Sleep(0.005), Chunk(b"def"), Close()],
    )
    assert await fetch(transport, server.url + "/c") == (200, b"abcdef")
    assert await fetch(transport, server.url + "/c") == (200, b"abcdef")
    assert server.connections_accepted == 2  # such a body ends the connection


async def test_chunk_extensions_and_trailers(
    server: FaultServer, transport: AsyncioTransport
) -> None:
    # (no whitespace before the first ";": RFC 9112 allows it, h11 and we refuse it)
    body = chunked([b"hello", b" ", b"world"], ext=b";a=1 ; b", trailers=b"X-A: 1\r\nX-B: 2\r\n")
    # A hand-made response (``End()`` after raw bytes writes nothing, so the trailers are ours)
    server.route("GET", "/t", [Raw(HEAD_CHUNKED + body), End()])
    assert await fetch(transport, server.url + "/t") == (200, b"hello world")
    assert await fetch(transport, server.url + "/t") == (200, b"hello world")
    assert server.connections_accepted == 1


async def test_request_bytes(server: FaultServer, transport: AsyncioTransport) -> None:
    server.route("POST", "/p", [Json(200, {})])
    server.route("GET", "/g", [Json(200, {})])
    await fetch(
        transport, server.url + "/p?x=1", "POST", {"X-Key": "v", "content-length": "9"}, b"body"
    )
    await fetch(transport, server.url + "/g", "GET")
    post, get = server.requests
    assert (post.method, post.target, post.body) == ("POST", "/p?x=1", b"body")
    assert post.headers["host"] == f"127.0.0.1:{server.port}"
    assert post.headers["x-key"] == "v"
    assert post.headers.get_list("content-length") == ["4"]
    assert "content-length" not in get.headers
    with pytest.raises(ValueError, match="invalid header"):
        await transport.send("GET", server.url + "/g", {"X": "a\r\nEvil: 1"}, None)


async def test_other_schemes_are_refused_with_a_clear_message() -> None:
    t = AsyncioTransport()
    with pytest.raises(ValueError, match=r"http:// and https://"):
        await t.send("GET", "ftp://example.com/x", {}, None)
    with pytest.raises(ValueError, match=r"no host"):
        await t.send("GET", "http:///x", {}, None)
    await t.aclose()


# -- failures ------------------------------------------------------------------------------------


@pytest.mark.parametrize("end", [Close(), Reset()])
@pytest.mark.parametrize("chunked", [True, False])
async def test_body_broken_mid_way_is_a_read_error(
    server: FaultServer, transport: AsyncioTransport, end: Step, chunked: bool
) -> None:
    headers = None if chunked else {"Content-Length": "100"}
    server.route("GET", "/b", [Status(200, headers, chunked=chunked), Chunk(b"data: 1\n\n"), end])
    response = await transport.send("GET", server.url + "/b", {}, None)
    assert response.status == 200
    assert await response.read() == b"data: 1\n\n"
    with pytest.raises(TransportError) as info:
        await response.read()
    assert info.value.kind == "read"
    await response.aclose()
    response = await transport.send("GET", server.url + "/b", {}, None)
    with pytest.raises(TransportError) as info:  # aread too
        await response.aread()
    assert info.value.kind == "read"
    await response.aclose()


async def test_closed_in_the_head_is_a_read_error(
    server: FaultServer, transport: AsyncioTransport
) -> None:
    server.route("GET", "/h", [Raw(b"HTTP/1.1 200 OK\r\nContent-"), Close()])
    with pytest.raises(TransportError) as info:
        await transport.send("GET", server.url + "/h", {}, None)
    assert info.value.kind == "read"


@pytest.mark.parametrize("end", [Close(), Reset()])
async def test_no_response_at_all_on_a_fresh_connection_is_a_read_error(
    server: FaultServer, transport: AsyncioTransport, end: Step
) -> None:
    # The server may have received the request: never "disconnected" (retried silently).
    server.route("GET", "/d", [end])
    with pytest.raises(TransportError) as info:
        await transport.send("GET", server.url + "/d", {}, None)
    assert info.value.kind == "read"
    assert "before responding" in str(info.value)


@pytest.mark.parametrize("end", [Close(), Reset()])
async def test_a_status_line_byte_then_nothing_is_a_read_error_even_when_reused(
    server: FaultServer, transport: AsyncioTransport, end: Step
) -> None:
    server.route("GET", "/d", [Json(200, {})], [Raw(b"H"), Sleep(0.01), end])
    assert await fetch(transport, server.url + "/d") == (200, b"{}")
    with pytest.raises(TransportError) as info:
        await transport.send("GET", server.url + "/d", {}, None)
    assert info.value.kind == "read"
    assert server.connections_accepted == 1


@pytest.mark.parametrize("end", [Close(), Reset()])
async def test_no_response_on_a_reused_connection_is_disconnected(
    server: FaultServer, transport: AsyncioTransport, end: Step
) -> None:
    server.route("GET", "/d", [Full(200, b"ok")], [end])
    first = await transport.send("GET", server.url + "/d", {}, None)
    assert await first.aread() == b"ok"
    await first.aclose()
    with pytest.raises(TransportError) as info:
        await transport.send("GET", server.url + "/d", {}, None)
    assert info.value.kind == "disconnected"
    assert server.requests[1].conn_id == server.requests[0].conn_id


async def test_refused_is_connect() -> None:
    t = AsyncioTransport(connect_timeout=2)
    with pytest.raises(TransportError) as info:
        await t.send("GET", refused_url() + "/x", {}, None)
    assert info.value.kind == "connect"
    await t.aclose()


async def test_connect_timeout_is_connect(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = asyncio.get_running_loop()

    async def never(*args: object, **kwargs: object) -> Any:
        await asyncio.sleep(10)

    monkeypatch.setattr(loop, "create_connection", never)
    t = AsyncioTransport(connect_timeout=0.05)
    with pytest.raises(TransportError, match="timed out") as info:
        await t.send("GET", "http://127.0.0.1:9/x", {}, None)
    assert info.value.kind == "connect"


async def test_stale_keepalive_connection_is_disconnected(
    server: FaultServer, transport: AsyncioTransport
) -> None:
    # The second request goes out on the pooled connection, which the server then closes
    # without a byte: what a keep-alive connection closed by the server in between looks like.
    server.route("GET", "/j", [Json(200, {"n": 1})], [Close()], [Json(200, {"n": 3})])
    assert await fetch(transport, server.url + "/j") == (200, b'{"n":1}')
    with pytest.raises(TransportError) as info:
        await fetch(transport, server.url + "/j")
    assert info.value.kind == "disconnected"
    assert await fetch(transport, server.url + "/j") == (200, b'{"n":3}')
    assert [r.conn_id for r in server.requests] == [1, 1, 2]


async def test_client_retries_a_stale_connection_once(server: FaultServer) -> None:
    server.route("GET", "/health", [Json(200, {"status": "ok"})], [Close()], [Json(200, {"n": 3})])
    async with Client(Config(server.url), transport=AsyncioTransport(connect_timeout=5)) as client:
        assert await client.health() == {"status": "ok"}
        assert await client.health() == {"n": 3}
    assert [r.conn_id for r in server.requests] == [1, 1, 2]
    await server.wait_closed_connections()


async def test_idle_connection_closed_by_the_server_is_not_reused() -> None:
    async with FaultServer(idle_timeout=0.05) as srv:
        srv.route("GET", "/j", [Json(200, {})])
        t = AsyncioTransport()
        assert await fetch(t, srv.url + "/j") == (200, b"{}")
        await srv.wait_for(lambda: srv.connections_open == 0)
        await asyncio.sleep(0.01)
        assert await fetch(t, srv.url + "/j") == (200, b"{}")  # no error: a fresh connection
        assert srv.connections_accepted == 2
        await t.aclose()
        await srv.wait_closed_connections()


async def test_bytes_on_an_idle_connection_drop_it() -> None:
    response = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(response)
        await writer.drain()
        await asyncio.sleep(0.02)
        writer.write(b"HTTP/1.1 200 OK\r\n")  # nobody asked: the connection is spoilt
        await writer.drain()
        await reader.read()  # until the client closes it

    async with raw_server(handler) as base:
        t = AsyncioTransport()
        assert await fetch(t, base + "/x") == (200, b"ok")
        await asyncio.sleep(0.1)
        assert repr(t) == "AsyncioTransport(active=0, idle=0)"
        assert await fetch(t, base + "/x") == (200, b"ok")  # on a fresh connection
        await t.aclose()


async def test_idle_connections_expire(
    server: FaultServer, transport: AsyncioTransport, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("llamaclient._transports.native.KEEPALIVE_SECONDS", 0.05)
    server.route("GET", "/j", [Json(200, {})])
    await fetch(transport, server.url + "/j")
    assert repr(transport) == "AsyncioTransport(active=0, idle=1)"
    await server.wait_closed_connections(timeout=1.0)  # we closed it, well before the server
    assert server.connections[0].close_reason == "client"
    assert repr(transport) == "AsyncioTransport(active=0, idle=0)"
    await fetch(transport, server.url + "/j")
    assert server.connections_accepted == 2


# -- connection reuse ----------------------------------------------------------------------------


async def test_keepalive_reuse(server: FaultServer, transport: AsyncioTransport) -> None:
    server.route("GET", "/props", [Json(200, {"n_ctx": 4096})])
    server.route("POST", "/j", [Json(200, {"ok": True})])
    for _ in range(3):
        assert await fetch(transport, server.url + "/props") == (200, b'{"n_ctx":4096}')
        assert await fetch(transport, server.url + "/j", "POST", body=b"{}") == (
            200,
            b'{"ok":true}',
        )
    assert server.connections_accepted == 1
    assert [r.index_on_conn for r in server.requests] == list(range(6))


async def test_concurrent_requests_use_their_own_connections(
    server: FaultServer, transport: AsyncioTransport
) -> None:
    server.route("GET", "/s", [Status(200), Chunk(b"a"), Sleep(0.05), Chunk(b"b"), End()])
    results = await asyncio.gather(*(fetch(transport, server.url + "/s") for _ in range(5)))
    assert results == [(200, b"ab")] * 5
    assert server.connections_accepted == 5
    results = await asyncio.gather(*(fetch(transport, server.url + "/s") for _ in range(5)))
    assert server.connections_accepted == 5  # all five pooled and reused


async def test_connection_close_from_the_request_is_honoured(
    server: FaultServer, transport: AsyncioTransport
) -> None:
    server.route("POST", CHAT, stream(chat_chunks(["a"])))
    for _ in range(2):
        status, _ = await fetch(transport, server.url + CHAT, "POST", CLOSE, b"{}")
        assert status == 200
    assert server.connections_accepted == 2
    await server.wait_closed_connections()


async def test_a_server_that_keeps_posts_alive_gets_them_on_one_connection(
    server: FaultServer, transport: AsyncioTransport
) -> None:
    # A proxy in front of llama-server keeps the connection: every chat reuses it.
    server.route("POST", CHAT, stream(chat_chunks(["a"])))
    for _ in range(3):
        assert (await fetch(transport, server.url + CHAT, "POST", None, b"{}"))[0] == 200
        await asyncio.sleep(0.02)
    assert [r.conn_id for r in server.requests] == [1, 1, 1]
    assert all("connection" not in r.headers for r in server.requests)


async def test_a_server_that_closes_after_a_post_is_asked_to_close_up_front(
    server: FaultServer, transport: AsyncioTransport
) -> None:
    # llama-server announces keep-alive, then closes the connection after every streamed
    # answer: once seen, later POSTs to it say Connection: close (and are never pooled).
    answer = [*stream(chat_chunks(["a"]), end=False), Raw(b"0\r\n\r\n")]  # then it closes
    server.route("POST", CHAT, answer)
    server.route("GET", "/j", [Json(200, {})])
    for _ in range(3):
        assert (await fetch(transport, server.url + CHAT, "POST", None, b"{}"))[0] == 200
        await server.wait_for(lambda: server.connections_open == 0)
        await asyncio.sleep(0.01)  # the FIN reaches the pooled connection
    assert [r.headers.get("connection") for r in server.requests] == [None, "close", "close"]
    assert [r.conn_id for r in server.requests] == [1, 2, 3]
    await fetch(transport, server.url + "/j")
    await fetch(transport, server.url + "/j")
    assert "connection" not in server.requests[-1].headers  # GETs are still pooled
    assert server.requests[-1].conn_id == server.requests[-2].conn_id


async def test_a_post_on_a_connection_the_server_just_closed_is_learned_from(
    server: FaultServer, transport: AsyncioTransport
) -> None:
    # The next POST went out before the FIN arrived: "disconnected" (the client retries it
    # on a fresh connection), and the POSTs after it ask for the close.
    server.route("POST", CHAT, stream(chat_chunks(["a"])), [Close()], stream(chat_chunks(["b"])))
    assert (await fetch(transport, server.url + CHAT, "POST", None, b"{}"))[0] == 200
    with pytest.raises(TransportError) as info:
        await fetch(transport, server.url + CHAT, "POST", None, b"{}")
    assert info.value.kind == "disconnected"
    assert (await fetch(transport, server.url + CHAT, "POST", None, b"{}"))[0] == 200
    assert [r.headers.get("connection") for r in server.requests] == [None, None, "close"]
    assert [r.conn_id for r in server.requests] == [1, 1, 2]


async def test_connection_close_from_the_response_is_honoured(
    server: FaultServer, transport: AsyncioTransport
) -> None:
    server.route("GET", "/e", [Json(400, {"error": "no"})])  # error statuses close
    server.route("GET", "/c", [Json(200, {}, headers={"Connection": "close", "Keep-Alive": None})])
    for path in ("/e", "/e", "/c", "/c"):
        await fetch(transport, server.url + path)
    assert server.connections_accepted == 4


async def test_unread_body_on_release_closes_the_connection(
    server: FaultServer, transport: AsyncioTransport
) -> None:
    server.route("GET", "/s", [*stream([b"a"], end=False), Hold()])
    server.route("GET", "/j", [Json(200, {})])
    response = await transport.send("GET", server.url + "/s", {}, None)
    assert await response.read() == b"a"
    await response.aclose()
    await server.wait_disconnect()
    assert await fetch(transport, server.url + "/j") == (200, b"{}")
    assert server.connections_accepted == 2


async def test_transport_aclose_closes_idle_and_busy_connections(server: FaultServer) -> None:
    server.route("GET", "/j", [Json(200, {})])
    server.route("GET", "/s", [*stream([b"a"], end=False), Hold()])
    t = AsyncioTransport()
    await asyncio.gather(fetch(t, server.url + "/j"), fetch(t, server.url + "/j"))
    busy = await t.send("GET", server.url + "/s", {}, None)
    assert server.connections_open == 2  # one of the two idle ones carries the stream
    assert repr(t) == "AsyncioTransport(active=1, idle=1)"
    await t.aclose()
    await server.wait_closed_connections(timeout=2.0)
    with pytest.raises(TransportError):
        await busy.aread()
    await busy.aclose()
    assert await fetch(t, server.url + "/j") == (200, b"{}")  # usable again afterwards
    await t.aclose()
    await server.wait_closed_connections(timeout=2.0)


# -- closing and cancelling ----------------------------------------------------------------------


async def test_aclose_mid_body_is_seen_by_the_server(
    server: FaultServer, transport: AsyncioTransport
) -> None:
    server.route("POST", CHAT, [*stream(chat_chunks(["a"], finish_reason=None), end=False), Hold()])
    response = await transport.send("POST", server.url + CHAT, CLOSE, b"{}")
    assert await response.read()
    await response.aclose()
    disconnect = await server.wait_disconnect(timeout=1.0)
    assert disconnect.request.path == CHAT
    assert await response.read() == b""  # a released response is at its end


@pytest.mark.parametrize("where", ["send", "read", "aread"])
async def test_cancellation_leaves_nothing_behind(
    server: FaultServer, transport: AsyncioTransport, where: str
) -> None:
    server.route("GET", "/hold", [Hold()])
    server.route("GET", "/s", [*stream([b"a"], end=False), Hold()])
    tasks_before = len(asyncio.all_tasks())
    fds_before = open_fds()
    started = asyncio.Event()

    async def go() -> None:
        if where == "send":
            started.set()
            await transport.send("GET", server.url + "/hold", {}, None)
            return
        response = await transport.send("GET", server.url + "/s", {}, None)
        assert await response.read() == b"a"
        started.set()
        await (response.read() if where == "read" else response.aread())

    task = asyncio.create_task(go())
    await started.wait()
    await server.wait_requests(1)
    await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await server.wait_disconnect(timeout=1.0)
    await server.wait_closed_connections(timeout=1.0)
    await settle(lambda: open_fds() == fds_before and len(asyncio.all_tasks()) == tasks_before)
    assert open_fds() == fds_before
    assert len(asyncio.all_tasks()) == tasks_before, asyncio.all_tasks()
    assert repr(transport) == "AsyncioTransport(active=0, idle=0)"


async def test_timeout_while_waiting_for_the_head_closes_the_connection(
    server: FaultServer, transport: AsyncioTransport
) -> None:
    server.route("GET", "/hold", [Hold()])
    fds_before = open_fds()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await transport.send("GET", server.url + "/hold", {}, None)
    await server.wait_disconnect(timeout=1.0)
    await settle(lambda: open_fds() == fds_before)
    assert open_fds() == fds_before


# -- flow control ----------------------------------------------------------------------------------


async def test_flow_control_with_a_10_mb_body(
    server: FaultServer, transport: AsyncioTransport
) -> None:
    rng = random.Random(7)
    body = rng.randbytes(10 * 1024 * 1024)
    server.route("GET", "/big", [Full(200, body, content_type="application/octet-stream")])
    response = await transport.send("GET", server.url + "/big", {}, None)
    await asyncio.sleep(0.2)  # don't read: the transport must stop reading the socket
    conn = response._conn  # type: ignore[attr-defined]
    assert conn is not None
    assert conn.paused
    buffered = sum(len(p) for p in parser_of(conn).body)
    assert _HIGH_WATER < buffered < _HIGH_WATER + 1024 * 1024
    got = []
    while piece := await response.read():
        assert len(piece) <= _HIGH_WATER + 1024 * 1024
        got.append(piece)
    assert b"".join(got) == body
    await response.aclose()


async def test_flow_control_chunked(server: FaultServer, transport: AsyncioTransport) -> None:
    pieces = [bytes([i % 251]) * 70_000 for i in range(150)]
    server.route("GET", "/big", stream(pieces))
    response = await transport.send("GET", server.url + "/big", {}, None)
    await asyncio.sleep(0.2)
    conn = response._conn  # type: ignore[attr-defined]
    assert conn is not None
    assert conn.paused
    assert await response.aread() == b"".join(pieces)
    await response.aclose()


# -- differential: httpx on random chunkings ------------------------------------------------------


@contextlib.asynccontextmanager
async def raw_server(
    handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> AsyncIterator[str]:
    """A plain asyncio server running ``handler`` per connection; yields its base URL. On
    exit every connection it accepted must have ended (the client closed it)."""
    tasks: set[asyncio.Task[Any]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        try:
            with contextlib.suppress(OSError):
                await handler(reader, writer)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            tasks.discard(task)

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        await settle(lambda: not tasks)
        assert not tasks, "the client left connections open"
        await server.wait_closed()


async def test_differential_against_httpx_on_random_chunkings() -> None:
    rng = random.Random(1234)
    cases: list[tuple[bytes, list[bytes]]] = []
    for _ in range(40):
        body = rng.randbytes(rng.randint(0, 3000))
        framing = rng.choice(["chunked", "length", "close"])
        if framing == "chunked":
            cuts = (
                sorted(rng.sample(range(1, len(body)), min(len(body) - 1, rng.randint(0, 12))))
                if len(body) > 1
                else []
            )
            pieces = splits(body, tuple(cuts))
            exts = rng.choice([b"", b";x=1", b'; a = "b"'])
            trailers = rng.choice([b"", b"X-T: 1\r\n", b"A: 1\r\nB: 2\r\n"])
            head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            wire = head + chunked(pieces, exts, trailers)
        elif framing == "length":
            wire = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        else:
            wire = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + body
        n_cuts = rng.randint(0, 6)
        writes = splits(wire, tuple(sorted(rng.sample(range(1, len(wire)), n_cuts))))
        cases.append((body, writes))

    current: list[list[bytes]] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return
            for piece in current[0]:
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(0.0005)
            if b"Connection: close" in current[0][0][:200]:
                return

    async with raw_server(handler) as base, httpx.AsyncClient() as theirs:
        ours = AsyncioTransport()
        try:
            for body, writes in cases:
                current[:] = [writes]
                response = await ours.send("GET", base + "/x", {}, None)
                got = b"".join(await read_all(response))
                await response.aclose()
                reference = (await theirs.get(base + "/x")).content
                assert got == reference == body
        finally:
            await ours.aclose()


# -- the real client over it -----------------------------------------------------------------------


async def chat(client: Client) -> tuple[list[ChatEvent], Completion]:
    request = ChatRequest([UserMessage("hi")])
    events: list[ChatEvent] = []
    async with client.chat(request) as s:
        async for event in s:
            events.append(event)
    return events, s.completion


async def test_client_chat_matches_the_httpx_transport(server: FaultServer) -> None:
    chunks = chat_chunks(["Hel", "lo", " wor", "ld"], reasoning=["hm", "m"])
    server.route("POST", CHAT, stream(chunks, delay=0.002))
    server.route("GET", "/health", [Json(200, {"status": "ok"})])
    async with Client(Config(server.url), transport=AsyncioTransport(connect_timeout=5)) as ours:
        assert repr(ours).endswith("transport=AsyncioTransport)")
        ours_result = await chat(ours)
        assert await ours.health() == {"status": "ok"}
        assert await ours.health() == {"status": "ok"}
    async with Client(Config(server.url, transport="httpx")) as default:
        default_result = await chat(default)
    assert ours_result == default_result
    assert len(ours_result[0]) == 6
    assert ours_result[1].content == "Hello world"
    # Ours keeps the connection (this server keeps it alive: the health checks reuse it);
    # httpx asks for the close on a POST, as llama-server closes it anyway.
    assert "connection" not in server.requests[0].headers
    assert [r.conn_id for r in server.requests[:3]] == [1, 1, 1]
    assert server.requests[3].headers["connection"] == "close"
    await server.wait_closed_connections()


async def test_client_chat_cut_mid_stream_is_seen_by_the_server(server: FaultServer) -> None:
    server.route(
        "POST",
        CHAT,
        [*stream(chat_chunks(["a"], finish_reason=None, done=False), end=False), Hold()],
    )
    async with Client(Config(server.url), transport=AsyncioTransport(connect_timeout=5)) as client:
        async with client.chat(ChatRequest([UserMessage("hi")])) as s:
            async for _ in s:
                break
        await server.wait_disconnect(timeout=1.0)
    await server.wait_closed_connections()


# -- read timeout (stall) ---------------------------------------------------------------------


async def test_a_read_that_waits_read_timeout_is_a_stall_and_closes(
    server: FaultServer, transport: AsyncioTransport
) -> None:
    server.route("GET", "/s", [Status(200), Chunk(b"a"), Hold()])
    response = await transport.send("GET", server.url + "/s", {}, None, read_timeout=0.1)
    assert await response.read() == b"a"
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TransportError) as info:
        await response.read()
    assert info.value.kind == "stall"
    assert str(info.value) == "no byte from the server for 0.1 s"
    assert 0.09 <= loop.time() - started < 2.0
    await response.aclose()
    await server.wait_disconnect(timeout=2.0)  # the connection was closed


async def test_a_slow_consumer_is_not_stalled(
    server: FaultServer, transport: AsyncioTransport
) -> None:
    server.route("GET", "/s", stream([b"a", b"b", b"c"]))
    response = await transport.send("GET", server.url + "/s", {}, None, read_timeout=0.05)
    assert await response.read()
    await asyncio.sleep(0.2)  # the consumer is busy: time between reads does not count
    assert await response.aread()
    await response.aclose()


async def test_bytes_coming_more_often_than_read_timeout_are_not_a_stall(
    server: FaultServer, transport: AsyncioTransport
) -> None:
    events = [b"data: %d\n\n" % i for i in range(12)]
    server.route("GET", "/s", stream(events, delay=0.03))
    response = await transport.send("GET", server.url + "/s", {}, None, read_timeout=0.15)
    assert await response.aread() == b"".join(events)  # 0.36 s in all, never 0.15 s silent
    await response.aclose()


async def test_a_stall_counts_from_the_last_byte_even_if_not_a_body_byte(
    server: FaultServer, transport: AsyncioTransport
) -> None:
    server.route("GET", "/s", [Status(200), Chunk(b"a"), Sleep(0.08), Raw(b"5\r\nab"), Hold()])
    response = await transport.send("GET", server.url + "/s", {}, None, read_timeout=0.12)
    assert await response.read() == b"a"
    assert await response.read() == b"ab"
    with pytest.raises(TransportError) as info:
        await response.read()
    assert info.value.kind == "stall"
    await response.aclose()


async def test_no_read_timeout_no_timer(server: FaultServer, transport: AsyncioTransport) -> None:
    server.route("GET", "/s", [Status(200), Chunk(b"a"), Sleep(0.05), Chunk(b"b"), End()])
    response = await transport.send("GET", server.url + "/s", {}, None)
    conn = response._conn  # type: ignore[attr-defined]
    assert await response.aread() == b"ab"
    assert conn.stall is None
    await response.aclose()


# -- more of the framing, over sockets ------------------------------------------------------------


async def test_send_returns_with_the_head_before_any_body_byte(
    server: FaultServer, transport: AsyncioTransport
) -> None:
    gate = asyncio.Event()
    server.route("GET", "/s", [Status(200, {"X-A": "1"}), Wait(gate), Chunk(b"late"), End()])
    response = await transport.send("GET", server.url + "/s", {}, None)
    assert (response.status, response.header("x-a")) == (200, "1")
    gate.set()
    assert await response.aread() == b"late"
    await response.aclose()


async def test_accept_encoding_identity_is_sent(
    server: FaultServer, transport: AsyncioTransport
) -> None:
    server.route("GET", "/j", [Json(200, {})])
    await fetch(transport, server.url + "/j")
    await fetch(transport, server.url + "/j", headers={"accept-encoding": "gzip"})
    assert server.requests[0].headers.get_list("accept-encoding") == ["identity"]
    assert server.requests[1].headers.get_list("accept-encoding") == ["gzip"]


async def test_gzip_and_deflate_bodies_are_decoded(
    server: FaultServer, transport: AsyncioTransport
) -> None:
    events = [b'data: {"n":%d}\n\n' % i for i in range(50)]
    text = b"".join(events)
    compressor = zlib.compressobj(wbits=zlib.MAX_WBITS | 16)
    pieces = [compressor.compress(e) + compressor.flush(zlib.Z_SYNC_FLUSH) for e in events]
    pieces.append(compressor.flush())
    server.route("GET", "/gz", stream(pieces, headers={"Content-Encoding": "gzip"}))
    server.route(
        "GET", "/df", [Full(200, zlib.compress(text), headers={"Content-Encoding": "deflate"})]
    )
    assert await fetch(transport, server.url + "/gz") == (200, text)
    assert await fetch(transport, server.url + "/df") == (200, text)
    assert server.connections_accepted == 1


async def test_a_gzip_bomb_is_read_a_bounded_piece_at_a_time(
    server: FaultServer, transport: AsyncioTransport
) -> None:
    size = 64 * MAX_DECODED
    bomb = gzip.compress(b"\0" * size, 9)
    server.route("GET", "/bomb", [Full(200, bomb, headers={"Content-Encoding": "gzip"})])
    response = await transport.send("GET", server.url + "/bomb", {}, None)
    total = 0
    while piece := await response.read():
        assert len(piece) <= 2 * MAX_DECODED
        total += len(piece)
    assert total == size
    await response.aclose()


async def test_unknown_content_coding_is_a_protocol_error_from_send(
    server: FaultServer, transport: AsyncioTransport
) -> None:
    server.route("GET", "/br", [Full(200, b"xx", headers={"Content-Encoding": "br"})])
    with pytest.raises(TransportError, match="unsupported content coding 'br'") as info:
        await transport.send("GET", server.url + "/br", {}, None)
    assert info.value.kind == "protocol"


async def test_bad_framing_in_the_body_is_a_protocol_error_from_read(
    server: FaultServer, transport: AsyncioTransport
) -> None:
    server.route(
        "GET", "/b", [Raw(HEAD_CHUNKED), Sleep(0.02), Raw(b"3\r\nabc\r\n0x2\r\nab\r\n"), Hold()]
    )
    response = await transport.send("GET", server.url + "/b", {}, None)
    with pytest.raises(TransportError) as info:
        await response.aread()
    assert info.value.kind == "protocol"
    await response.aclose()


async def test_bytes_after_a_complete_body_stop_reuse(
    server: FaultServer, transport: AsyncioTransport
) -> None:
    server.route("GET", "/x", [Raw(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA"), End()])
    assert await fetch(transport, server.url + "/x") == (200, b"ok")
    assert await fetch(transport, server.url + "/x") == (200, b"ok")
    assert server.connections_accepted == 2


async def test_the_end_of_the_connection_completes_an_encoded_until_close_body(
    server: FaultServer, transport: AsyncioTransport
) -> None:
    data = gzip.compress(b"z" * 100_000)
    server.route(
        "GET",
        "/c",
        [Status(200, {"Content-Encoding": "gzip"}, chunked=False), Chunk(data), Close()],
    )
    assert await fetch(transport, server.url + "/c") == (200, b"z" * 100_000)


async def test_finished_exchanges_leave_no_cyclic_garbage(server: FaultServer) -> None:
    """A parser's feed is a bound method and its reader calls back into it: once released
    (pooled, closed, or its connection lost) that cycle is broken, so a thousand streams do
    not feed the cyclic garbage collector (its full collections were the longest pauses)."""
    server.route("POST", CHAT, stream(chat_chunks(["a", "b"])))
    server.route("GET", "/c", [Json(200, {}, headers={"Connection": "close", "Keep-Alive": None})])
    t = AsyncioTransport()
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(3):
            assert (await fetch(t, server.url + CHAT, "POST", None, b"{}"))[0] == 200  # pooled
            assert (await fetch(t, server.url + "/c"))[0] == 200  # closed by the server
        cut = await t.send("POST", server.url + CHAT, {}, b"{}")
        await cut.aclose()  # not read to its end: closed by us
        await t.aclose()
        await asyncio.sleep(0.05)
        gc.collect()
        left = [type(o).__name__ for o in gc.garbage]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert "ResponseParser" not in left
    assert "ChunkedReader" not in left
