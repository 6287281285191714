"""Microbenchmark of the SSE decoding alone: ``llamaclient._protocol.sse.SSEDecoder`` vs httpx-sse.

httpx-sse is run as ``EventSource.aiter_sse()`` runs it (incremental UTF-8 decode, its line
decoder, its event decoder), minus the async generators. Both get the same llama-server-like
events (~560 bytes each, with ``timings``), cut into reads three ways: one event per read
(paced streaming), 64 KiB reads (bulk) and 1400-byte reads (events split across reads).
"""

from __future__ import annotations

import codecs
import time
from collections.abc import Callable

from httpx_sse._decoders import SSEDecoder as RefDecoder
from httpx_sse._decoders import SSELineDecoder

from bench.chunks import event
from llamaclient._protocol.sse import SSEDecoder

__all__ = ["CASES", "decode_ours", "decode_httpx_sse", "measure"]

_EVENT = event('{"content":" token"}', 17)


def decode_ours(chunks: list[bytes]) -> int:
    decoder = SSEDecoder()
    feed = decoder.feed
    n = 0
    for chunk in chunks:
        n += len(feed(chunk))
    return n + len(decoder.flush())


def decode_httpx_sse(chunks: list[bytes]) -> int:
    text = codecs.getincrementaldecoder("utf-8")(errors="replace")
    lines = SSELineDecoder()
    decoder = RefDecoder()
    n = 0
    for chunk in chunks:
        for line in lines.decode(text.decode(chunk)):
            if decoder.decode(line) is not None:
                n += 1
    return n


def _cut(body: bytes, size: int) -> list[bytes]:
    return [body[i : i + size] for i in range(0, len(body), size)]


CASES: dict[str, Callable[[int], list[bytes]]] = {
    "1 event per read": lambda n: [_EVENT] * n,
    "64 KiB reads": lambda n: _cut(_EVENT * n, 65536),
    "1400 B reads": lambda n: _cut(_EVENT * n, 1400),
}
DECODERS: dict[str, Callable[[list[bytes]], int]] = {
    "ours (SSEDecoder)": decode_ours,
    "floor httpx (httpx-sse)": decode_httpx_sse,
}


def measure(events: int, repeats: int) -> dict[str, dict[str, list[float]]]:
    """CPU µs per event: ``{case: {decoder: [one value per repeat]}}``."""
    out: dict[str, dict[str, list[float]]] = {}
    for case, make in CASES.items():
        chunks = make(events)
        per = out.setdefault(case, {})
        for _ in range(repeats):
            for name, decode in DECODERS.items():
                start = time.process_time()
                count = decode(chunks)
                elapsed = time.process_time() - start
                assert count == events, (name, case, count)
                per.setdefault(name, []).append(elapsed / events * 1e6)
    return out
