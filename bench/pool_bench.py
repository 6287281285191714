"""What the Pool costs: routing overhead per request and memory per session.

- ``route_us_sticky``: ``Balancer.route`` + ``start`` + ``finish`` for a known session (the
  path of every turn after the first), 3 servers x 2 slots, 1,000 sessions.
- ``route_us_new``: the same for a new session (without the ``/slots`` look, which is one
  small HTTP exchange per server).
- ``pool_overhead_us``: ``Pool.complete`` minus ``Client.complete`` of the same request
  pinned to the same slot, both on an in-memory transport that answers a 3-event stream at
  once (no sockets): the wrapper, the ``Routed`` event and the bookkeeping, for sticky
  turns. ``pool_vs_unpinned_us``: the same against an unpinned ``Client.complete`` (it
  adds the client's own ``/slots`` look before a pinned request).
- ``bytes_per_session``: traced memory of 100,000 sessions in the Balancer, per session.

Run: ``python -m bench.pool_bench`` (prints the numbers); ``run()`` returns them.
"""

from __future__ import annotations

import asyncio
import sys
import time
import tracemalloc
from collections.abc import Mapping
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llamaclient import ChatRequest, Client, Config, Pool, UserMessage
from llamaclient._turn.balancer import Balancer

_SSE = (
    b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant",'
    b'"content":"ok"}}],"created":1,"id":"chatcmpl-1","model":"m","object":"chat.completion.chunk"}'
    b"\n\n"
    b'data: {"choices":[{"finish_reason":"stop","index":0,"delta":{}}],"created":1,'
    b'"id":"chatcmpl-1","model":"m","object":"chat.completion.chunk"}\n\n'
    b"data: [DONE]\n\n"
)
_SLOTS = b'[{"id":0,"is_processing":false},{"id":1,"is_processing":false}]'


class _Answer:
    __slots__ = ("_body", "_type", "status")

    fair_reads = False
    complete = False

    def __init__(self, body: bytes, content_type: str) -> None:
        self.status = 200
        self._body = body
        self._type = content_type

    def header(self, name: str) -> str | None:
        return self._type if name == "content-type" else None

    async def read(self) -> bytes:
        body, self._body = self._body, b""
        return body

    async def aread(self) -> bytes:
        return await self.read()

    async def aclose(self) -> None:
        pass


class _Memory:
    """A server that answers at once: /slots, /models (plain) and chat streams."""

    async def send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        *,
        read_timeout: float | None = None,
    ) -> _Answer:
        if "/slots" in url:
            return _Answer(_SLOTS, "application/json")
        return _Answer(_SSE, "text/event-stream")

    async def aclose(self) -> None:
        pass


def _route_us(new: bool, n: int = 200_000) -> float:
    balancer = Balancer(3)
    for server in balancer.servers:
        server.slots = 2
    names = [f"session-{i}" for i in range(1_000)]
    for name in names:
        route = balancer.route(name, None, 0.0)
        assert route is not None
        balancer.start(name, route)
        balancer.finish(name, route, 0.0)
    if new:
        names = [f"new-{i}" for i in range(n)]
    start = time.perf_counter()
    for i in range(n):
        name = names[i % len(names)]
        route = balancer.route(name, None, 0.0)
        assert route is not None
        balancer.start(name, route)
        balancer.finish(name, route, 0.0)
    return (time.perf_counter() - start) / n * 1e6


async def _overhead_us(slot: int | None, rounds: int = 15, batch: int = 400) -> float:
    """Best CPU time per request of each, over interleaved batches (a loaded machine's
    noise only ever adds time), then the difference."""
    config = Config("http://memory", resume=False)
    direct = ChatRequest([UserMessage("hi")], slot=slot)
    sticky = ChatRequest([UserMessage("hi")], session="s")
    best = {"direct": float("inf"), "pool": float("inf")}
    async with (
        Client(config, transport=_Memory()) as client,
        Pool([config] * 3, transports=[_Memory(), _Memory(), _Memory()]) as pool,
    ):
        await pool.complete(sticky)
        for _ in range(rounds):
            start = time.process_time()
            for _ in range(batch):
                await client.complete(direct)
            best["direct"] = min(best["direct"], time.process_time() - start)
            start = time.process_time()
            for _ in range(batch):
                await pool.complete(sticky)
            best["pool"] = min(best["pool"], time.process_time() - start)
    return (best["pool"] - best["direct"]) / batch * 1e6


def _bytes_per_session(n: int = 100_000) -> float:
    balancer = Balancer(3)
    for server in balancer.servers:
        server.slots = 2
    names = [f"session-{i:06d}" for i in range(n)]  # the names are the caller's
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for name in names:
        route = balancer.route(name, None, 0.0)
        assert route is not None
        balancer.start(name, route)
        balancer.finish(name, route, 0.0)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return (after - before) / n


def run() -> dict[str, float]:
    """Every figure of the module docstring (best of 3 for the times)."""
    return {
        "route_us_sticky": min(_route_us(False) for _ in range(3)),
        "route_us_new": min(_route_us(True, 50_000) for _ in range(3)),
        "pool_overhead_us": asyncio.run(_overhead_us(0)),
        "pool_vs_unpinned_us": asyncio.run(_overhead_us(None)),
        "bytes_per_session": _bytes_per_session(),
    }


if __name__ == "__main__":
    for key, value in run().items():
        print(f"{key}: {value:.2f}")
