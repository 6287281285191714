"""A loopback TCP proxy that cuts chosen connections after a chosen number of response bytes.

It runs its own asyncio loop in a thread, so tests on any event loop (asyncio or trio) can use
it. ``arm(n)`` makes the next connection whose request is a chat POST break after the server
has sent it ``n`` bytes (status line, headers and HTTP chunk framing included): the client
gets exactly those bytes, then the connection is closed. Every other connection is relayed
untouched. ``cuts`` records, per cut, when it happened (``time.monotonic()``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator

__all__ = ["CutProxy"]

_CHAT = b"POST /v1/chat/completions"


class CutProxy:
    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        self.host = host
        self.target_port = target_port
        self.port = 0
        self.cuts: list[float] = []
        self._armed: list[int] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="CutProxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def arm(self, after_bytes: int) -> None:
        """Cut the next chat connection after ``after_bytes`` bytes of its response."""
        with self._lock:
            self._armed.append(after_bytes)

    @contextlib.contextmanager
    def running(self) -> Iterator[CutProxy]:
        self._thread.start()
        self._ready.wait(5)
        try:
            yield self
        finally:
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(5)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)

    async def _shutdown(self) -> None:
        """Close the listener and every relayed connection, and wait for their handlers."""
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, self.host, 0)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        self._server.close()
        self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.target_port)
        except OSError:
            writer.transport.abort()
            self._writers.discard(writer)
            return
        self._writers.add(up_writer)
        try:
            await self._relay(reader, writer, up_reader, up_writer)
        finally:
            for w in (writer, up_writer):
                w.transport.abort()  # at once, both ways: the cut is a cut
                self._writers.discard(w)

    async def _relay(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
    ) -> None:
        first = await reader.read(65536)
        limit = None
        if first.startswith(_CHAT):
            with self._lock:
                limit = self._armed.pop(0) if self._armed else None
        up_writer.write(first)
        up = asyncio.ensure_future(_pipe(reader, up_writer, None, None))
        down = asyncio.ensure_future(_pipe(up_reader, writer, limit, self.cuts))
        try:
            await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (up, down):
                task.cancel()
            await asyncio.gather(up, down, return_exceptions=True)


async def _pipe(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    limit: int | None,
    cuts: list[float] | None,
) -> None:
    sent = 0
    while True:
        data = await reader.read(65536)
        if not data:
            return
        if limit is not None and sent + len(data) >= limit:
            writer.write(data[: limit - sent])
            await writer.drain()
            if cuts is not None:
                cuts.append(time.monotonic())
            return
        sent += len(data)
        writer.write(data)
        await writer.drain()
