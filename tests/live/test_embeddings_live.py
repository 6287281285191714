"""Embeddings on real llama-servers: the scripted model and Gemma 3 270M (decoders: both
with ``--embeddings --pooling mean``, their GGUFs name no pooling). The same text gives the
same vector in one batch or another, in any order; ``normalize`` gives length 1; a server
without ``--embeddings`` refuses, typed."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from devtools.llama_server import LlamaServer
from llamaclient import Client, HTTPStatusError
from llamaclient._embedded import gemma_path
from llamaclient.otel import instrument
from tests.live.chat import live_config

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

TEXTS = ["the sea is cold", "a cat sat on a mat", "the sea is cold", "tick tock"]


@pytest.fixture(params=["scripted", "gemma"])
def embedder(
    request: pytest.FixtureRequest,
    llama_server_binary: Path,
    scripted_model_path: Path,
    tmp_path: Path,
) -> Iterator[LlamaServer]:
    model = scripted_model_path if request.param == "scripted" else gemma_path()
    flags = ("--embeddings", "--pooling", "mean", "-c", "2048")
    log = tmp_path / "embedder.log"
    with LlamaServer(model, "-np", "1", *flags, log_path=log, binary=llama_server_binary) as s:
        yield s


async def test_vectors_are_the_same_whatever_the_batch(embedder: LlamaServer) -> None:
    async with Client(live_config(embedder.base_url)) as client:
        together = await client.embed(TEXTS)
        apart = await client.embed(TEXTS, batch=1)
        reversed_ = await client.embed(list(reversed(TEXTS)))
        unit = await client.embed(TEXTS, normalize=True)
    size = len(together[0])
    assert size > 1
    assert all(len(v) == size for v in together)
    assert together[2] == pytest.approx(together[0], rel=1e-3, abs=1e-4)  # the same text
    for a, b in zip(together, apart, strict=True):
        assert b == pytest.approx(a, rel=1e-3, abs=1e-4)
    assert reversed_[::-1][1] == pytest.approx(together[1], rel=1e-3, abs=1e-4)
    assert all(math.isclose(math.hypot(*v), 1.0, rel_tol=1e-6) for v in unit)
    assert together[0] != together[1]


async def test_a_server_without_embeddings_refuses(base_url: str) -> None:
    async with Client(live_config(base_url)) as client:
        with pytest.raises(HTTPStatusError) as info:
            await client.embed("x")
    assert info.value.status in (400, 501)


async def test_a_traced_embed_reports_the_servers_token_count(embedder: LlamaServer) -> None:
    """The span's input tokens are the server's own count of the texts (``usage``), the
    same as ``tokenize`` gives them one by one."""
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    async with Client(live_config(embedder.base_url)) as client:
        instrument(client, tracer_provider=provider)
        vectors = await client.embed(TEXTS, batch=3)
        counts = [len(await client.tokenize(t, add_special=True)) for t in TEXTS]
    [span] = spans.get_finished_spans()
    attrs = dict(span.attributes or {})
    assert attrs["gen_ai.embeddings.dimension.count"] == len(vectors[0])
    assert attrs["gen_ai.usage.input_tokens"] == sum(counts)
