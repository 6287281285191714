"""``ChatRequest.max_time`` on Gemma 3 270M (a model that writes newlines, where llama-server
checks ``t_max_predict_ms``): a list it would write 200 tokens of ends ``length`` after the
cap, whole, well short of ``max_tokens``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.llama_server import LlamaServer
from llamaclient import ChatRequest, Client, Config, UserMessage
from llamaclient._embedded import GEMMA_FLAGS, gemma_path

pytestmark = pytest.mark.anyio


@pytest.fixture
def gemma(llama_server_binary: Path, tmp_path: Path) -> Iterator[LlamaServer]:
    with LlamaServer(
        gemma_path(), *GEMMA_FLAGS, log_path=tmp_path / "gemma.log", binary=llama_server_binary
    ) as server:
        yield server


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_max_time_ends_the_turn_at_the_server(gemma: LlamaServer) -> None:
    request = ChatRequest(
        [UserMessage("List twenty fruits, one per line.")],
        max_tokens=200,
        max_time=0.3,
        temperature=0,
    )
    async with Client(Config(gemma.base_url, load_timeout=120, wait_timeout=300)) as client:
        completion = await client.complete(request)
    assert completion.finish_reason == "length"
    assert completion.usage.completion_tokens is not None
    assert completion.usage.completion_tokens < 100  # measured: 10 of 200
    assert completion.content
