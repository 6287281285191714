"""OpenTelemetry on a real llama-server, with the real SDK and in-memory exporters: a plain
turn, a turn cut (by a loopback proxy) and resumed, a cancelled turn, a 4xx, and a pooled
turn that fails over from a dead server. Each is one CLIENT span after the GenAI
conventions; the key never appears."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from llamaclient import Client, Content, HTTPStatusError, Pool, UserMessage
from llamaclient.otel import instrument
from tests.live.chat import live_config, script_request
from tests.live.proxy import CutProxy

pytestmark = pytest.mark.anyio

KEY = "sk-live-otel-secret"


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def only(exporter: InMemorySpanExporter) -> ReadableSpan:
    [span] = exporter.get_finished_spans()
    assert span.kind is SpanKind.CLIENT
    assert KEY not in json.dumps([dict(span.attributes or {}), span.status.description])
    return span


async def test_a_plain_turn(
    base_url: str, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    async with Client(live_config(base_url, api_key=KEY)) as client:
        instrument(client, tracer_provider=provider)
        completion = await client.complete(script_request("reasoning_answer", max_tokens=200))
    span = only(exporter)
    attrs = dict(span.attributes or {})
    assert attrs["gen_ai.provider.name"] == "llama.cpp"
    assert attrs["gen_ai.response.id"] == completion.id
    assert attrs["gen_ai.response.finish_reasons"] == ("stop",)
    assert completion.timings is not None
    assert attrs["gen_ai.usage.output_tokens"] == completion.timings.predicted_n
    assert attrs["gen_ai.usage.reasoning.output_tokens"] == completion.reasoning_tokens > 0
    names = [e.name for e in span.events]
    assert "prefill" in names
    assert "first_token" in names
    assert span.status.status_code is StatusCode.UNSET


async def test_a_turn_cut_and_resumed(
    base_url: str, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    with CutProxy(int(base_url.rsplit(":", 1)[1])).running() as proxy:
        proxy.arm(700)  # inside the body
        async with Client(live_config(proxy.url, api_key=KEY)) as client:
            instrument(client, tracer_provider=provider)
            completion = await client.complete(script_request("long_answer", max_tokens=60))
    span = only(exporter)
    [resume] = [e for e in span.events if e.name == "resume"]
    offset = dict(resume.attributes or {})["offset"]
    assert isinstance(offset, int)
    assert offset > 0
    assert dict(span.attributes or {})["gen_ai.response.id"] == completion.id
    assert span.status.status_code is StatusCode.UNSET


async def test_a_cancelled_turn(
    base_url: str, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    async with Client(live_config(base_url, api_key=KEY)) as client:
        instrument(client, tracer_provider=provider)
        async with client.chat(script_request("long_answer", max_tokens=2000)) as chat:
            async for event in chat:
                if isinstance(event, Content):
                    break
    span = only(exporter)
    assert dict(span.attributes or {})["llamaclient.stopped"] is True
    assert span.status.status_code is StatusCode.UNSET


async def test_a_4xx(base_url: str, spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    # A prompt longer than the slot's context: 400 exceed_context_size_error.
    request = script_request("reasoning_answer", [UserMessage("x" * 9000)])
    async with Client(live_config(base_url, api_key=KEY)) as client:
        instrument(client, tracer_provider=provider)
        with pytest.raises(HTTPStatusError):
            await client.complete(request)
    span = only(exporter)
    assert dict(span.attributes or {})["error.type"] == "ContextOverflowError"
    assert span.status.status_code is StatusCode.ERROR


async def test_a_pooled_turn_with_failover(
    base_url: str, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    dead = "http://127.0.0.1:9"  # discard: nothing listens
    configs = [live_config(dead, api_key=KEY), live_config(base_url, api_key=KEY)]
    async with Pool(configs) as pool:
        instrument(pool, tracer_provider=provider)
        completion = await pool.complete(script_request("reasoning_answer", max_tokens=200))
    span = only(exporter)
    routes = [dict(e.attributes or {}) for e in span.events if e.name == "routed"]
    assert routes[-1]["server"] == base_url
    assert dict(span.attributes or {})["gen_ai.response.id"] == completion.id
