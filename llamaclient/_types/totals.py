"""Usage totals: what a client's (or a pool's) turns asked of the server, per model.

``client.usage`` is a running :class:`UsageTotals`, kept up to date as each turn ends (one
small addition per turn, so it is always on). Totals add up: ``a + b`` (two clients, or two
runs), and so do the per-model :class:`ModelUsage` records.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import msgspec

from .completion import Completion

__all__ = ["ModelUsage", "UsageTotals", "turn_usage"]


class ModelUsage(msgspec.Struct, frozen=True, gc=False):
    """The turns of one model: ``requests`` (every chat turn, finished or not), ``failures``
    (the turns that ended with an error), the prompt tokens (``cached_tokens`` of them
    served from the prompt cache), the tokens generated (``reasoning_tokens`` of them
    thinking), and the server's prefill and decode time, in seconds (from its timings)."""

    requests: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    generated_tokens: int = 0
    reasoning_tokens: int = 0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0

    def __add__(self, other: ModelUsage) -> ModelUsage:
        if not isinstance(other, ModelUsage):
            return NotImplemented
        return ModelUsage(
            self.requests + other.requests,
            self.failures + other.failures,
            self.prompt_tokens + other.prompt_tokens,
            self.cached_tokens + other.cached_tokens,
            self.generated_tokens + other.generated_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
            self.prefill_seconds + other.prefill_seconds,
            self.decode_seconds + other.decode_seconds,
        )


_NONE = ModelUsage()


def turn_usage(completion: Completion | None, failed: bool) -> ModelUsage:
    """One turn's usage: what its Completion (or the partial of its error) says."""
    if completion is None:
        return ModelUsage(1, int(failed))
    timings, usage = completion.timings, completion.usage
    if timings is not None:
        prompt, cached = timings.prompt_n + timings.cache_n, timings.cache_n
        generated = timings.predicted_n
        prefill, decode = (timings.prompt_ms or 0.0) / 1000, (timings.predicted_ms or 0.0) / 1000
    else:
        prompt, cached = usage.prompt_tokens or 0, usage.cached_tokens or 0
        generated = usage.completion_tokens or 0
        prefill = decode = 0.0
    return ModelUsage(
        1, int(failed), prompt, cached, generated, completion.reasoning_tokens, prefill, decode
    )


class UsageTotals(Mapping[str, ModelUsage]):
    """Running totals per model name (the name the server reported, else the one asked
    for; ``""`` when neither is known), read like a dict; :attr:`total` is every model's.
    ``a + b`` is a new total of both."""

    __slots__ = ("_models",)

    def __init__(self, models: Mapping[str, ModelUsage] | None = None) -> None:
        self._models: dict[str, ModelUsage] = dict(models or {})

    def add(self, model: str, usage: ModelUsage) -> None:
        """Count ``usage`` for ``model``."""
        self._models[model] = self._models.get(model, _NONE) + usage

    @property
    def total(self) -> ModelUsage:
        """Every model's turns together."""
        return sum(self._models.values(), _NONE)

    def __getitem__(self, model: str) -> ModelUsage:
        return self._models[model]

    def __iter__(self) -> Iterator[str]:
        return iter(self._models)

    def __len__(self) -> int:
        return len(self._models)

    def __add__(self, other: UsageTotals) -> UsageTotals:
        if not isinstance(other, UsageTotals):
            return NotImplemented
        totals = UsageTotals(self._models)
        for model, usage in other.items():
            totals.add(model, usage)
        return totals

    def __repr__(self) -> str:
        return f"UsageTotals({self._models!r})"
