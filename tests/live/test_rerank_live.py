"""Reranking on real llama-servers started with ``--reranking``: the scripted model (no
classification head: every score is 0, so the order is the documents' own) and Gemma 3
270M (not a reranker, but its scores are real numbers: the order is by them, most
relevant first). ``top_n`` keeps that many, the indexes are the documents', and a traced
call's input tokens are the server's own count."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from devtools.llama_server import LlamaServer
from llamaclient import Client
from llamaclient._embedded import gemma_path
from llamaclient.otel import instrument
from tests.live.chat import live_config

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

QUERY = "What is the capital of France?"
DOCS = ["Paris is the capital of France.", "Bananas are yellow.", "Madrid is in Spain."]


@pytest.fixture(params=["scripted", "gemma"])
def reranker(
    request: pytest.FixtureRequest,
    llama_server_binary: Path,
    scripted_model_path: Path,
    tmp_path: Path,
) -> Iterator[tuple[str, LlamaServer]]:
    model = scripted_model_path if request.param == "scripted" else gemma_path()
    log = tmp_path / "reranker.log"
    flags = ("-np", "1", "-c", "2048", "--reranking")
    with LlamaServer(model, *flags, log_path=log, binary=llama_server_binary) as server:
        yield request.param, server


async def test_documents_come_back_by_score_with_their_indexes(
    reranker: tuple[str, LlamaServer],
) -> None:
    name, server = reranker
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    async with Client(live_config(server.base_url)) as client:
        ranked = await client.rerank(QUERY, DOCS)
        instrument(client, tracer_provider=provider)
        top = await client.rerank(QUERY, DOCS, top_n=2)
    assert sorted(r.index for r in ranked) == [0, 1, 2]
    assert all(r.document == DOCS[r.index] for r in ranked)
    scores = [r.score for r in ranked]
    assert scores == sorted(scores, reverse=True)
    if name == "scripted":
        assert scores == [0.0, 0.0, 0.0]
        assert [r.index for r in ranked] == [0, 1, 2]  # ties: the documents' order
    else:
        assert len(set(scores)) == 3  # real, distinct scores
    assert [r.index for r in top] == [r.index for r in ranked[:2]]
    [span] = spans.get_finished_spans()
    attrs = dict(span.attributes or {})
    assert (span.name, attrs["gen_ai.operation.name"]) == ("rerank", "rerank")
    tokens = attrs["gen_ai.usage.input_tokens"]
    assert isinstance(tokens, int)
    assert tokens > len(DOCS)
