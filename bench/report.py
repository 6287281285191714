"""The one table (Markdown), the ratios and the pass/fail lines for the targets."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bench.results import Metric, Results

__all__ = ["TARGETS", "render", "targets"]

OURS = "ours (asyncio)"  # the default transport: the targets are about it
REFERENCES = {  # ratio column -> the contenders it divides by (first one present)
    "vs floor httpx": ("floor httpx", "floor httpx (httpx-sse)"),
    "vs floor asyncio": ("floor asyncio",),
    "vs openai raw": ("openai raw",),
}


def _fmt(value: float | None, digits: int) -> str:
    if value is None:
        return "n/a"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def _ratio(results: Results, metric: Metric, contender: str, refs: tuple[str, ...]) -> str:
    value = results.best(metric, contender)
    for ref in refs:
        base = results.best(metric, ref)
        if base:
            return "" if value is None or ref == contender else f"{value / base:.2f}"
    return ""


def render(results: Results) -> str:
    """The table: per metric, one row per contender, min and median, ratios of the mins."""
    head = ["scenario", "metric", "contender", "min", "median", *REFERENCES]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for metric, per in results.samples.items():
        names = list(per)
        names += [name for name in results.missing if name not in per and _applies(name, metric)]
        names += [
            name
            for (scenario, name) in results.unavailable
            if scenario == metric.scenario and name not in names and _applies(name, metric)
        ]
        for name in names:
            row = [
                metric.scenario,
                metric.name,
                name,
                _fmt(results.best(metric, name), metric.digits),
                _fmt(results.median(metric, name), metric.digits),
            ]
            for refs in REFERENCES.values():
                row.append(_ratio(results, metric, name, refs) if metric.ratios else "")
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def _applies(name: str, metric: Metric) -> bool:
    """Whether a contender that could not run belongs in this metric's rows (as n/a)."""
    if name.endswith("+live"):
        return metric.name.startswith("1 tool call")
    return metric.scenario not in ("sse decoder", "import")


@dataclass(frozen=True)
class Target:
    text: str
    check: Callable[[Results], tuple[float | None, bool]]


def _best(results: Results, scenario: str, prefix: str, contender: str) -> float | None:
    for metric in results.samples:
        if metric.scenario == scenario and metric.name.startswith(prefix):
            return results.best(metric, contender)
    return None


def _median(results: Results, scenario: str, prefix: str, contender: str) -> float | None:
    for metric in results.samples:
        if metric.scenario == scenario and metric.name.startswith(prefix):
            return results.median(metric, contender)
    return None


def _over(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _bulk_vs_httpx(r: Results) -> tuple[float | None, bool]:
    x = _over(_best(r, "bulk", "CPU", OURS), _best(r, "bulk", "CPU", "floor httpx"))
    return x, x is not None and x <= 1.5


def _bulk_vs_openai(r: Results) -> tuple[float | None, bool]:
    x = _over(_best(r, "bulk", "CPU", "openai raw"), _best(r, "bulk", "CPU", OURS))
    return x, x is not None and x >= 10


def _paced_p99(r: Results) -> tuple[float | None, bool]:
    x = _median(r, "paced", "delay p99", OURS)
    return x, x is not None and x <= 5.0


def _paced_cpu(r: Results) -> tuple[float | None, bool]:
    x = _over(_best(r, "paced", "CPU", OURS), _best(r, "paced", "CPU", "floor asyncio"))
    return x, x is not None and x <= 1.15


def _flat(r: Results) -> tuple[float | None, bool]:
    x = None
    for metric in r.samples:
        if metric.scenario == "scaling" and "/" in metric.name:
            x = r.best(metric, OURS)
    return x, x is not None and x <= 1.25


def _arguments_flat(r: Results) -> tuple[float | None, bool]:
    x = None
    for metric in r.samples:
        if metric.scenario == "arguments" and "/" in metric.name:
            x = r.best(metric, "ArgumentStream (lenient)")
    return x, x is not None and x <= 1.25


def _output_flat(r: Results) -> tuple[float | None, bool]:
    x = None
    for metric in r.samples:
        if metric.scenario == "output" and "/" in metric.name:
            x = r.best(metric, "OutputDecoder")
    return x, x is not None and x <= 1.25


def _sim(
    prefix: str, limit: float, scenario: str = "sim"
) -> Callable[[Results], tuple[float | None, bool]]:
    def check(r: Results) -> tuple[float | None, bool]:
        x = _over(_best(r, scenario, prefix, OURS), _best(r, scenario, prefix, "floor asyncio"))
        return x, x is not None and x <= limit

    return check


def _capacity(r: Results) -> tuple[float | None, bool]:
    floor = _best(r, "capacity", "streams", "floor asyncio")
    x = _over(_best(r, "capacity", "streams", OURS), floor)
    return x, x is not None and x >= 0.9


TARGETS = (
    Target("bulk: ours CPU/event ≤ 1.5x floor httpx (ratio)", _bulk_vs_httpx),
    Target("bulk: openai raw CPU/event ≥ 10x ours (ratio)", _bulk_vs_openai),
    Target("paced: ours delay p99 ≤ 5 ms (median of runs, ms)", _paced_p99),
    Target("paced: ours CPU/event ≤ 1.15x floor asyncio (ratio)", _paced_cpu),
    Target("sim: ours CPU/event ≤ 1.10x floor asyncio (ratio)", _sim("CPU µs/event", 1.10)),
    Target("sim: ours CPU/stream ≤ 2x floor asyncio (ratio)", _sim("CPU µs/stream", 2.0)),
    Target(
        "icount: ours instructions/event ≤ 1.10x floor asyncio (ratio)",
        _sim("instructions/event", 1.10, "icount"),
    ),
    Target(
        "icount: ours instructions/stream ≤ 2x floor asyncio (ratio)",
        _sim("instructions/stream", 2.0, "icount"),
    ),
    Target("capacity: ours streams at p99 ≤ 5 ms ≥ 0.9x floor asyncio (ratio)", _capacity),
    Target("scaling: ours per-chunk cost, long / short ≤ 1.25 (ratio)", _flat),
    Target("arguments: per-fragment cost, 100k / 1k fragments ≤ 1.25 (ratio)", _arguments_flat),
    Target("output: per-fragment cost, 100k / 1k fragments ≤ 1.25 (ratio)", _output_flat),
)


def targets(results: Results) -> list[str]:
    """One ``PASS``/``FAIL``/``n/a`` line per target, for ``OURS``."""
    lines = []
    for target in TARGETS:
        value, ok = target.check(results)
        verdict = "n/a " if value is None else ("PASS" if ok else "FAIL")
        lines.append(f"- {verdict} {target.text}: {_fmt(value, 2)}")
    return lines
