"""The OpenTelemetry instrument of a client or pool (``llamaclient.otel``): a turn's
:class:`~llamaclient._driver.spans.TurnSpan` from the providers given, or from the global
ones once the application sets them. Imported only when ``opentelemetry`` is (it needs the
``otel`` extra)."""

from __future__ import annotations

import os

from opentelemetry import metrics, trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import Tracer, TracerProvider

from .._turn.plan import Plan, Target
from .._types.config import Config
from .embedspan import EmbeddingsSpan
from .observe import Observer
from .spans import CAPTURE_ENV, SCHEMA, SCOPE, Instruments, TurnSpan

__all__ = ["Telemetry"]


class Telemetry:
    """An instrument (``client.instruments``): a :class:`TurnSpan` for each turn, from the
    given providers or, for None, the global ones (``trace.set_tracer_provider``) once they
    are set; without any, it watches nothing. ``capture_content`` puts the messages and the
    answer on the span (None: as ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``
    says; off by default)."""

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        capture_content: bool | None = None,
    ) -> None:
        self._tracer_provider = tracer_provider
        self._meter_provider = meter_provider
        self._capture = capture_content
        self._tracer: Tracer | None = None
        self._instruments: Instruments | None = None
        self._seen: tuple[object, object] | None = None  # the global providers last seen

    def __call__(self, plan: Plan, target: Target) -> Observer | None:
        if not self._ready():
            return None
        capture = self._capture
        if capture is None:
            capture = os.environ.get(CAPTURE_ENV, "").strip().lower() == "true"
        assert self._tracer is not None
        return TurnSpan(self._tracer, self._instruments, plan, target, capture)

    def embeddings(
        self, config: Config, inputs: int, operation: str = "embeddings"
    ) -> EmbeddingsSpan | None:
        """The span of an ``embed`` call of ``inputs`` texts (``operation`` ``rerank``: a
        ``rerank`` call of ``inputs`` documents); None while no provider is set."""
        if not self._ready():
            return None
        assert self._tracer is not None
        return EmbeddingsSpan(self._tracer, self._instruments, config, inputs, operation)

    def _ready(self) -> bool:
        """A tracer (and instruments) from real providers; False while none is set."""
        tracers = self._tracer_provider or trace.get_tracer_provider()
        meters = self._meter_provider or metrics.get_meter_provider()
        if (tracers, meters) == self._seen:
            return self._tracer is not None
        self._seen = (tracers, meters)
        real_tracer = not isinstance(tracers, trace.ProxyTracerProvider | trace.NoOpTracerProvider)
        real_meter = type(meters).__name__ not in ("_ProxyMeterProvider", "NoOpMeterProvider")
        self._tracer = (
            trace.get_tracer(SCOPE, schema_url=SCHEMA, tracer_provider=tracers)
            if real_tracer or real_meter
            else None
        )
        self._instruments = Instruments(meters) if real_meter else None
        return self._tracer is not None
