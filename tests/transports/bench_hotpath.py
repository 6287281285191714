"""Microbenchmark of the native transport's per-read path (not collected by pytest).

``python -m tests.transports.bench_hotpath [FILE.py ...]``: feeds 100,000 typical llama-server
reads (one whole HTTP chunk holding one ~350-byte SSE event) to ``_Connection`` and prints
the cost per read in ns, for ``data_received(bytes)`` and for ``buffer_updated`` (the copy
out of the shared read buffer included). The body list is taken after every read, like ``read()``
(which also zeroes ``buffered``). With file arguments, each is loaded as a copy of
``native.py`` (say, the version before a change) and measured in turn with the current one,
interleaved, so both see the same machine. Times are the thread's CPU time (a shared,
busy machine preempts us: wall time would count the other processes); ``ROUNDS=n`` sets the
number of interleaved rounds (9).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import statistics
import sys
import time
from typing import Any

from llamaclient._transports import native

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


def _conn(module: Any, view: memoryview) -> Any:
    kind = getattr(module, "_BufferedConnection", module._Connection)
    conn = kind(asyncio.get_running_loop(), ("http", "h", 80), view)
    conn.connection_made(_Sink())
    conn.begin(b"GET / HTTP/1.1\r\n\r\n", head_only=False, keep_alive=True)
    conn.data_received(HEAD)
    return conn


def _body(conn: Any) -> list[bytes]:
    body: list[bytes] = conn.body if hasattr(conn, "body") else conn.parser.body
    return body


def _run_data_received(module: Any) -> float:
    conn = _conn(module, memoryview(bytearray(16)))
    feed = conn.data_received
    body = _body(conn)
    data = READ
    t0 = time.thread_time_ns()
    for _ in range(N):
        feed(data)
        body.clear()
        conn.buffered = 0
    return (time.thread_time_ns() - t0) / N


def _run_buffer_updated(module: Any) -> float:
    view = memoryview(bytearray(256 * 1024))
    view[: len(READ)] = READ
    conn = _conn(module, view)
    updated = conn.buffer_updated
    body = _body(conn)
    n = len(READ)
    t0 = time.thread_time_ns()
    for _ in range(N):
        updated(n)
        body.clear()
        conn.buffered = 0
    return (time.thread_time_ns() - t0) / N


def _load(path: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"native_{abs(hash(path))}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "llamaclient._transports"  # its relative imports resolve as ours
    spec.loader.exec_module(module)
    return module


async def main() -> None:
    assert len(EVENT) > 300, len(EVENT)
    modules: list[tuple[str, Any]] = [("current", native)]
    modules += [(path, _load(path)) for path in sys.argv[1:]]
    for name, run in (
        ("data_received", _run_data_received),
        ("buffer_updated", _run_buffer_updated),
    ):
        times: dict[str, list[float]] = {label: [] for label, _ in modules}
        for _ in range(int(os.environ.get("ROUNDS", "9"))):
            for label, module in modules:
                times[label].append(run(module))
        for label, _ in modules:
            t = times[label]
            print(
                f"{name:15s} {label:30.30s} min {min(t):6.1f} ns/read"
                f"  median {statistics.median(t):6.1f}"
            )


if __name__ == "__main__":
    asyncio.run(main())
