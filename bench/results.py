"""Where the measurements go: one list of samples per (scenario, metric, contender)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

__all__ = ["Metric", "Results"]


@dataclass(frozen=True)
class Metric:
    """A row group of the table. ``ratios``: show ratios to the floors and the OpenAI SDK."""

    scenario: str
    name: str
    ratios: bool = True
    digits: int = 1


@dataclass
class Results:
    samples: dict[Metric, dict[str, list[float]]] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)  # contender -> why it did not run
    # (scenario, contender) -> why it did not run in that scenario (n/a rows there only)
    unavailable: dict[tuple[str, str], str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # whole scenario -> why not run
    notes: list[str] = field(default_factory=list)

    def add(self, metric: Metric, contender: str, value: float) -> None:
        self.samples.setdefault(metric, {}).setdefault(contender, []).append(value)

    def get(self, metric: Metric, contender: str) -> list[float]:
        return self.samples.get(metric, {}).get(contender, [])

    def best(self, metric: Metric, contender: str) -> float | None:
        values = self.get(metric, contender)
        return min(values) if values else None

    def median(self, metric: Metric, contender: str) -> float | None:
        values = self.get(metric, contender)
        return statistics.median(values) if values else None

    def find(self, scenario: str, name: str) -> Metric | None:
        for metric in self.samples:
            if metric.scenario == scenario and metric.name == name:
                return metric
        return None
