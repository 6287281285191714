"""A fake llama-server for the benchmarks, run in its own process(es).

A raw asyncio server: HTTP/1.1 keep-alive, ``TCP_NODELAY``, ``Transfer-Encoding: chunked``
with one HTTP chunk per event, llama-server's headers, and the chunks of :mod:`bench.chunks`.
The request's ``model`` field selects the stream (:class:`bench.chunks.Spec`).

``python -m bench.fake_server --workers N`` prints ``PORT <port>`` and ``PIDS <pid> ...``
and forks N worker processes that share one listening socket. :class:`FakeServer` starts
and stops it from the harness and reads the workers' CPU time from ``/proc``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from bench.chunks import DONE, LAST, Spec, final_chunk, stamped_chunk, stream_chunks

__all__ = ["FakeServer"]

_STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nServer: llama.cpp\r\nX-Accel-Buffering: no\r\n"
    b"Content-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
    b"Keep-Alive: timeout=5, max=100\r\n\r\n"
)
_JSON = {
    "/health": b'{"status":"ok"}',
    "/props": b'{"default_generation_settings":{"n_ctx":4096},"total_slots":256}',
    "/slots": b"[]",
    "/v1/models": b'{"object":"list","data":[{"id":"gemma-3-270m-it-Q4_K_M.gguf"}]}',
}
_NOT_FOUND = b'{"error":{"code":404,"message":"File Not Found","type":"not_found_error"}}'
_bodies: dict[Spec, bytes] = {}


def _json_response(status: str, body: bytes) -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nServer: llama.cpp\r\nContent-Type: application/json; "
        f"charset=utf-8\r\nContent-Length: {len(body)}\r\nKeep-Alive: timeout=5, max=100\r\n\r\n"
    ).encode() + body


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if "content-length" in headers:
        return await reader.readexactly(int(headers["content-length"]))
    if headers.get("transfer-encoding", "").lower() != "chunked":
        return b""
    parts: list[bytes] = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        data = await reader.readexactly(size + 2)
        if size == 0:
            return b"".join(parts)
        parts.append(data[:-2])


async def _stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, spec: Spec) -> None:
    writer.write(_STREAM_HEAD)
    if spec.mode == "bulk":
        body = _bodies.get(spec)
        if body is None:
            body = _bodies[spec] = b"".join(stream_chunks(spec)) + LAST
        writer.write(body)
    elif spec.mode == "hold":
        chunks = stream_chunks(spec)
        writer.write(next(chunks))
        with contextlib.suppress(asyncio.TimeoutError, ConnectionError):
            await asyncio.wait_for(reader.read(1), 120)  # until the client goes away
        if writer.is_closing():
            return
        writer.write(final_chunk(spec) + DONE + LAST)
    else:
        loop = asyncio.get_running_loop()
        period = 1.0 / spec.rate
        start = loop.time() + random.random() * period
        for i in range(1, spec.n + 1):
            delay = start + (i - 1) * period - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if writer.is_closing():
                return
            writer.write(stamped_chunk(i, time.time(), i == 1))
        writer.write(final_chunk(spec) + DONE + LAST)
    await writer.drain()


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            headers = {}
            for line in lines[1:]:
                name, sep, value = line.partition(":")
                if sep:
                    headers[name.strip().lower()] = value.strip()
            body = await _read_body(reader, headers)
            path = target.split("?", 1)[0]
            if method == "POST" and path.endswith("/chat/completions"):
                model = json.loads(body or b"{}").get("model") or ""
                await _stream(reader, writer, Spec.parse(str(model)))
            elif path in _JSON:
                writer.write(_json_response("200 OK", _JSON[path]))
            else:
                error = (
                    b'{"error":{"code":404,"message":"File Not Found","type":"not_found_error"}}'
                )
                writer.write(_json_response("404 Not Found", error))
            if headers.get("connection", "").lower() == "close" or writer.is_closing():
                return
    except (ConnectionError, asyncio.IncompleteReadError):
        return
    finally:
        writer.close()


async def _serve(sock: socket.socket) -> None:
    server = await asyncio.start_server(_handle, sock=sock, backlog=1024)
    parent = os.getppid()
    async with server:
        while os.getppid() == parent:  # noqa: ASYNC110 - exit with the parent; no event for that
            await asyncio.sleep(0.5)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(1024)
    sock.setblocking(False)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    pids = []
    for _ in range(args.workers):
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            asyncio.run(_serve(sock))
            os._exit(0)
        pids.append(pid)
    print("PIDS " + " ".join(map(str, pids)), flush=True)

    def stop(signum: int, frame: object) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for pid in pids:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        signal.pause()


class FakeServer:
    """The fake server as a child process: ``with FakeServer(workers=2) as server: server.url``."""

    def __init__(self, workers: int = 1) -> None:
        self.workers = workers
        self.url = ""
        self.pids: list[int] = []
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> FakeServer:
        root = Path(__file__).resolve().parent.parent
        cmd = [sys.executable, "-m", "bench.fake_server", "--workers", str(self.workers)]
        self._proc = proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        port = int(proc.stdout.readline().split()[1])
        self.pids = [int(p) for p in proc.stdout.readline().split()[1:]]
        self.url = f"http://127.0.0.1:{port}"
        self._wait_ready(port)
        return self

    def _wait_ready(self, port: int) -> None:
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                    conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    if conn.recv(64).startswith(b"HTTP/1.1 200"):
                        return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def cpu_seconds(self) -> float:
        """User + system CPU time of the worker processes so far."""
        ticks = os.sysconf("SC_CLK_TCK")
        total = 0.0
        for pid in self.pids:
            with contextlib.suppress(OSError):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / ticks
        return total

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            if self._proc.stdout is not None:
                self._proc.stdout.close()


if __name__ == "__main__":
    main()
