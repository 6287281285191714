"""Tracing every client's turns with OpenTelemetry, once the application uses it.

A client's default instruments include :func:`trace_turns`. Until something has imported
``opentelemetry.trace`` (an application that traces does, to set its tracer provider), it
returns None at the cost of one dictionary look-up: no import, no observer. After that, it
asks :class:`~llamaclient._driver.telemetry.Telemetry` (which needs the ``otel`` extra), and that
watches a turn only once a real tracer or meter provider is set.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .._turn.plan import Plan, Target
from .observe import Observer

if TYPE_CHECKING:
    from .._types.config import Config
    from .embedspan import EmbeddingsSpan
    from .telemetry import Telemetry

__all__ = ["embeddings_span", "trace_turns"]

_GLOBAL: list[Telemetry] = []  # the one that follows the global providers, once made


def trace_turns(plan: Plan, target: Target) -> Observer | None:
    """The turn's span, from the global OpenTelemetry providers (None: none is set)."""
    if "opentelemetry.trace" not in sys.modules:
        return None
    return _global()(plan, target)


def embeddings_span(
    instruments: Sequence[object], config: Config, inputs: int, operation: str = "embeddings"
) -> EmbeddingsSpan | None:
    """The span of an ``embed`` (or ``rerank``: ``operation``) call, from the client's
    instrument (``otel.instrument``) or the global providers; None when nothing traces."""
    if "opentelemetry.trace" not in sys.modules:
        return None  # no Telemetry without it: it imports opentelemetry
    from .telemetry import Telemetry

    for instrument in instruments:
        telemetry = _global() if instrument is trace_turns else instrument
        if isinstance(telemetry, Telemetry):
            span = telemetry.embeddings(config, inputs, operation)
            if span is not None:
                return span
    return None


def _global() -> Telemetry:
    """The one that follows the global providers (made the first time)."""
    if not _GLOBAL:
        from .telemetry import Telemetry

        _GLOBAL.append(Telemetry())
    return _GLOBAL[0]
