"""Microbenchmark of the native transport's per-read path (not collected by pytest).

``python -m tests.transports.bench_hotpath``: feeds 100,000 typical llama-server reads (one
whole HTTP chunk holding one ~350-byte SSE event) to ``_Connection`` and prints the cost per
read in ns, for ``data_received(bytes)`` and for ``buffer_updated`` (the copy out of the
shared read buffer included). The body list is taken after every read, like ``read()``
(which also zeroes ``buffered``).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from llamaclient._transports.native import _Connection

N = 100_000
EVENT = (
    b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":" token"}}],'
    b'"created":1760000000,"id":"chatcmpl-AbCdEfGhIjKlMnOpQrStUvWxYz012345",'
    b'"model":"gemma-3-270m-it","system_fingerprint":"b6000-515e85511",'
    b'"object":"chat.completion.chunk","timings":{"prompt_n":20,"prompt_ms":50.0,'
    b'"predicted_n":7,"predicted_ms":70.0,"predicted_per_second":100.0}}\n\n'
)
READ = b"%x\r\n" % len(EVENT) + EVENT + b"\r\n"
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


class _Sink(asyncio.Transport):
    def write(self, data: Any) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


def _conn(view: memoryview) -> _Connection:
    conn = _Connection(asyncio.get_running_loop(), ("h", 80), view)
    conn.connection_made(_Sink())
    conn.begin(b"GET / HTTP/1.1\r\n\r\n", head_only=False, keep_alive=True)
    conn.data_received(HEAD)
    return conn


def _run_data_received() -> float:
    conn = _conn(memoryview(bytearray(16)))
    feed = conn.data_received
    body = conn.body
    data = READ
    t0 = time.perf_counter_ns()
    for _ in range(N):
        feed(data)
        body.clear()
        conn.buffered = 0
    return (time.perf_counter_ns() - t0) / N


def _run_buffer_updated() -> float:
    view = memoryview(bytearray(256 * 1024))
    view[: len(READ)] = READ
    conn = _conn(view)
    updated = conn.buffer_updated
    body = conn.body
    n = len(READ)
    t0 = time.perf_counter_ns()
    for _ in range(N):
        updated(n)
        body.clear()
        conn.buffered = 0
    return (time.perf_counter_ns() - t0) / N


async def main() -> None:
    assert len(EVENT) > 300, len(EVENT)
    for name, run in (("data_received", _run_data_received), ("buffer_updated", _run_buffer_updated)):
        times = [run() for _ in range(7)]
        print(f"{name:15s} min {min(times):6.1f} ns/read  median {statistics.median(times):6.1f}")


if __name__ == "__main__":
    asyncio.run(main())
