"""Hibernating idle sessions on a real llama-server started with ``--slot-save-path`` and
one slot: a session idle past ``hibernate_after`` has its slot saved and erased, another
session takes the slot, and the first one's next turn gets its prompt cache back from the
file before its chat (``cache_n`` = its whole previous prompt). Also measured and printed:
restoring a 2k- and a 4k-token conversation against evaluating it again."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from devtools.llama_server import LlamaServer
from llamaclient import ChatMessage, ChatRequest, Client, Completion, Pool, UserMessage
from tests.live.chat import live_config

pytestmark = pytest.mark.anyio

FLAGS = ("-np", "1", "-c", "8192")


@pytest.fixture
def server(
    llama_server_binary: Path, scripted_model_path: Path, tmp_path: Path
) -> Iterator[LlamaServer]:
    saved = tmp_path / "slots"
    saved.mkdir()
    log = tmp_path / "llama-server.log"
    flags = (*FLAGS, "--slot-save-path", str(saved))
    with LlamaServer(scripted_model_path, *flags, log_path=log, binary=llama_server_binary) as s:
        yield s


def words(n: int, seed: str) -> str:
    """A user turn of roughly ``n`` tokens on the scripted model (about 5 a word)."""
    return " ".join(f"{seed}{i}" for i in range(n // 5))


async def turn(pool: Pool, messages: list[ChatMessage], session: str) -> Completion:
    request = ChatRequest(messages, session=session, max_tokens=8, temperature=0)
    completion = await pool.complete(request)
    messages.append(completion.message())
    return completion


async def test_an_idle_session_is_restored_with_its_whole_cache(server: LlamaServer) -> None:
    config = live_config(server.base_url)
    async with Pool([config], hibernate_after=0.2) as pool:
        a: list[ChatMessage] = [UserMessage(words(1000, "a"))]
        first = await turn(pool, a, "a")
        await anyio.sleep(0.3)
        b: list[ChatMessage] = [UserMessage(words(1000, "b"))]
        await turn(pool, b, "b")  # "a" is saved and its slot erased: "b" takes it
        await anyio.sleep(0.3)
        a.append(UserMessage("And then?"))
        again = await turn(pool, a, "a")  # "b" saved, "a" restored
        assert pool._hibernation is not None
        assert (pool._hibernation.saved, pool._hibernation.restored) == (2, 1)
    assert first.timings is not None
    assert again.timings is not None
    assert first.usage.prompt_tokens is not None
    assert again.timings.cache_n >= first.usage.prompt_tokens  # the whole previous prompt


@pytest.mark.parametrize("tokens", [2000, 4000])
async def test_restoring_against_evaluating_again(server: LlamaServer, tokens: int) -> None:
    """Printed for docs/benchmarks.md: the prefill of a conversation of ``tokens`` tokens,
    and the restore of the same slot from its file (``restore_ms``, and the round trip)."""
    async with Client(live_config(server.base_url)) as client:
        messages = [UserMessage(words(tokens, "t"))]
        request = ChatRequest(messages, slot=0, max_tokens=4, temperature=0)
        await client.erase_slot(0)
        cold = await client.complete(request)
        assert cold.timings is not None
        assert cold.timings.prompt_ms is not None
        await client.save_slot(0, f"conv{tokens}.bin")
        await client.erase_slot(0)
        started = time.perf_counter()
        restored = await client.restore_slot(0, f"conv{tokens}.bin")
        round_trip = (time.perf_counter() - started) * 1000
        warm = await client.complete(request)
    assert warm.timings is not None
    assert warm.timings.cache_n >= cold.timings.prompt_n - 1  # all but the last prompt token
    print(
        f"\n{cold.timings.prompt_n} tokens: prefill {cold.timings.prompt_ms:.1f} ms; restore "
        f"{restored.restore_ms:.1f} ms ({round_trip:.1f} ms round trip, {restored.n_read:,} "
        f"bytes), then prefill {warm.timings.prompt_ms:.1f} ms of {warm.timings.prompt_n}"
    )
