"""Reranking on the chat client: ``client.rerank`` gives the documents most relevant first,
each with its index and text, ``top_n`` of them, with a router's model, and a chat's
policies before any output (a refused connection retried, a loading server waited for, a
server without ``--reranking`` its typed error); an answer that does not fit the
documents is a ``ProtocolError``."""

from __future__ import annotations

import anyio
import httpx
import pytest

from llamaclient import (
    ChatRequest,
    Client,
    Config,
    HTTPStatusError,
    ProtocolError,
    RerankResult,
    UserMessage,
    sync,
)
from llamaclient.testing import FakeLlama

pytestmark = pytest.mark.anyio

DOCS = ["Bananas are yellow.", "paris is the capital of france", "The capital of Spain."]


def client(fake: FakeLlama, **config: object) -> Client:
    fields: dict[str, object] = {"retry_backoff": 0.001, "retry_max_backoff": 0.002, **config}
    return Client(Config(fake.url, **fields), transport=fake.transport())  # type: ignore[arg-type]


async def test_the_documents_come_back_most_relevant_first() -> None:
    fake = FakeLlama(reranking=True)
    async with client(fake, model="ranker") as c:
        ranked = await c.rerank("the capital of france", DOCS)
        top = await c.rerank("the capital of france", DOCS, top_n=1)
        none = await c.rerank("anything", [])
    assert ranked == [
        RerankResult(1, 4.0, DOCS[1]),  # the, capital, of, france
        RerankResult(2, 3.0, DOCS[2]),
        RerankResult(0, 0.0, DOCS[0]),
    ]
    assert top == ranked[:1]
    assert none == []
    calls = [call for call in fake.calls if call.path == "/v1/rerank"]
    assert [call.body.get("top_n") for call in calls] == [None, 1]  # no call for no documents
    assert calls[0].body == {"query": "the capital of france", "documents": DOCS, "model": "ranker"}


async def test_a_refused_connection_is_retried_and_a_loading_server_waited_for() -> None:
    fake = FakeLlama(reranking=True)
    fake.down = True
    async with client(fake, max_retries=3, retry_backoff=0.05, retry_max_backoff=0.2) as c:

        async def revive() -> None:
            await anyio.sleep(0.01)
            fake.down = False

        async with anyio.create_task_group() as tg:
            tg.start_soon(revive)
            assert [r.index for r in await c.rerank("a", ["b", "a"])] == [1, 0]
    loading = FakeLlama(reranking=True).fail(loading=0.3)
    async with client(loading) as c:
        assert len(await c.rerank("a", ["a"])) == 1
    assert [c.path for c in loading.calls].count("/v1/rerank") >= 2


async def test_without_reranking_the_servers_refusal_is_its_typed_error() -> None:
    async with client(FakeLlama()) as c:
        with pytest.raises(HTTPStatusError) as info:
            await c.rerank("q", ["d"])
    assert info.value.status == 501


@pytest.mark.parametrize(
    "answer",
    [
        b'{"results": [{"index": 0, "relevance_score": 1.0}, {"index": 0, "relevance_score": 2}]}',
        b'{"results": [{"index": 5, "relevance_score": 1.0}]}',
        b'{"results": "no"}',
        b"<html>",
    ],
)
async def test_an_answer_that_does_not_fit_the_documents_is_a_protocol_error(answer: bytes) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=answer)

    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    async with Client(Config("http://ranker.test", transport="httpx"), http_client=http) as c:
        with pytest.raises(ProtocolError, match="/v1/rerank"):
            await c.rerank("q", ["a", "b"])
    await http.aclose()


async def test_bad_arguments_are_refused() -> None:
    async with client(FakeLlama(reranking=True)) as c:
        with pytest.raises(ValueError, match="top_n"):
            await c.rerank("q", ["a"], top_n=0)
        with pytest.raises(ValueError, match="sequence of texts"):
            await c.rerank("q", "one string")


def test_the_sync_client_reranks_embeds_and_counts() -> None:
    fake = FakeLlama(reranking=True, embeddings=True)
    with sync.Client(Config(fake.url), transport=fake.transport()) as c:
        assert [r.index for r in c.rerank("a b", ["b", "a b", "c"], top_n=2)] == [1, 0]
        assert c.embed("a b") == [[3.0, 1.0, 1.0]]
        assert c.tokenize("hi") == [ord("h"), ord("i")]
        assert c.detokenize([104, 105]) == "hi"
        assert [p.piece for p in c.tokenize("hi", pieces=True)] == ["h", "i"]
        assert c.count_tokens(ChatRequest([UserMessage("hi")])) > 2
