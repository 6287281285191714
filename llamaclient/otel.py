"""OpenTelemetry for llamaclient: the ``otel`` extra (``pip install 'llamaclient[otel]'``).

Nothing to call in the common case: once the application sets a tracer (or meter) provider
(``opentelemetry.trace.set_tracer_provider``), every client's turns are traced: one span per
turn, kind CLIENT, named ``chat {model}``, after the GenAI semantic conventions
(:data:`SEMCONV`), with the phases as span events, the GenAI client metrics, and the W3C
``traceparent`` header on the turn's requests. :func:`instrument` gives one client (or pool)
providers of its own instead. The prompts and the answers are not recorded unless asked
(``capture_content=True``, or ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``);
the API key never is.
"""

from __future__ import annotations

from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider

from . import Client, Pool
from ._driver.spans import CAPTURE_ENV, SEMCONV
from ._driver.telemetry import Telemetry
from ._driver.tracing import trace_turns

__all__ = ["CAPTURE_ENV", "SEMCONV", "Telemetry", "instrument"]


def instrument(
    target: Client | Pool,
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    capture_content: bool | None = None,
) -> Telemetry:
    """Trace ``target``'s turns with these providers (None: the global one) instead of the
    global ones; returns the instrument (``target.instruments`` holds it)."""
    telemetry = Telemetry(tracer_provider, meter_provider, capture_content)
    kept = [i for i in target.instruments if i is not trace_turns]
    target.instruments[:] = [*kept, telemetry]
    return telemetry
