"""``python -m bench [--quick|--smoke] [--only SCENARIO[,SCENARIO]] [--repeats N] [--output PATH]``.

Runs the scenarios against a fake llama-server (2 worker processes), prints one table and the
pass/fail lines of the targets, and writes them to ``docs/benchmarks.md`` unless ``--only`` or
``--smoke`` is given (or to ``--output`` when given).

Quick check that everything runs (about a minute, numbers meaningless, writes nothing):
``python -m bench --smoke``; one scenario only: ``python -m bench --smoke --only paced1k``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

from bench.fake_server import FakeServer, raise_fd_limit
from bench.report import render, targets
from bench.results import Results
from bench.scenarios import ROOT, SCENARIOS, Settings


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="1 repeat, shorter streams")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="does everything run? 1 repeat, tiny streams, ~1 min; writes no report",
    )
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="SCENARIO",
        help=f"run only these ({', '.join(SCENARIOS)}); repeatable or comma-separated",
    )
    parser.add_argument("--repeats", type=int, help="repeats per measurement (default 3)")
    parser.add_argument("--workers", type=int, default=2, help="fake server processes")
    parser.add_argument("--output", type=Path, help="write the report here")
    args = parser.parse_args(argv)
    args.only = [name for item in args.only for name in item.split(",") if name]
    unknown = [name for name in args.only if name not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(unknown)}")
    return args


async def _run(settings: Settings, names: list[str], workers: int, results: Results) -> None:
    with FakeServer(workers=workers) as server:
        for name in names:
            started = time.perf_counter()
            print(f"# {name} ...", file=sys.stderr, flush=True)
            await SCENARIOS[name](settings, server, results)
            print(f"# {name}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    settings = Settings.smoke() if args.smoke else Settings.quick() if args.quick else Settings()
    if args.repeats:
        settings = replace(settings, repeats=args.repeats)
    names = args.only or list(SCENARIOS)
    results = Results()
    fds = raise_fd_limit()
    if fds < settings.many_streams * 2 + 64:
        results.notes.append(f"open file limit {fds}: too low for the 1,024-stream runs")
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    asyncio.run(_run(settings, names, args.workers, results))
    took = time.perf_counter() - started
    load = os.getloadavg()
    lines = [
        "# Benchmarks",
        "",
        f"`python -m bench{' --quick' if args.quick else ''}{' --smoke' if args.smoke else ''}"
        f"{' --only ' + ','.join(args.only) if args.only else ''}`: "
        f"{len(names)} scenario(s) in {took:.0f} s, {settings.repeats} repeat(s); "
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs ({platform.machine()}), "
        f"load average {load_before:.1f} before, {load[0]:.1f} after; "
        f"fake server: {args.workers} process(es).",
        "",
        "CPU is the client process's `time.process_time()`; ratios divide the mins. "
        "Lower is better everywhere.",
        "",
        render(results),
        "",
        "Targets (ours = `ours (asyncio)`, the default transport for http://):",
        "",
        *targets(results),
    ]
    if settings.repeats > 1 and {"bulk", "paced", "tools", "scaling"} & set(names):
        results.notes.append(
            "openai raw and openai helper run once, not per repeat (except on the short "
            "scaling streams): each of their runs takes 5 s to half a minute."
        )
    if results.missing or results.unavailable or results.skipped:
        lines += ["", "Not run:", ""]
        lines += [f"- {name}: {why}" for name, why in results.skipped.items()]
        lines += [f"- {name}: {why}" for name, why in results.missing.items()]
        lines += [
            f"- {name} in {where}: {why}" for (where, name), why in results.unavailable.items()
        ]
    if results.notes:
        lines += ["", "Notes:", ""] + [f"- {note}" for note in results.notes]
    text = "\n".join(lines) + "\n"
    print(text)
    partial = args.only or args.smoke
    output = args.output or (None if partial else ROOT / "docs" / "benchmarks.md")
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
        print(f"written to {output}", file=sys.stderr)


if __name__ == "__main__":
    main()
