"""Soak: many streams through one client, a share of them hitting a fault of the matrix.

Every stream must end in a ``Completion`` or in exactly the typed ``InferError`` its fault
expects; at the end no file descriptor, task or connection is left over, and the resident
memory after a warm-up stays flat. ``tests/client/test_soak.py`` runs a bounded version in
the normal suite; the long run is ``nox -s soak`` or::

    python -m tests.client.soak --streams 10000 --transport asyncio
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
from collections import Counter
from dataclasses import dataclass, field

import anyio

from llamaclient import Client, InferError
from tests.conftest import CHAT, TransportName, make_config, user
from tests.support.faults import BODY, FAULTS, HEAD, OK, Fault, render
from tests.support.faultserver import FaultServer, Request, Step

__all__ = ["SOAK_FAULTS", "SoakReport", "soak"]

# Every fault that answers within a second and needs no route but the chat's (a loading
# model polls /health, which keeps a pooled connection; the 1 MB cases only add noise).
_SLOW_OR_ROUTED = {"status_503_loading_then_ok", "head_huge_head", "sse_huge_line",
                   "timing_one_byte_drip", "timing_pings_longer_than_the_stall_timeout",
                   "timing_headers_slower_than_the_stall_timeout"}
SOAK_FAULTS: tuple[Fault, ...] = tuple(f for f in FAULTS if f.name not in _SLOW_OR_ROUTED)
SOAK_CONFIG = {"resume": False, "max_retries": 1, "wait_timeout": 0.5, "stall_timeout": 0.5}


def rss_kib() -> int:
    """This process's resident set size (``VmRSS``), KiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


@dataclass
class SoakReport:
    streams: int = 0
    faults: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    wrong: list[str] = field(default_factory=list)
    fds: tuple[int, int] = (0, 0)
    tasks: tuple[int, int] = (0, 0)
    connections_open: int = 0
    connections_accepted: int = 0
    rss_kib: tuple[int, int] = (0, 0)

    @property
    def rss_growth(self) -> float:
        start, end = self.rss_kib
        return (end - start) / start

    def __str__(self) -> str:
        return (
            f"{self.streams} streams, {self.faults} faults ({len(self.outcomes)} outcome kinds:"
            f" {dict(self.outcomes)}), wrong outcomes: {len(self.wrong)}; fds {self.fds[0]}->"
            f"{self.fds[1]}, tasks {self.tasks[0]}->{self.tasks[1]}, connections open at the"
            f" end {self.connections_open} of {self.connections_accepted} accepted; RSS"
            f" {self.rss_kib[0]}->{self.rss_kib[1]} KiB ({self.rss_growth:+.1%})"
        )


class _Plan:
    """Which fault each stream meets (None: a clean stream), served by the chat route."""

    def __init__(self, streams: int, rate: float, seed: int) -> None:
        rng = random.Random(seed)
        faulty = set(rng.sample(range(streams), round(rate * streams)))  # exactly the rate
        self.faults: list[Fault | None] = [
            rng.choice(SOAK_FAULTS) if i in faulty else None for i in range(streams)
        ]
        self.clean = Fault("clean", [[HEAD + BODY]], OK)
        self.attempts = [0] * streams

    def script(self, request: Request) -> list[Step]:
        text = json.loads(request.body)["messages"][0]["content"]
        i = int(text.split()[1])
        fault = self.faults[i] or self.clean
        attempt = self.attempts[i]
        self.attempts[i] += 1
        return render(fault.scripts[min(attempt, len(fault.scripts) - 1)])


async def _one(client: Client, plan: _Plan, i: int, transport: str, report: SoakReport) -> None:
    fault = plan.faults[i]
    expected = (fault or plan.clean).outcome_on(transport).error
    got: type[BaseException] | None = None
    try:
        await client.complete(user(f"soak {i}"))
    except InferError as exc:
        got = type(exc)
    report.outcomes[got.__name__ if got else "Completion"] += 1
    if got is not expected:
        report.wrong.append(f"stream {i} ({fault.name if fault else 'clean'}): {got} "
                            f"instead of {expected}")


_BATCH = 500


async def _run(client: Client, plan: _Plan, server: FaultServer, transport: str,
               report: SoakReport, first: int, last: int, concurrency: int) -> None:
    """Streams ``first`` to ``last``, ``concurrency`` at a time, in batches after which the
    server's records are dropped (they grow with every request: they are not the client's)."""
    limit = anyio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with limit:
            await _one(client, plan, i, transport, report)

    for start in range(first, last, _BATCH):
        async with anyio.create_task_group() as tg:
            for i in range(start, min(last, start + _BATCH)):
                tg.start_soon(one, i)
        await server.wait_closed_connections(timeout=5.0)
        report.connections_accepted += server.connections_accepted
        server.requests.clear()
        server.disconnects.clear()
        server.connections.clear()  # all closed (a record of each; the next ids restart)


async def soak(
    transport: TransportName,
    streams: int = 300,
    rate: float = 0.2,
    *,
    seed: int = 20261201,
    warmup: int = 100,
    concurrency: int = 8,
) -> SoakReport:
    """``warmup`` streams, then the figures, then ``streams`` more, then the figures again."""
    report = SoakReport()
    plan = _Plan(warmup + streams, rate, seed)
    async with FaultServer(hold_timeout=10.0) as server:
        server.route("POST", CHAT, plan.script)
        async with Client(make_config(server.url, transport, **SOAK_CONFIG)) as client:
            await _run(client, plan, server, transport, report, 0, warmup, concurrency)
            before = _figures()
            report.outcomes.clear()
            report.wrong.clear()
            report.connections_accepted = 0
            await _run(client, plan, server, transport, report, warmup, warmup + streams,
                       concurrency)
            after = _figures()
            report.connections_open = server.connections_open
    report.streams = streams
    report.faults = sum(1 for f in plan.faults[warmup:] if f is not None)
    report.fds = (before[0], after[0])
    report.tasks = (before[1], after[1])
    report.rss_kib = (before[2], after[2])
    return report


def _figures() -> tuple[int, int, int]:
    gc.collect()
    return fd_count(), len(anyio.get_running_tasks()), rss_kib()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=0.2)
    parser.add_argument("--transport", choices=["asyncio", "httpx"], default="asyncio")
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument("--warmup", type=int, default=500)
    args = parser.parse_args()
    report = anyio.run(
        lambda: soak(args.transport, args.streams, args.rate, warmup=args.warmup),
        backend=args.backend,
    )
    print(f"{args.transport} on {args.backend}: {report}")
    ok = (not report.wrong and report.fds[0] == report.fds[1]
          and report.tasks[0] == report.tasks[1] and report.connections_open == 0
          and report.rss_growth <= 0.05)
    for line in report.wrong[:20]:
        print("  ", line)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
