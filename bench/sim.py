"""The paced run in-process: a deterministic CPU-per-event measure (``--only sim``).

The real paced scenario goes through the kernel and epoll, and on a shared VM its CPU per
event moves by 10-15 % from run to run (docs/benchmarks.md): more than most changes to the
client. Here the sockets are replaced by a fake transport under asyncio. ``create_connection``
is patched on a private event loop, and a driver hands each open stream its next event once
per round, through the protocol's own callbacks: ``get_buffer``/``buffer_updated`` for ours,
``data_received`` for asyncio's streams. So every event is one read, as with llama-server,
and nothing but the clients' own Python runs. It repeats to about 2-4 %. It leaves out the
syscalls and the epoll wake-ups that both clients pay, so its ratios are higher than the
paced scenario's.
"""

from __future__ import annotations

import asyncio
import gc
import json
import time
from collections.abc import Callable
from typing import Any

from bench.chunks import DONE, LAST, Spec, final_chunk, stamped_chunk
from bench.contenders import make
from bench.fake_server import STREAM_HEAD

__all__ = ["run"]


class _Driver:
    """Hands every open stream its next event, one per round, until it has all of its own:
    the number the request's model name asks for (``Spec``), like the fake server."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.events: list[bytes] = []
        self.tails: dict[int, bytes] = {}
        self.streams: list[list[Any]] = []  # [transport, events sent, events in all]
        self.running = False

    def start(self, transport: _FakeTransport, request: bytes) -> None:
        body = request.partition(b"\r\n\r\n")[2]
        n = Spec.parse(str(json.loads(body).get("model") or "")).n
        while len(self.events) < n:
            i = len(self.events) + 1
            self.events.append(stamped_chunk(i, 1.0, i == 1))
        if n not in self.tails:
            self.tails[n] = final_chunk(Spec(n=n)) + DONE + LAST
        transport.deliver(STREAM_HEAD)
        self.streams.append([transport, 0, n])
        if not self.running:
            self.running = True
            self.loop.call_soon(self.round)

    def round(self) -> None:
        going = []
        for entry in self.streams:
            transport, sent, n = entry
            if transport.closing:
                continue
            if sent < n:
                transport.deliver(self.events[sent])
                entry[1] = sent + 1
                going.append(entry)
            else:
                transport.deliver(self.tails[n])
        self.streams = going
        self.running = bool(going)
        if going:
            self.loop.call_soon(self.round)


class _FakeTransport(asyncio.Transport):
    """A connection to the driver: a request written starts a stream on the next round."""

    def __init__(self, driver: _Driver, protocol: asyncio.BaseProtocol) -> None:
        super().__init__()
        self.driver = driver
        self.protocol = protocol
        self.closing = False

    def write(self, data: Any) -> None:
        # Both clients write a request (head and body) in one call.
        self.driver.loop.call_soon(self.driver.start, self, bytes(data))

    def deliver(self, data: bytes) -> None:
        protocol = self.protocol
        if isinstance(protocol, asyncio.BufferedProtocol):
            buffer = memoryview(protocol.get_buffer(len(data)))
            buffer[: len(data)] = data
            protocol.buffer_updated(len(data))
        elif isinstance(protocol, asyncio.Protocol):
            protocol.data_received(data)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            self.driver.loop.call_soon(self.protocol.connection_lost, None)

    def abort(self) -> None:
        self.close()

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


async def _measure(name: str, streams: int, n: int, rounds: int) -> tuple[float, float]:
    """(best CPU µs per event of ``rounds`` paced runs of ``streams`` x ``n`` events, best
    CPU µs per stream of as many one-event streams)."""
    loop = asyncio.get_running_loop()
    driver = _Driver(loop)

    async def create_connection(
        factory: Callable[[], asyncio.BaseProtocol], *args: Any, **kwargs: Any
    ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        protocol = factory()
        transport = _FakeTransport(driver, protocol)
        protocol.connection_made(transport)
        return transport, protocol

    loop.create_connection = create_connection  # type: ignore[method-assign, assignment]
    contender = make(name, "http://127.0.0.1:9")
    per_event = per_stream = float("inf")
    try:
        for _ in range(rounds):
            for count in (n, 1):
                spec = Spec(mode="paced", n=count, rate=50.0)
                await asyncio.gather(*(contender.run(spec) for _ in range(streams)))  # warm
                gc.collect()
                start = time.process_time()
                await asyncio.gather(*(contender.run(spec) for _ in range(streams)))
                used = (time.process_time() - start) / streams * 1e6
                if count == 1:
                    per_stream = min(per_stream, used)
                else:
                    per_event = min(per_event, used / count)
    finally:
        await contender.aclose()
    return per_event, per_stream


def run(
    names: tuple[str, ...], streams: int, n: int, rounds: int
) -> dict[str, tuple[float, float]]:
    """Each contender in a fresh event loop of its own (this is called from a thread)."""
    return {name: asyncio.run(_measure(name, streams, n, rounds)) for name in names}
