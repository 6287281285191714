"""OpenTelemetry (llamaclient.otel) against the real SDK and its in-memory exporters: one
span per turn after the GenAI semantic conventions, its phases as events, the GenAI client
metrics, the traceparent on the turn's requests; content only when asked for; never the key.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from llamaclient import (
    AuthenticationError,
    ChatRequest,
    Client,
    Config,
    HTTPStatusError,
    Pool,
    UserMessage,
)
from llamaclient.otel import SEMCONV, instrument
from llamaclient.testing import FakeLlama
from tests.conftest import CHAT, ClientFactory, drain, user
from tests.support.docblocks import ROOT
from tests.support.faultserver import (
    DEFAULT_MODEL,
    FaultServer,
    Json,
    chat_chunks,
    error_body,
    stream,
)
from tests.support.resumable import STREAM, Sessions

pytestmark = pytest.mark.anyio

KEY = "sk-never-in-a-span-777"
PROMPT = "my password is hunter2"
ANSWER = ["Walrus", " says", " hi"]


class Telemetry:
    """An SDK tracer and meter provider with in-memory exporters."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def watch(self, target: Client | Pool, capture: bool | None = None) -> None:
        instrument(
            target,
            tracer_provider=self.tracer_provider,
            meter_provider=self.meter_provider,
            capture_content=capture,
        )

    def span(self) -> ReadableSpan:
        [span] = self.spans.get_finished_spans()
        return span

    def metrics(self) -> dict[str, list[Any]]:
        data = self.reader.get_metrics_data()
        out: dict[str, list[Any]] = {}
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    out[metric.name] = list(metric.data.data_points)
        return out


@pytest.fixture
def otel() -> Iterator[Telemetry]:
    telemetry = Telemetry()
    yield telemetry
    telemetry.tracer_provider.shutdown()
    telemetry.meter_provider.shutdown()


def everything(span: ReadableSpan) -> str:
    """All a span holds, as text (to look for what must not be there)."""
    events = [(e.name, dict(e.attributes or {})) for e in span.events]
    return json.dumps(
        [dict(span.attributes or {}), events, span.status.description, span.name], default=str
    )


async def test_a_turn_is_one_client_span_after_the_genai_conventions(
    server: FaultServer, make_client: ClientFactory, otel: Telemetry
) -> None:
    server.route("POST", CHAT, stream(chat_chunks(ANSWER)))
    client = make_client(api_key=KEY, model="scripted", temperature=0.2, top_p=0.9)
    otel.watch(client)
    await client.chat(user(PROMPT, max_tokens=32, seed=7, session="s-1")).collect()
    span = otel.span()
    assert span.name == "chat scripted"
    assert span.kind is SpanKind.CLIENT
    attrs = dict(span.attributes or {})
    host, port = server.url.removeprefix("http://").split(":")
    assert {k: attrs[k] for k in REQUEST_KEYS} == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "llama.cpp",
        "gen_ai.request.model": "scripted",
        "gen_ai.request.max_tokens": 32,
        "gen_ai.request.temperature": 0.2,
        "gen_ai.request.top_p": 0.9,
        "gen_ai.request.seed": 7,
        "gen_ai.request.stream": True,
        "server.address": host,
        "server.port": int(port),
        "gen_ai.conversation.id": "s-1",
    }
    assert attrs["gen_ai.response.model"] == DEFAULT_MODEL
    assert attrs["gen_ai.response.finish_reasons"] == ("stop",)
    assert attrs["gen_ai.response.id"]
    assert (attrs["gen_ai.usage.input_tokens"], attrs["gen_ai.usage.output_tokens"]) == (20, 3)
    assert attrs["gen_ai.usage.cache_read.input_tokens"] == 0
    assert 0 < attrs["gen_ai.response.time_to_first_chunk"] < 5  # type: ignore[operator]
    assert "first_token" in [e.name for e in span.events]
    assert span.status.status_code is StatusCode.UNSET
    assert "error.type" not in attrs
    # The trace goes on at the server: the chat carried this span's traceparent.
    [chat] = [r for r in server.requests if r.path == CHAT]
    trace_id = f"{span.context.trace_id:032x}"
    assert chat.headers["traceparent"].split("-")[1] == trace_id
    assert KEY not in everything(span)
    assert "hunter2" not in everything(span)
    assert "Walrus" not in everything(span)
    assert SEMCONV == "1.41.0"


