"""Embeddings on the chat client: ``client.embed`` in batches and in order, as sent or of
length 1, with a router's model, and a chat's policies before any output (a busy answer
retried, a loading server waited for, a server without ``--embeddings`` its typed error)."""

from __future__ import annotations

import math

import anyio
import pytest

from llamaclient import Client, Config, HTTPStatusError
from llamaclient.testing import FakeLlama

pytestmark = pytest.mark.anyio


def client(fake: FakeLlama, **config: object) -> Client:
    fields: dict[str, object] = {"retry_backoff": 0.001, "retry_max_backoff": 0.002, **config}
    return Client(Config(fake.url, **fields), transport=fake.transport())  # type: ignore[arg-type]


async def test_vectors_come_back_in_order_batch_by_batch() -> None:
    fake = FakeLlama(embeddings=True)
    texts = [f"text {'x ' * i}" for i in range(70)]
    async with client(fake) as c:
        vectors = await c.embed(texts)
        one = await c.embed("a b c")
    assert vectors == [[float(len(t)), float(t.count(" ")), 1.0] for t in texts]
    assert one == [[5.0, 2.0, 1.0]]
    batches = [len(call.body["input"]) for call in fake.calls if call.path == "/v1/embeddings"]
    assert batches == [32, 32, 6, 1]


async def test_normalize_scales_each_vector_to_length_one() -> None:
    fake = FakeLlama(embeddings=True)
    async with client(fake) as c:
        [vector] = await c.embed("a b", normalize=True)
    assert math.isclose(math.hypot(*vector), 1.0)
    assert math.isclose(vector[0] / vector[2], 3.0)


async def test_a_routers_model_goes_in_the_body() -> None:
    fake = FakeLlama(embeddings=True)
    async with client(fake, model="embedder") as c:
        await c.embed(["x"], batch=1)
    [call] = [c for c in fake.calls if c.path == "/v1/embeddings"]
    assert call.body["model"] == "embedder"


async def test_a_busy_answer_is_retried_and_a_loading_server_waited_for() -> None:
    fake = FakeLlama(embeddings=True)
    fake.down = True
    async with client(fake, max_retries=3, retry_backoff=0.05, retry_max_backoff=0.2) as c:

        async def revive() -> None:
            await anyio.sleep(0.01)
            fake.down = False

        async with anyio.create_task_group() as tg:
            tg.start_soon(revive)
            assert await c.embed("x") == [[1.0, 0.0, 1.0]]
    loading = FakeLlama(embeddings=True).fail(loading=0.3)
    async with client(loading) as c:
        assert await c.embed("x") == [[1.0, 0.0, 1.0]]
    assert [c.path for c in loading.calls].count("/v1/embeddings") >= 2  # waited, then again


async def test_without_embeddings_the_servers_refusal_is_its_typed_error() -> None:
    async with client(FakeLlama()) as c:
        with pytest.raises(HTTPStatusError) as info:
            await c.embed("x")
    assert info.value.status == 501


def test_a_bad_batch_is_refused() -> None:
    async def run() -> None:
        async with client(FakeLlama(embeddings=True)) as c:
            await c.embed("x", batch=0)

    with pytest.raises(ValueError, match="batch must be an int >= 1"):
        anyio.run(run)
