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
import heapq
import itertools
import json
import os
import random
import resource
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

from bench.chunks import DONE, LAST, Spec, final_chunk, stamped_chunk, stream_chunks

__all__ = ["STREAM_HEAD", "FakeServer", "raise_fd_limit"]

STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nServer: llama.cpp\r\nX-Accel-Buffering: no\r\n"
    b"Content-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
    b"Keep-Alive: timeout=5, max=100\r\n\r\n"
)
_JSON = {
    "/health": b'{"status":"ok"}',
    "/props": b'{"default_generation_settings":{"n_ctx":4096},"total_slots":256}',
    "/slots": b"[]",
    "/models": b'{"object":"list","data":[{"id":"gemma-3-270m-it-Q4_K_M.gguf"}]}',
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


class _Paced:
    __slots__ = ("done", "i", "n", "period", "spec", "start", "writer")

    def __init__(self, writer: asyncio.StreamWriter, spec: Spec, start: float) -> None:
        self.writer, self.spec, self.start = writer, spec, start
        self.period = 1.0 / spec.rate
        self.n = spec.n
        self.i = 0
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()


class _Pacer:
    """Writes the events of every paced stream of this worker from one timer: a heap of due
    times, all due streams written per wake-up (1 ms slack). One task per stream sleeping
    between events cost about twice the CPU, and the fake server must stay cheap next to the
    client (1,024 streams at 50/s are 51,200 events/s)."""

    SLACK = 0.001

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.heap: list[tuple[float, int, _Paced]] = []
        self.seq = itertools.count()
        self.handle: asyncio.TimerHandle | None = None

    def add(self, writer: asyncio.StreamWriter, spec: Spec) -> asyncio.Future[None]:
        period = 1.0 / spec.rate
        stream = _Paced(writer, spec, self.loop.time() + random.random() * period)
        heapq.heappush(self.heap, (stream.start, next(self.seq), stream))
        if self.handle is None or self.handle.when() > stream.start:
            if self.handle is not None:
                self.handle.cancel()
            self.handle = self.loop.call_at(stream.start, self._tick)
        return stream.done

    def _tick(self) -> None:
        heap, now = self.heap, self.loop.time() + self.SLACK
        wall = time.time
        while heap and heap[0][0] <= now:
            _, seq, stream = heapq.heappop(heap)
            writer = stream.writer
            if writer.is_closing():
                if not stream.done.done():
                    stream.done.set_result(None)
                continue
            stream.i = i = stream.i + 1
            writer.write(stamped_chunk(i, wall(), i == 1))
            if i >= stream.n:
                writer.write(final_chunk(stream.spec) + DONE + LAST)
                if not stream.done.done():
                    stream.done.set_result(None)
            else:
                heapq.heappush(heap, (stream.start + i * stream.period, seq, stream))
        self.handle = self.loop.call_at(heap[0][0], self._tick) if heap else None


_pacers: dict[asyncio.AbstractEventLoop, _Pacer] = {}


def _pacer() -> _Pacer:
    loop = asyncio.get_running_loop()
    pacer = _pacers.get(loop)
    if pacer is None:
        pacer = _pacers[loop] = _Pacer()
    return pacer


async def _stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, spec: Spec) -> None:
    writer.write(STREAM_HEAD)
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
        await _pacer().add(writer, spec)
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


async def _serve(sock: socket.socket, tls: ssl.SSLContext | None) -> None:
    server = await asyncio.start_server(_handle, sock=sock, backlog=4096, ssl=tls)
    parent = os.getppid()
    async with server:
        while os.getppid() == parent:  # noqa: ASYNC110 - exit with the parent; no event for that
            await asyncio.sleep(0.5)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--cert", help="TLS: serve https:// with this PEM certificate chain")
    parser.add_argument("--key", help="TLS: the certificate's PEM private key")
    args = parser.parse_args(argv)
    raise_fd_limit()
    tls = None
    if args.cert:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(args.cert, args.key)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(4096)
    sock.setblocking(False)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    pids = []
    for _ in range(args.workers):
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            asyncio.run(_serve(sock, tls))
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


def raise_fd_limit(want: int = 65536) -> int:
    """Raise this process's soft ``RLIMIT_NOFILE`` towards ``want`` (at most the hard limit):
    1,024 concurrent streams need more than the usual default soft limit of 1,024 descriptors.
    Returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class FakeServer:
    """The fake server as a child process: ``with FakeServer(workers=2) as server: server.url``.

    ``tls=True`` serves ``https://`` with a certificate for 127.0.0.1 from a throwaway CA made
    at startup with ``trustme``; clients trust ``server.ca_file`` (PEM) or use
    ``server.client_context()``.
    """

    def __init__(self, workers: int = 1, *, tls: bool = False) -> None:
        self.workers = workers
        self.tls = tls
        self.url = ""
        self.ca_file = ""
        self.pids: list[int] = []
        self._proc: subprocess.Popen[str] | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    def client_context(self) -> ssl.SSLContext:
        """An ``ssl.SSLContext`` that trusts this server's CA (TLS mode only)."""
        if not self.ca_file:
            raise RuntimeError("this fake server does not speak TLS")
        return ssl.create_default_context(cafile=self.ca_file)

    def _certificates(self) -> list[str]:
        import trustme  # the bench extra; only the TLS mode needs it

        self._tmp = tempfile.TemporaryDirectory(prefix="bench-tls-")
        folder = Path(self._tmp.name)
        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1", "localhost")
        self.ca_file = str(folder / "ca.pem")
        ca.cert_pem.write_to_path(self.ca_file)
        cert.private_key_pem.write_to_path(str(folder / "key.pem"))
        cert.private_key_and_cert_chain_pem.write_to_path(str(folder / "chain.pem"))
        return ["--cert", str(folder / "chain.pem"), "--key", str(folder / "key.pem")]

    def __enter__(self) -> FakeServer:
        root = Path(__file__).resolve().parent.parent
        cmd = [sys.executable, "-m", "bench.fake_server", "--workers", str(self.workers)]
        if self.tls:
            cmd += self._certificates()
        self._proc = proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        port = int(proc.stdout.readline().split()[1])
        self.pids = [int(p) for p in proc.stdout.readline().split()[1:]]
        self.url = f"{'https' if self.tls else 'http'}://127.0.0.1:{port}"
        self._wait_ready(port)
        return self

    def _wait_ready(self, port: int) -> None:
        deadline = time.monotonic() + 10
        context = self.client_context() if self.tls else None
        while True:
            try:
                with contextlib.ExitStack() as stack:
                    conn = stack.enter_context(socket.create_connection(("127.0.0.1", port), 1))
                    if context is not None:
                        conn = stack.enter_context(
                            context.wrap_socket(conn, server_hostname="127.0.0.1")
                        )
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
        if self._tmp is not None:
            self._tmp.cleanup()


if __name__ == "__main__":
    main()