REQUEST_KEYS = (
    "gen_ai.operation.name",
    "gen_ai.provider.name",
    "gen_ai.request.model",
    "gen_ai.request.max_tokens",
    "gen_ai.request.temperature",
    "gen_ai.request.top_p",
    "gen_ai.request.seed",
    "gen_ai.request.stream",
    "server.address",
    "server.port",
    "gen_ai.conversation.id",
)


async def test_the_genai_client_metrics(
    server: FaultServer, make_client: ClientFactory, otel: Telemetry
) -> None:
    server.route("POST", CHAT, stream(chat_chunks(ANSWER)))
    client = make_client(model="scripted")
    otel.watch(client)
    await client.chat(user()).collect()
    found = otel.metrics()
    [duration] = found["gen_ai.client.operation.duration"]
    assert duration.count == 1
    assert dict(duration.attributes)["gen_ai.provider.name"] == "llama.cpp"
    assert list(duration.explicit_bounds)[:3] == [0.01, 0.02, 0.04]  # the conventions' advice
    tokens = found["gen_ai.client.token.usage"]
    usage = {dict(p.attributes)["gen_ai.token.type"]: p.sum for p in tokens}
    assert usage == {"input": 20, "output": 3}
    [first] = found["gen_ai.client.operation.time_to_first_chunk"]
    assert first.count == 1
    [chunks] = found["gen_ai.client.operation.time_per_output_chunk"]
    assert chunks.count == 2  # every output chunk after the first
    phases = {dict(p.attributes)["llamaclient.phase"] for p in found["llamaclient.phase.duration"]}
    assert phases == {"prefill", "decode"}


async def test_a_resumed_turn_is_still_one_span_with_its_resume(
    server: FaultServer, make_client: ClientFactory, otel: Telemetry
) -> None:
    events = chat_chunks(ANSWER)
    cut = len(events[0]) + len(events[1])
    Sessions(server, events, cuts=[(cut, "close")])
    client = make_client()
    otel.watch(client)
    await client.chat(user()).collect()
    span = otel.span()
    [resume] = [e for e in span.events if e.name == "resume"]
    assert dict(resume.attributes or {})["offset"] == cut
    trace_id = f"{span.context.trace_id:032x}"
    [get] = [r for r in server.requests if r.path == STREAM]
    assert get.headers["traceparent"].split("-")[1] == trace_id
    assert span.status.status_code is StatusCode.UNSET


async def test_a_cancelled_turn_ends_its_span_without_an_error(
    server: FaultServer, make_client: ClientFactory, otel: Telemetry
) -> None:
    server.route("POST", CHAT, stream(chat_chunks(ANSWER), end=False))
    client = make_client()
    otel.watch(client)
    async with client.chat(user()) as chat:
        async for _ in chat:
            break
    span = otel.span()
    attrs = dict(span.attributes or {})
    assert attrs["llamaclient.stopped"] is True
    assert "error.type" not in attrs
    assert span.status.status_code is StatusCode.UNSET


async def test_a_4xx_is_an_error_span_without_the_key(
    server: FaultServer, make_client: ClientFactory, otel: Telemetry
) -> None:
    server.route("POST", CHAT, [Json(401, error_body(401, f"Invalid API Key {KEY}"))])
    client = make_client(api_key=KEY)
    otel.watch(client)
    _, error = await drain(client.chat(user(PROMPT)))
    assert isinstance(error, AuthenticationError)
    span = otel.span()
    assert dict(span.attributes or {})["error.type"] == "AuthenticationError"
    assert span.status.status_code is StatusCode.ERROR
    assert KEY not in everything(span)
    [duration] = otel.metrics()["gen_ai.client.operation.duration"]
    assert dict(duration.attributes)["error.type"] == "AuthenticationError"


