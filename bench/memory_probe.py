"""Memory per open stream, measured in a fresh process per contender.

``python -m bench.memory_probe CONTENDER URL STREAMS`` opens STREAMS streams that the fake
server holds open (``mode=hold``), reads the first event of each, and prints JSON: the RSS
growth and the ``tracemalloc`` growth per open stream, in KiB. A few streams are opened and
closed first so that imports, pools and caches are in place before the baseline.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import tracemalloc
from collections.abc import AsyncGenerator

from bench.chunks import Spec
from bench.contenders import Contender, Unavailable, make

__all__ = ["probe"]

SPEC = Spec(mode="hold", n=10)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def _open(contender: Contender, streams: int) -> list[AsyncGenerator[str, None]]:
    holds = [contender.hold(SPEC) for _ in range(streams)]
    await asyncio.gather(*(anext(h) for h in holds))
    return holds


async def _close(holds: list[AsyncGenerator[str, None]]) -> None:
    for hold in holds:
        await hold.aclose()


async def probe(name: str, url: str, streams: int) -> dict[str, float]:
    async with make(name, url) as contender:
        await _close(await _open(contender, 4))
        gc.collect()
        before = _rss()
        holds = await _open(contender, streams)
        gc.collect()
        rss = (_rss() - before) / streams / 1024
        await _close(holds)
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        holds = await _open(contender, streams)
        gc.collect()
        traced = (tracemalloc.get_traced_memory()[0] - base) / streams / 1024
        await _close(holds)
        tracemalloc.stop()
    return {"rss_kib": rss, "traced_kib": traced}


def main() -> None:
    name, url, streams = sys.argv[1], sys.argv[2], int(sys.argv[3])
    try:
        result: dict[str, object] = dict(asyncio.run(probe(name, url, streams)))
    except Unavailable as exc:
        result = {"error": str(exc)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
