"""The sim counted in instructions (``--only icount``): exact where CPU time is not.

On this VM the sim's CPU time moved by 30-60 % between runs on some days (the floor's own
µs per event went from 9.4 to 16.2 in four runs of one afternoon), too much to see a change
of a few percent. ``valgrind --tool=callgrind`` counts the instructions a process runs, the
same number every time for the same code and inputs, whatever else the machine does.

Each count is one fresh process running one contender's streams once, under the sim's fake
transport (``bench/sim.py``); two counts that differ only in the events per stream, or only in
the number of one-event streams, give the instructions per event and per stream, with the
interpreter's start-up, the imports and every one-time cost cancelled out. Both include the
fake server's own work (the sim's driver), the same for every contender, so the ratios are
what the sim's are, measured exactly.

    python -m bench.icount       # ours and the floor: per event, per stream, the ratios
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

__all__ = ["available", "count", "measure"]

ROOT = Path(__file__).resolve().parent.parent
NAMES = ("ours (asyncio)", "floor asyncio", "ours (asyncio) traced")
STREAMS, EVENTS = 16, (20, 120)  # per event: 16 streams of 20, then of 120 events
ONE_EVENT = (16, 80)  # per stream: 16, then 80 one-event streams


def available() -> bool:
    return shutil.which("valgrind") is not None


def count(name: str, streams: int, events: int) -> int:
    """Instructions of a process that runs ``streams`` streams of ``events`` events of the
    contender ``name`` once, through the sim's fake transport."""
    command = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        "-m",
        "bench.icount",
        "--run",
        name,
        str(streams),
        str(events),
    ]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(f"callgrind printed no count: {done.stderr[-500:]}")
    return int(found.group(1))


def measure() -> dict[str, tuple[float, float]]:
    """Instructions per event and per one-event stream, for ours, the floor and ours traced
    by the OpenTelemetry SDK (twelve processes, two at a time)."""
    jobs = [(name, STREAMS, n) for name in NAMES for n in EVENTS]
    jobs += [(name, s, 1) for name in NAMES for s in ONE_EVENT]
    with ThreadPoolExecutor(2) as pool:
        counts = dict(zip(jobs, pool.map(lambda job: count(*job), jobs), strict=True))
    out = {}
    for name in NAMES:
        per_event = (counts[name, STREAMS, EVENTS[1]] - counts[name, STREAMS, EVENTS[0]]) / (
            STREAMS * (EVENTS[1] - EVENTS[0])
        )
        per_stream = (counts[name, ONE_EVENT[1], 1] - counts[name, ONE_EVENT[0], 1]) / (
            ONE_EVENT[1] - ONE_EVENT[0]
        )
        out[name] = (per_event, per_stream)
    return out


async def _run(name: str, streams: int, events: int) -> None:
    from bench import sim
    from bench.chunks import Spec
    from bench.contenders import make

    loop = asyncio.get_running_loop()
    driver = sim._Driver(loop)

    async def create_connection(factory: Any, *args: Any, **kwargs: Any) -> Any:
        protocol = factory()
        transport = sim._FakeTransport(driver, protocol)
        protocol.connection_made(transport)
        return transport, protocol

    loop.create_connection = create_connection  # type: ignore[method-assign, assignment]
    contender = make(name, "http://127.0.0.1:9")
    spec = Spec(mode="paced", n=events, rate=50.0)
    await asyncio.gather(*(contender.run(spec) for _ in range(streams)))
    await contender.aclose()


def main(argv: list[str]) -> None:
    if argv[:1] == ["--run"]:
        asyncio.run(_run(argv[1], int(argv[2]), int(argv[3])))
        return
    measured = measure()
    ours, floor = measured[NAMES[0]], measured[NAMES[1]]
    for name, (event, stream) in measured.items():
        print(f"{name:16} {event:10,.0f} instructions/event {stream:12,.0f} instructions/stream")
    print(f"ratio: {ours[0] / floor[0]:.3f} per event, {ours[1] / floor[1]:.3f} per stream")


if __name__ == "__main__":
    main(sys.argv[1:])