async def test_content_is_recorded_only_when_asked(
    server: FaultServer, make_client: ClientFactory, otel: Telemetry
) -> None:
    server.route("POST", CHAT, stream(chat_chunks(ANSWER)))
    client = make_client(api_key=KEY)
    otel.watch(client, capture=True)
    await client.chat(user(PROMPT)).collect()
    attrs = dict(otel.span().attributes or {})
    assert json.loads(str(attrs["gen_ai.input.messages"])) == [
        {"role": "user", "content": PROMPT}
    ]
    assert "Walrus says hi" in str(attrs["gen_ai.output.messages"])
    assert KEY not in everything(otel.span())


async def test_a_pooled_turn_with_failover_is_one_span_with_both_routes(otel: Telemetry) -> None:
    fakes = [FakeLlama().reply("ok"), FakeLlama().reply("ok")]
    fakes[0].down = True
    configs = [Config(f"http://s{i}", retry_backoff=0.001, retry_max_backoff=0.002) for i in (0, 1)]
    async with Pool(configs, transports=[f.transport() for f in fakes]) as pool:
        otel.watch(pool)
        request = ChatRequest([UserMessage("hi")], session="a")
        await pool.complete(request)
    span = otel.span()
    routes = [dict(e.attributes or {}) for e in span.events if e.name == "routed"]
    assert routes[-1]["server"] == "http://s1"
    assert span.status.status_code is StatusCode.UNSET


async def test_an_embed_call_is_one_span_with_its_tokens_and_dimension(otel: Telemetry) -> None:
    fake = FakeLlama(embeddings=True)
    config = Config(fake.url, model="nomic", api_key=KEY)
    async with Client(config, transport=fake.transport()) as client:
        otel.watch(client)
        vectors = await client.embed(["a b c", "de"], batch=1)
    assert len(vectors) == 2
    span = otel.span()
    assert (span.name, span.kind) == ("embeddings nomic", SpanKind.CLIENT)
    attrs = dict(span.attributes or {})
    assert attrs["gen_ai.operation.name"] == "embeddings"
    assert attrs["gen_ai.request.model"] == "nomic"
    assert attrs["gen_ai.usage.input_tokens"] == 7  # both batches: the fake counts characters
    assert attrs["gen_ai.embeddings.dimension.count"] == 3
    assert attrs["llamaclient.embeddings.inputs"] == 2
    assert span.status.status_code is StatusCode.UNSET
    durations = otel.metrics()["gen_ai.client.operation.duration"]
    assert [dict(d.attributes)["gen_ai.operation.name"] for d in durations] == ["embeddings"]
    assert KEY not in everything(span)


async def test_a_failed_embed_call_is_an_error_span(otel: Telemetry) -> None:
    fake = FakeLlama(embeddings=False)
    async with Client(Config(fake.url), transport=fake.transport()) as client:
        otel.watch(client)
        with pytest.raises(HTTPStatusError):
            await client.embed("x")
    span = otel.span()
    assert span.name == "embeddings"
    assert dict(span.attributes or {})["error.type"] == "HTTPStatusError"
    assert span.status.status_code is StatusCode.ERROR


PROGRAM = """
import asyncio, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from llamaclient import ChatRequest, Client, Config, UserMessage
from llamaclient.testing import FakeLlama

async def main():
    fake = FakeLlama(embeddings=True).reply("one").reply("two")
    async with Client(Config(fake.url), transport=fake.transport()) as client:
        await client.complete(ChatRequest([UserMessage("hi")]))  # no provider yet: no span
        await client.embed("no span either")
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        await client.complete(ChatRequest([UserMessage("hi")]))
        await client.embed("a text")
    print([s.name for s in exporter.get_finished_spans()])

asyncio.run(main())
"""


def test_the_global_provider_traces_every_client_without_a_call() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['chat', 'embeddings']"


def test_without_opentelemetry_imported_nothing_is_imported_or_watched() -> None:
    code = (
        "import sys, asyncio\n"
        "from llamaclient import ChatRequest, Client, Config, UserMessage\n"
        "from llamaclient.testing import FakeLlama\n"
        "async def main():\n"
        "    fake = FakeLlama().reply('x')\n"
        "    async with Client(Config(fake.url), transport=fake.transport()) as client:\n"
        "        chat = client.chat(ChatRequest([UserMessage('hi')]))\n"
        "        assert chat._io.observer is None\n"
        "        await chat.collect()\n"
        "asyncio.run(main())\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
