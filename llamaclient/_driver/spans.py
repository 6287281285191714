"""OpenTelemetry for a turn: one span, kind CLIENT, named ``chat {model}``, after the GenAI
semantic conventions (``SEMCONV``), its phases as span events, and the GenAI client metrics
(needs the ``otel`` extra; imported only when ``opentelemetry`` is: ``tracing.py``).

Span events, not child spans, for the phases: the conventions make the inference span the
unit a GenAI backend reads, and a wait for a slot or a model is part of that operation, not
one of its own; an event costs one object where a span costs a context switch, a start and
an end, and its timestamp still makes a wait read as an interval.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import metrics, propagate, trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from .._turn.commands import Admit, Command, Line
from .._turn.machine import ChatTurn
from .._turn.plan import Plan, Target
from .._types.completion import Completion
from .._types.events import (
    CacheMiss,
    ChatEvent,
    Content,
    ModelLoading,
    Progress,
    Proxied,
    Queued,
    Reasoning,
    Resuming,
    Retrying,
    Routed,
    ThinkingCapped,
    ToolCallDelta,
    Waiting,
)
from .._types.openai import to_openai
from .observe import Observer, Outcome

__all__ = ["CAPTURE_ENV", "SCHEMA", "SCOPE", "SEMCONV", "Instruments", "TurnSpan"]

SEMCONV = "1.41.0"  # the GenAI semantic conventions these names follow
CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
PROVIDER = "llama.cpp"
SCOPE = "llamaclient"
SCHEMA = f"https://opentelemetry.io/schemas/{SEMCONV}"

# The conventions' bucket advice: seconds, and tokens.
_SECONDS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
_CHUNK_SECONDS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5]
_TOKENS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216]
_OUTPUT = (Content, Reasoning, ToolCallDelta)
_PREFILL_EVENTS = 16  # a long prefill on a small batch size sends hundreds of Progress


class Instruments:
    """The metric instruments of one meter provider."""

    def __init__(self, provider: MeterProvider | None) -> None:
        meter = metrics.get_meter(SCOPE, schema_url=SCHEMA, meter_provider=provider)
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration", "s", "GenAI operation duration",
            explicit_bucket_boundaries_advisory=_SECONDS,
        )  # fmt: skip
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage", "{token}", "Number of input and output tokens used",
            explicit_bucket_boundaries_advisory=_TOKENS,
        )  # fmt: skip
        self.first_chunk = meter.create_histogram(
            "gen_ai.client.operation.time_to_first_chunk", "s", "Time to the first chunk",
            explicit_bucket_boundaries_advisory=_SECONDS,
        )  # fmt: skip
        self.per_chunk = meter.create_histogram(
            "gen_ai.client.operation.time_per_output_chunk", "s", "Time per output chunk",
            explicit_bucket_boundaries_advisory=_CHUNK_SECONDS,
        )  # fmt: skip
        self.phase = meter.create_histogram(
            "llamaclient.phase.duration", "s",
            "Time a turn spent in a phase: queued, waiting, loading, prefill, decode",
            explicit_bucket_boundaries_advisory=_SECONDS,
        )  # fmt: skip


def _request_attributes(plan: Plan, target: Target) -> dict[str, Any]:
    config, request = target.config, plan.request
    url = urlsplit(config.base_url)
    model = request.model or config.model
    values: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": PROVIDER,
        "gen_ai.request.stream": True,
        "server.address": url.hostname or "",
        "server.port": url.port or (443 if url.scheme == "https" else 80),
        "gen_ai.request.model": model or None,
        "gen_ai.request.max_tokens": _first(request.max_tokens, config.max_tokens),
        "gen_ai.request.temperature": _first(request.temperature, config.temperature),
        "gen_ai.request.top_p": _first(request.top_p, config.top_p),
        "gen_ai.request.seed": request.seed,
        "gen_ai.conversation.id": request.session or plan.conversation_id,
        "llama_cpp.slot": request.slot,
    }
    return _dropped(values)


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


class TurnSpan(Observer):
    """One turn's span and metrics (see the module's text)."""

    def __init__(
        self,
        tracer: Tracer,
        instruments: Instruments | None,
        plan: Plan,
        target: Target,
        capture: bool,
    ) -> None:
        attributes = _request_attributes(plan, target)
        self._model = attributes.get("gen_ai.request.model", "")
        self._span: Span = tracer.start_span(
            f"chat {self._model}".rstrip(), kind=SpanKind.CLIENT, attributes=attributes
        )
        self._metrics = instruments
        self._capture = capture
        self._messages = plan.request.messages if capture else ()
        self._base = {k: attributes[k] for k in _METRIC_KEYS if k in attributes}
        self._start = time.monotonic()
        self._first: float | None = None
        self._last: float | None = None  # the previous output chunk (time per chunk)
        self._waited: float | None = None  # a wait (slot line, limit, model) began
        self._prefills = 0

    # -- what the driver tells ------------------------------------------------------------------
    def headers(self) -> Mapping[str, str]:
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(self._span))
        return carrier

    def performed(self, command: Command, outcome: Outcome) -> None:
        if self._waited is None and isinstance(command, Line | Admit):
            self._waited = time.monotonic()  # in this client's slot line, or the limit's

    def events(self, events: Sequence[ChatEvent]) -> None:
        now = time.monotonic()
        for event in events:
            kind = type(event)
            if kind in _POINTS:
                name, attributes = _POINTS[kind]
                self._span.add_event(name, attributes(event))
                if kind in _WAITS and self._waited is None:
                    self._waited = now
                elif kind is Routed and event.slot is not None:  # type: ignore[union-attr]
                    self._span.set_attribute("llama_cpp.slot", event.slot)  # type: ignore[union-attr]
            elif kind is Progress:
                self._progress(event, now)  # type: ignore[arg-type]
            elif kind in _OUTPUT:
                self._output(now)
                return  # a batch with output is one chunk

    def _started(self, now: float) -> None:
        """The server started on the prompt: a wait before it (the slot line, the limit,
        a busy slot, a loading model) is over."""
        if self._waited is not None:
            self._phase("waiting", now - self._waited)
            self._waited = None

    def _progress(self, event: Progress, now: float) -> None:
        self._started(now)
        if self._prefills < _PREFILL_EVENTS:
            self._prefills += 1
            attributes = {"total": event.total, "cache": event.cache, "processed": event.processed}
            self._span.add_event("prefill", attributes)

    def _output(self, now: float) -> None:
        instruments = self._metrics
        if self._first is None:
            self._first = now
            self._started(now)
            self._span.add_event("first_token")
            if instruments is not None:
                instruments.first_chunk.record(now - self._start, self._base)
        elif instruments is not None and self._last is not None:
            instruments.per_chunk.record(now - self._last, self._base)
        self._last = now

    def _phase(self, name: str, seconds: float) -> None:
        if self._metrics is not None:
            self._metrics.phase.record(seconds, {**self._base, "llamaclient.phase": name})

    def ended(self, turn: ChatTurn, stopped: bool) -> None:
        span, error = self._span, turn.error
        completion = turn.completion or turn.partial()
        attributes = _response_attributes(completion, self._first, self._start)
        span.set_attributes(attributes)
        if self._capture:
            span.set_attributes(_content(self._messages, completion))
        if error is not None:
            span.set_attribute("error.type", type(error).__name__)
            span.set_status(Status(StatusCode.ERROR, f"{error}"))
        elif stopped:
            span.set_attribute("llamaclient.stopped", True)
        self._record(completion, error, attributes)
        span.end()

    def _record(
        self, completion: Completion | None, error: BaseException | None, attrs: Mapping[str, Any]
    ) -> None:
        instruments = self._metrics
        if instruments is None:
            return
        base = dict(self._base)
        if "gen_ai.response.model" in attrs:
            base["gen_ai.response.model"] = attrs["gen_ai.response.model"]
        if error is not None:
            base["error.type"] = type(error).__name__
        instruments.duration.record(time.monotonic() - self._start, base)
        for kind in ("input", "output"):
            count = attrs.get(f"gen_ai.usage.{kind}_tokens")
            if count is not None:
                instruments.tokens.record(count, {**base, "gen_ai.token.type": kind})
        timings = completion.timings if completion is not None else None
        if timings is not None:
            for phase, ms in (("prefill", timings.prompt_ms), ("decode", timings.predicted_ms)):
                if ms is not None:
                    instruments.phase.record(ms / 1000, {**base, "llamaclient.phase": phase})


_METRIC_KEYS = ("gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.request.model",
                "server.address", "server.port")  # fmt: skip


def _response_attributes(
    completion: Completion | None, first: float | None, start: float
) -> dict[str, Any]:
    values: dict[str, Any] = {}
    if first is not None:
        values["gen_ai.response.time_to_first_chunk"] = first - start
    if completion is None:
        return values
    if completion.id:
        values["gen_ai.response.id"] = completion.id
    if completion.model:
        values["gen_ai.response.model"] = completion.model
    if completion.finish_reason is not None:
        values["gen_ai.response.finish_reasons"] = [str(completion.finish_reason)]
    timings, usage = completion.timings, completion.usage
    if timings is not None:
        values["gen_ai.usage.input_tokens"] = timings.prompt_n + timings.cache_n
        values["gen_ai.usage.output_tokens"] = timings.predicted_n
        values["gen_ai.usage.cache_read.input_tokens"] = timings.cache_n
        if timings.draft_acceptance is not None:
            values["llama_cpp.draft_acceptance"] = timings.draft_acceptance
    elif usage.prompt_tokens is not None:
        values["gen_ai.usage.input_tokens"] = usage.prompt_tokens
        values["gen_ai.usage.output_tokens"] = usage.completion_tokens or 0
    if completion.reasoning_tokens:
        values["gen_ai.usage.reasoning.output_tokens"] = completion.reasoning_tokens
    return values


def _content(messages: Sequence[Any], completion: Completion | None) -> dict[str, str]:
    """The opted-in content: the request's messages and the answer, as OpenAI JSON."""
    values = {"gen_ai.input.messages": json.dumps(to_openai(list(messages)))}
    if completion is not None:
        values["gen_ai.output.messages"] = json.dumps(to_openai([completion.message()]))
    return values


_POINTS: dict[type, tuple[str, Any]] = {
    Queued: ("queued", lambda e: {"ahead": e.ahead}),
    Waiting: ("waiting", lambda e: {"slot_busy": e.slot_busy}),
    ModelLoading: ("model_loading", lambda e: {"model": e.model, "status": e.status}),
    Retrying: (
        "retry",
        lambda e: {"attempt": e.attempt, "after_ms": e.after_ms, "error": e.error},
    ),
    Resuming: ("resume", lambda e: {"attempt": e.attempt, "offset": e.offset, "error": e.error}),
    Routed: (
        "routed",
        lambda e: _dropped({"server": e.server, "reason": e.reason, "slot": e.slot}),
    ),
    ThinkingCapped: ("thinking_capped", lambda e: {"tokens": e.tokens}),
    Proxied: ("proxied", lambda e: {"proxy": e.proxy, "lost": list(e.lost)}),
    CacheMiss: (
        "cache_miss",
        lambda e: {"expected": e.expected, "reused": e.reused, "reason": e.reason},
    ),
}
_WAITS = (Queued, Waiting, ModelLoading)


def _dropped(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` without its None ones (an attribute cannot be None)."""
    return {k: v for k, v in values.items() if v is not None}
