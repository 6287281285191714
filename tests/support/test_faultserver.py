"""Tests of the fault-injection server itself, with plain httpx and raw sockets."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

import anyio
import httpx
import pytest

from tests.support.faultserver import (
    DONE,
    PING,
    Call,
    Chunk,
    Close,
    End,
    FaultServer,
    FaultServerError,
    Gate,
    Hold,
    Json,
    Raw,
    Request,
    Reset,
    Response,
    Script,
    Sleep,
    Status,
    Wait,
    chat_chunk,
    chat_chunks,
    error_body,
    error_event,
    refused_url,
    sse,
    stream,
)

CHAT = "/v1/chat/completions"
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


# ------------------------------------------------------------------------- helpers


@asynccontextmanager
async def raw_conn(
    srv: FaultServer,
) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """A raw TCP connection to ``srv``, closed on exit."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", srv.port), 5)
    try:
        yield reader, writer
    finally:
        writer.close()
        with suppress(OSError):
            await asyncio.wait_for(writer.wait_closed(), 5)


def raw_request(method: str = "GET", path: str = "/", body: bytes = b"", extra: str = "") -> bytes:
    """Bytes of a minimal HTTP/1.1 request."""
    head = f"{method} {path} HTTP/1.1\r\nHost: test\r\n{extra}"
    if body:
        head += f"Content-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


async def read_to_eof(reader: asyncio.StreamReader) -> bytes:
    """Everything until the server closes (bounded)."""
    return await asyncio.wait_for(reader.read(), 5)


def events(body: bytes) -> list[Any]:
    """Parse an SSE body into JSON objects (``"[DONE]"`` kept as a string)."""
    out: list[Any] = []
    for block in body.decode().split("\n\n"):
        if block.startswith("data: "):
            data = block[len("data: ") :]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


# ------------------------------------------------------------------------- SSE helpers


def test_sse_helpers_match_llama_server_framing() -> None:
    assert sse({"a": 1, "b": "é"}) == 'data: {"a":1,"b":"é"}\n\n'.encode()
    assert DONE == b"data: [DONE]\n\n"
    assert PING == b":\n\n"
    assert error_event("boom") == (
        b'data: {"error":{"code":500,"message":"boom","type":"server_error"}}\n\n'
    )
    assert error_body(400, "x") == {
        "error": {"code": 400, "message": "x", "type": "invalid_request_error"}
    }
    keys = list(chat_chunk({"content": "x"}))
    assert keys == ["choices", "created", "id", "model", "system_fingerprint", "object"]


def test_chat_chunks_shape() -> None:
    chunks = chat_chunks(["Hel", "lo"], reasoning=["think"], finish_reason="length")
    assert chunks[-1] == DONE
    # role delta + first delta share the first HTTP chunk; the final result is one chunk
    assert len(chunks) == 1 + 2 + 1 + 1
    evs = events(b"".join(chunks))
    assert evs[-1] == "[DONE]"
    objs: list[dict[str, Any]] = evs[:-1]
    ids = {o["id"] for o in objs}
    assert len(ids) == 1
    assert next(iter(ids)).startswith("chatcmpl-")
    assert len(next(iter(ids))) == len("chatcmpl-") + 32
    assert all(o["object"] == "chat.completion.chunk" for o in objs)
    role, r1, c1, c2, finish, usage = objs
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert "timings" not in role
    assert r1["choices"][0]["delta"] == {"reasoning_content": "think"}
    assert c1["choices"][0]["delta"] == {"content": "Hel"}
    assert c2["choices"][0]["delta"] == {"content": "lo"}
    assert [o["timings"]["predicted_n"] for o in (r1, c1, c2)] == [1, 2, 3]
    assert finish["choices"] == [{"finish_reason": "length", "index": 0, "delta": {}}]
    assert "timings" not in finish
    assert usage["choices"] == []
    assert usage["usage"] == {
        "completion_tokens": 3,
        "prompt_tokens": 20,
        "total_tokens": 23,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    assert usage["timings"]["predicted_n"] == 3
    # variants
    no_usage = events(b"".join(chat_chunks("x", usage=False, timings=False, done=False)))
    assert no_usage[-1]["choices"][0]["finish_reason"] == "stop"
    assert "timings" in no_usage[-1]
    assert "timings" not in no_usage[1]
    truncated = chat_chunks("x", finish_reason=None, done=False)
    assert len(truncated) == 1


# ------------------------------------------------------------------------- streaming


@pytest.mark.asyncio
async def test_chunked_stream_exact_wire_bytes() -> None:
    async with FaultServer() as srv:
        srv.route("POST", CHAT, [Status(), Chunk(b"data: 1\n\n"), Chunk(PING), End()])
        async with raw_conn(srv) as (reader, writer):
            writer.write(raw_request("POST", CHAT, b"{}", "Connection: close\r\n"))
            data = await read_to_eof(reader)
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "HTTP/1.1 200 OK"
    assert lines[1:] == [
        "Server: llama.cpp",
        "X-Accel-Buffering: no",
        "Content-Type: text/event-stream",
        "Transfer-Encoding: chunked",
        "Connection: close",
    ]
    assert body == b"9\r\ndata: 1\n\n\r\n3\r\n:\n\n\r\n0\r\n\r\n"


@pytest.mark.asyncio
async def test_httpx_stream_arrives_as_scripted() -> None:
    chunks = chat_chunks(["Hello", " world"])
    async with FaultServer() as srv:
        srv.route("POST", CHAT, stream(chunks))
        async with (
            httpx.AsyncClient(base_url=srv.url) as client,
            client.stream("POST", CHAT, json=BODY) as resp,
        ):
            assert resp.status_code == 200
            assert resp.headers["content-type"] == "text/event-stream"
            assert resp.headers["keep-alive"] == "timeout=5, max=100"
            assert resp.headers["server"] == "llama.cpp"
            assert resp.headers["x-accel-buffering"] == "no"
            body = b"".join([b async for b in resp.aiter_raw()])
        assert body == b"".join(chunks)
        assert srv.requests[0].outcome == "complete"
        assert srv.requests[0].json() == BODY


@pytest.mark.asyncio
async def test_sleep_delays_chunks() -> None:
    async with FaultServer() as srv:
        srv.route("GET", "/s", [Status(), Chunk(b"a"), Sleep(0.3), Chunk(b"b"), End()])
        async with raw_conn(srv) as (reader, writer):
            writer.write(raw_request("GET", "/s"))
            start = time.monotonic()
            first = await asyncio.wait_for(reader.readuntil(b"1\r\na\r\n"), 5)
            t_first = time.monotonic() - start
            second = await asyncio.wait_for(reader.readuntil(b"1\r\nb\r\n"), 5)
            t_second = time.monotonic() - start
    assert first.endswith(b"1\r\na\r\n")
    assert second == b"1\r\nb\r\n"
    assert t_first < 0.25
    assert t_second >= 0.28


# ------------------------------------------------------------------------- faults


@pytest.mark.asyncio
async def test_close_mid_body_is_incomplete_for_httpx() -> None:
    async with FaultServer() as srv:
        srv.route("POST", CHAT, [Status(), Chunk(sse({"x": 1})), Close()])
        got: list[bytes] = []

        async def consume(client: httpx.AsyncClient) -> None:
            async with client.stream("POST", CHAT, json=BODY) as resp:
                async for b in resp.aiter_raw():
                    got.append(b)

        async with httpx.AsyncClient(base_url=srv.url) as client:
            with pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked read"):
                await consume(client)
        assert b"".join(got) == sse({"x": 1})
        assert srv.requests[0].outcome == "closed"
        await srv.wait_closed_connections()
        assert srv.connections[0].close_reason == "close"


@pytest.mark.asyncio
async def test_script_running_out_mid_body_closes() -> None:
    async with FaultServer() as srv:
        srv.route("GET", "/t", stream([b"data: 1\n\n"], end=False))
        async with httpx.AsyncClient(base_url=srv.url) as client:
            with pytest.raises(httpx.RemoteProtocolError):
                async with client.stream("GET", "/t") as resp:
                    await resp.aread()
        assert srv.requests[0].outcome == "closed"


@pytest.mark.asyncio
async def test_close_before_status() -> None:
    async with FaultServer() as srv:
        srv.route("GET", "/c", [Close()])
        async with httpx.AsyncClient(base_url=srv.url) as client:
            with pytest.raises(httpx.RemoteProtocolError, match="without sending a response"):
                await client.get("/c")


@pytest.mark.asyncio
async def test_reset_gives_connection_reset() -> None:
    async with FaultServer() as srv:
        srv.route("POST", CHAT, [Status(), Chunk(b"data: 1\n\n"), Sleep(0.05), Reset()])
        async with httpx.AsyncClient(base_url=srv.url) as client:
            with pytest.raises(httpx.ReadError) as info:
                async with client.stream("POST", CHAT, json=BODY) as resp:
                    await resp.aread()
        chain: list[BaseException] = []
        exc: BaseException | None = info.value
        while exc is not None:
            chain.append(exc)
            exc = exc.__cause__ or exc.__context__
        assert any(isinstance(e, ConnectionResetError) for e in chain)
        # raw socket: the data before the RST is readable, then ECONNRESET
        async with raw_conn(srv) as (reader, writer):
            writer.write(raw_request("POST", CHAT, b"{}"))
            await asyncio.wait_for(reader.readuntil(b"data: 1\n\n\r\n"), 5)
            with pytest.raises(ConnectionResetError):
                await asyncio.wait_for(reader.read(), 5)
        assert [r.outcome for r in srv.requests] == ["reset", "reset"]
        await srv.wait_closed_connections()
        assert [c.close_reason for c in srv.connections] == ["reset", "reset"]


@pytest.mark.asyncio
async def test_reset_before_status() -> None:
    async with FaultServer() as srv:
        srv.route("GET", "/r", [Reset()])
        async with httpx.AsyncClient(base_url=srv.url) as client:
            with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
                await client.get("/r")


@pytest.mark.asyncio
async def test_refused_url() -> None:
    url = refused_url()
    assert url.startswith("http://127.0.0.1:")
    async with httpx.AsyncClient() as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(url + "/health")


# ------------------------------------------------------------------------- disconnects


@pytest.mark.asyncio
async def test_client_disconnect_mid_stream_is_detected() -> None:
    async with FaultServer() as srv:
        srv.route("POST", CHAT, [Status(), Chunk(b"data: 1\n\n"), Hold()])
        async with httpx.AsyncClient(base_url=srv.url) as client:
            async with client.stream("POST", CHAT, json=BODY) as resp:
                async for _ in resp.aiter_raw():
                    break  # leaving the block closes the unfinished response
            left = time.monotonic()
            disc = await srv.wait_disconnect(timeout=5)
        assert disc.request is srv.requests[0]
        assert disc.step == 2  # during Hold
        assert not disc.reset
        assert disc.time - left < 1.0
        assert srv.requests[0].outcome == "disconnected"
        await srv.wait_closed_connections()
        assert srv.connections_open == 0
        assert srv.connections[0].close_reason == "disconnect"


@pytest.mark.asyncio
async def test_disconnect_while_queued_before_headers() -> None:
    # llama-server phase D: nothing at all on the wire; client read timeout fires.
    async with FaultServer() as srv:
        srv.route("POST", CHAT, [Sleep(30), *stream(chat_chunks())])
        async with httpx.AsyncClient(base_url=srv.url, timeout=0.2) as client:
            with pytest.raises(httpx.ReadTimeout):
                await client.post(CHAT, json=BODY)
        disc = await srv.wait_disconnect()
        assert disc.step == 0


@pytest.mark.asyncio
async def test_half_close_counts_as_disconnect() -> None:
    async with FaultServer() as srv:
        srv.route("GET", "/h", [Status(), Hold()])
        async with raw_conn(srv) as (reader, writer):
            writer.write(raw_request("GET", "/h"))
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            writer.write_eof()
            await srv.wait_disconnect()
            assert await read_to_eof(reader) == b""


@pytest.mark.asyncio
async def test_wait_disconnect_times_out() -> None:
    async with FaultServer() as srv:
        with pytest.raises(TimeoutError):
            await srv.wait_disconnect(timeout=0.05)


@pytest.mark.asyncio
async def test_hold_timeout_closes() -> None:
    async with FaultServer() as srv:
        srv.route("GET", "/h", [Hold(timeout=0.1)])
        async with httpx.AsyncClient(base_url=srv.url) as client:
            with pytest.raises(httpx.RemoteProtocolError):
                await client.get("/h")
        assert srv.requests[0].outcome == "hold_timeout"
        assert srv.disconnects == []


# ------------------------------------------------------------------------- keep-alive


@pytest.mark.asyncio
async def test_keep_alive_reuse() -> None:
    async with FaultServer() as srv:
        srv.route("POST", CHAT, stream(chat_chunks()))
        srv.route("GET", "/health", [Json(200, {"status": "ok"})])
        async with httpx.AsyncClient(base_url=srv.url) as client:
            async with client.stream("POST", CHAT, json=BODY) as resp:
                await resp.aread()
            health = await client.get("/health")
            assert health.json() == {"status": "ok"}
            assert health.headers["content-length"] == str(len(b'{"status":"ok"}'))
            assert health.headers["keep-alive"] == "timeout=5, max=100"
            async with client.stream("POST", CHAT, json=BODY) as resp:
                await resp.aread()
        assert srv.connections_accepted == 1
        assert [r.conn_id for r in srv.requests] == [1, 1, 1]
        assert [r.index_on_conn for r in srv.requests] == [0, 1, 2]
        assert srv.connections[0].requests == 3


@pytest.mark.asyncio
async def test_error_status_closes_connection() -> None:
    async with FaultServer() as srv:
        srv.route(
            "POST",
            CHAT,
            [Json(400, error_body(400, "bad"))],
            [Status(500), Chunk(error_event()), End()],
            stream(chat_chunks()),
        )
        async with httpx.AsyncClient(base_url=srv.url) as client:
            r1 = await client.post(CHAT, json=BODY)
            assert r1.status_code == 400
            assert r1.headers["connection"] == "close"
            assert r1.headers["content-type"] == "application/json; charset=utf-8"
            assert r1.json()["error"]["type"] == "invalid_request_error"
            r2 = await client.post(CHAT, json=BODY)
            assert r2.status_code == 500
            assert r2.headers["connection"] == "close"
            assert "keep-alive" not in r2.headers
            r3 = await client.post(CHAT, json=BODY)
            assert r3.status_code == 200
        assert [r.conn_id for r in srv.requests] == [1, 2, 3]
        await srv.wait_for(lambda: srv.connections_open <= 1)
        assert [c.close_reason for c in srv.connections[:2]] == ["close", "close"]


@pytest.mark.asyncio
async def test_idle_connection_closed_after_timeout() -> None:
    async with FaultServer(idle_timeout=0.2) as srv:
        srv.route("GET", "/health", [Json(200, {"status": "ok"})])
        async with httpx.AsyncClient(base_url=srv.url) as client:
            await client.get("/health")
            assert srv.connections_open == 1
            await srv.wait_closed_connections(timeout=5)
            assert srv.connections[0].close_reason == "idle"
            idle = srv.connections[0]
            assert idle.closed is not None
            assert idle.closed - srv.requests[0].time >= 0.15
            await client.get("/health")  # httpx notices the closed socket, reconnects
        assert srv.connections_accepted == 2


@pytest.mark.asyncio
async def test_client_connection_close_header() -> None:
    async with FaultServer() as srv:
        srv.route("GET", "/x", [Response(200, b"hi")])
        async with raw_conn(srv) as (reader, writer):
            writer.write(raw_request("GET", "/x", extra="Connection: close\r\n"))
            data = await read_to_eof(reader)
        assert data.startswith(b"HTTP/1.1 200 OK\r\n")
        assert b"\r\nConnection: close\r\n" in data
        assert data.endswith(b"\r\n\r\nhi")


@pytest.mark.asyncio
async def test_pipelined_requests_on_one_connection() -> None:
    async with FaultServer() as srv:
        srv.route("GET", "/a", [Response(200, b"A")])
        srv.route("GET", "/b", [Response(200, b"B")])
        async with raw_conn(srv) as (reader, writer):
            writer.write(
                raw_request("GET", "/a") + raw_request("GET", "/b", extra="Connection: close\r\n")
            )
            data = await read_to_eof(reader)
        assert data.count(b"HTTP/1.1 200 OK") == 2
        assert data.endswith(b"B")
        assert [r.path for r in srv.requests] == ["/a", "/b"]
        assert srv.disconnects == []


# ------------------------------------------------------------------------- programming


@pytest.mark.asyncio
async def test_successive_scripts_last_repeats() -> None:
    async with FaultServer() as srv:
        route = srv.route(
            "POST",
            CHAT,
            [Reset()],
            [Json(503, error_body(503, "Loading model"))],
            stream(chat_chunks("ok")),
        )
        async with httpx.AsyncClient(base_url=srv.url) as client:
            with pytest.raises(httpx.ReadError):
                await client.post(CHAT, json=BODY)
            assert (await client.post(CHAT, json=BODY)).status_code == 503
            for _ in range(2):
                r = await client.post(CHAT, json=BODY)
                assert r.status_code == 200
                assert events(r.content)[-1] == "[DONE]"
        assert route.calls == 4
        assert [r.outcome for r in srv.requests] == ["reset", "complete", "complete", "complete"]


@pytest.mark.asyncio
async def test_handlers_sync_and_async() -> None:
    def echo(req: Request) -> Script:
        return [Json(200, {"path": req.path, "query": req.query, "got": req.json()})]

    async def slow(req: Request) -> Script:
        await asyncio.sleep(0.01)
        return [Response(201, req.body, content_type="application/octet-stream")]

    async with FaultServer() as srv:
        srv.route("POST", "/echo", echo)
        srv.route("PUT", "/slow", slow)
        async with httpx.AsyncClient(base_url=srv.url) as client:
            r = await client.post("/echo?a=1", json={"k": "v"})
            assert r.json() == {"path": "/echo", "query": "a=1", "got": {"k": "v"}}
            r = await client.put("/slow", content=b"\x00\x01")
            assert r.status_code == 201
            assert r.content == b"\x00\x01"


@pytest.mark.asyncio
async def test_requests_are_recorded() -> None:
    async with FaultServer() as srv:
        srv.route("POST", CHAT, [Json(200, {})])
        before = time.monotonic()
        async with httpx.AsyncClient(base_url=srv.url) as client:
            await client.post(CHAT + "?x=y", json=BODY, headers={"X-Conversation-Id": "c1"})
        req = srv.requests[0]
        assert req.method == "POST"
        assert req.path == CHAT
        assert req.target == CHAT + "?x=y"
        assert req.query == "x=y"
        assert req.version == "HTTP/1.1"
        assert req.headers["x-conversation-id"] == "c1"
        assert req.headers["X-CONVERSATION-ID"] == "c1"
        assert "content-type" in req.headers
        assert req.headers.get("missing") is None
        assert json.loads(req.body) == BODY
        assert before <= req.time <= time.monotonic()
        assert await srv.wait_requests(1) is req


@pytest.mark.asyncio
async def test_chunked_request_body_is_decoded() -> None:
    async with FaultServer() as srv:
        srv.route("POST", "/p", [Response(200, b"ok")])
        async with raw_conn(srv) as (reader, writer):
            writer.write(
                b"POST /p HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
                b"Connection: close\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
            )
            assert (await read_to_eof(reader)).endswith(b"ok")
        assert srv.requests[0].body == b"abcde"


@pytest.mark.asyncio
async def test_unrouted_path_gets_llama_server_404() -> None:
    async with FaultServer() as srv:
        async with httpx.AsyncClient(base_url=srv.url) as client:
            r = await client.get("/nope")
        assert r.status_code == 404
        assert r.json() == {
            "error": {"message": "File Not Found", "type": "not_found_error", "code": 404}
        }
        assert r.headers["connection"] == "close"


@pytest.mark.asyncio
async def test_the_catch_all_route_takes_what_no_other_route_takes() -> None:
    async with FaultServer() as srv:
        srv.route("GET", "/own", [Json(200, "own")])
        srv.route("*", "*", lambda request: [Json(200, [request.method, request.target])])
        async with httpx.AsyncClient(base_url=srv.url) as client:
            own = await client.get("/own")
            other = await client.post("/any/where?x=1", content=b"{}")
    assert own.json() == "own"
    assert other.json() == ["POST", "/any/where?x=1"]


@pytest.mark.asyncio
async def test_status_header_overrides_and_raw_bytes() -> None:
    async with FaultServer() as srv:
        srv.route(
            "GET",
            "/o",
            [
                Status(
                    200, headers={"Content-Type": "application/json", "X-Accel-Buffering": None}
                ),
                Chunk(b"{}"),
                End(),
            ],
        )
        srv.route(
            "GET",
            "/raw",
            [
                Raw(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhe"),
                Sleep(0.01),
                Raw(b"llo"),
                End(),
            ],
        )
        srv.route("GET", "/plain", [Status(200, chunked=False), Chunk(b"until close"), Close()])
        async with httpx.AsyncClient(base_url=srv.url) as client:
            r = await client.get("/o")
            assert r.headers["content-type"] == "application/json"
            assert "x-accel-buffering" not in r.headers
            r = await client.get("/raw")
            assert r.text == "hello"
            r = await client.get("/plain")
            assert r.text == "until close"
            assert "transfer-encoding" not in r.headers


@pytest.mark.asyncio
async def test_wait_and_call_steps() -> None:
    gate = asyncio.Event()
    reached = asyncio.Event()
    async with FaultServer() as srv:
        srv.route(
            "GET",
            "/g",
            [Status(), Call(reached.set), Wait(gate), Chunk(b"after"), End()],
        )
        async with httpx.AsyncClient(base_url=srv.url) as client:
            task = asyncio.create_task(client.get("/g"))
            await asyncio.wait_for(reached.wait(), 5)
            await asyncio.sleep(0.05)
            assert not task.done()
            gate.set()
            r = await asyncio.wait_for(task, 5)
        assert r.text == "after"


@pytest.mark.asyncio
async def test_script_errors_raise_on_exit() -> None:
    async def scenario() -> None:
        async with FaultServer() as srv:
            srv.route("GET", "/bad", [Status(), Status()])
            async with httpx.AsyncClient(base_url=srv.url) as client:
                with pytest.raises(httpx.RemoteProtocolError):
                    await client.get("/bad")
            assert srv.requests[0].outcome == "error"

    with pytest.raises(FaultServerError, match="second Status"):
        await scenario()


@pytest.mark.asyncio
async def test_handler_exception_gives_500_and_raises_on_exit() -> None:
    def broken(req: Request) -> Script:
        raise ValueError("nope")

    async def scenario() -> None:
        async with FaultServer() as srv:
            srv.route("GET", "/b", broken)
            async with httpx.AsyncClient(base_url=srv.url) as client:
                assert (await client.get("/b")).status_code == 500

    with pytest.raises(FaultServerError, match="nope"):
        await scenario()


@pytest.mark.asyncio
async def test_shutdown_with_open_connections_leaves_nothing_behind() -> None:
    before = asyncio.all_tasks()
    async with FaultServer(idle_timeout=None) as srv:
        srv.route("GET", "/h", [Status(), Hold()])
        srv.route("GET", "/ok", [Response(200, b"ok")])
        url = srv.url
        held_reader, held_writer = await asyncio.open_connection("127.0.0.1", srv.port)
        idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", srv.port)
        held_writer.write(raw_request("GET", "/h"))
        idle_writer.write(raw_request("GET", "/ok"))
        await srv.wait_requests(2)
        assert srv.connections_open == 2
        start = time.monotonic()
    try:
        assert time.monotonic() - start < 2
        assert asyncio.all_tasks() == before
        assert srv.connections_open == 0
        assert {c.close_reason for c in srv.connections} == {"shutdown"}
        # the clients see the connection go away
        assert (await read_to_eof(held_reader)).startswith(b"HTTP/1.1 200 OK")
        assert (await read_to_eof(idle_reader)).endswith(b"ok")
    finally:
        for w in (held_writer, idle_writer):
            w.close()
            with suppress(OSError):
                await asyncio.wait_for(w.wait_closed(), 5)
    async with httpx.AsyncClient() as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(url)


@pytest.mark.asyncio
async def test_url_and_port() -> None:
    srv = FaultServer()
    with pytest.raises(RuntimeError):
        _ = srv.url
    async with srv:
        assert srv.url == f"http://127.0.0.1:{srv.port}"
        with socket.create_connection(("127.0.0.1", srv.port), timeout=5):
            pass
        await srv.wait_for(lambda: srv.connections_accepted == 1)


# ------------------------------------------------- on any event loop: a thread of its own


def server_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "FaultServer loop"]


@pytest.mark.anyio
@pytest.mark.parametrize("thread", [None, True], ids=["auto", "thread"])
async def test_the_same_api_on_both_event_loops(anyio_backend: str, thread: bool | None) -> None:
    """Entered from trio (or with ``thread=True``) the server runs in an asyncio loop of its
    own: routes, records, ``wait_*``, gates and disconnects work the same."""
    gate = Gate()
    async with FaultServer(thread=thread) as srv:
        assert srv.threaded is (thread is True or anyio_backend == "trio")
        assert len(server_threads()) == (1 if srv.threaded else 0)
        srv.route("POST", CHAT, stream(chat_chunks(["Hel", "lo"])))
        srv.route("GET", "/gate", [Status(), Chunk(b"1"), Wait(gate), Chunk(b"2"), End()])
        srv.route("GET", "/hold", [Status(), Chunk(b"x"), Hold()])
        async with httpx.AsyncClient(base_url=srv.url) as client:
            r = await client.post(CHAT, json=BODY)
            assert r.status_code == 200
            assert srv.requests[0].json() == BODY

            got: list[bytes] = []

            async def get_gate() -> None:
                got.append((await client.get("/gate")).content)

            async with anyio.create_task_group() as tg:
                tg.start_soon(get_gate)
                await srv.wait_requests(2, timeout=5.0)
                await anyio.sleep(0.05)
                assert got == []  # held by the gate
                gate.set()  # from this loop, released in the server's
            assert got == [b"12"]

            async with client.stream("GET", "/hold") as response:
                assert response.status_code == 200
            disconnect = await srv.wait_disconnect(timeout=5.0)
            assert disconnect.request.path == "/hold"
        await srv.wait_closed_connections(timeout=5.0)
        with pytest.raises(TimeoutError):
            await srv.wait_requests(99, timeout=0.05)
    assert server_threads() == []


@pytest.mark.anyio
async def test_a_cancelled_wait_leaves_the_server_working(anyio_backend: str) -> None:
    async with FaultServer(thread=True) as srv:
        srv.route("GET", "/", [Json(200, {"ok": True})])
        with anyio.move_on_after(0.05) as scope:
            await srv.wait_for(lambda: False, timeout=5.0)
        assert scope.cancelled_caught
        async with httpx.AsyncClient(base_url=srv.url) as client:
            assert (await client.get("/")).json() == {"ok": True}
        await srv.wait_requests(1)
    assert server_threads() == []


@pytest.mark.anyio
async def test_script_errors_raise_on_exit_from_a_thread(anyio_backend: str) -> None:
    async def scenario() -> None:
        async with FaultServer(thread=True) as srv:
            srv.route("GET", "/", [Status(), Status()])
            async with httpx.AsyncClient(base_url=srv.url) as client:
                with suppress(httpx.HTTPError):
                    await client.get("/")

    with pytest.raises(FaultServerError, match="second Status"):
        await scenario()
    assert server_threads() == []
