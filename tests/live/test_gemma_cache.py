"""Prompt-cache reuse on a sliding-window model, measured live on Gemma 3 270M.

What llama-server reuses on the next turn of a conversation (same slot, exact echo through
``Completion.message()``), as ``docs/agent-loop.md`` ("Why sliding-window models lose 5
tokens") explains from its source:

- while the reusable prefix (previous prompt + previous answer) is at most the sliding window
  (``n_swa`` = 512 for Gemma 3 270M), the server restores the context checkpoint it saved 4
  tokens before the end of the previous prompt, at that checkpoint's last position:
  ``cache_n == previous prompt - 5``, exactly, every turn;
- once the prefix is longer than the window, the whole of it is reused:
  ``cache_n >= previous prompt`` (measured: previous prompt + previous answer - 1);
- with ``--swa-full`` the whole previous prompt is reused from the first turn.

So on every turn of every kind, ``cache_n >= previous prompt - 5``: that is the bound the
README promises for sliding-window models. Gemma is written from the PyPI package as the main
job does (``llamaclient._embedded.gemma_path``); the server is built portable by
``scripts/venv.sh``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.llama_server import LlamaServer
from llamaclient import (
    CacheMiss,
    ChatMessage,
    ChatRequest,
    Client,
    Completion,
    Config,
    Progress,
    SystemMessage,
    UserMessage,
)
from llamaclient._embedded import gemma_path

N_SWA = 512  # gemma3.attention.sliding_window in the GGUF
SWA_LOSS = 5  # checkpoint 4 tokens before the prompt's end, restored one position earlier
FLAGS = ("--no-jinja", "--chat-template", "gemma", "-c", "4096", "-np", "1")


def _server(llama_server_binary: Path, tmp: Path, *extra: str) -> LlamaServer:
    log = tmp / "llama-server.log"
    return LlamaServer(gemma_path(), *FLAGS, *extra, log_path=log, binary=llama_server_binary)


@pytest.fixture(scope="module")
def gemma(
    llama_server_binary: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer]:
    server = _server(llama_server_binary, tmp_path_factory.mktemp("gemma"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


class Turn:
    """One turn's numbers: the prompt it sent, what the cache gave, what it generated."""

    def __init__(self, completion: Completion, first_progress_cache: int | None) -> None:
        timings, usage = completion.timings, completion.usage
        assert timings is not None, completion
        assert usage.prompt_tokens is not None, completion
        self.prompt = usage.prompt_tokens
        self.cache_n = timings.cache_n
        self.predicted = timings.predicted_n
        self.progress_cache = first_progress_cache
        self.report = completion.cache
        self.misses: list[CacheMiss] = []

    def __repr__(self) -> str:
        return f"Turn(prompt={self.prompt}, cache_n={self.cache_n}, predicted={self.predicted})"


# A long user turn (~600 tokens) takes the conversation past the window in one step, so
# the test needs few generated tokens (Gemma on 2 shared CPUs makes ~10-30 tokens/s).
LONG = "Here are my notes on the Baltic Sea, read them. " + "The water is cold and grey. " * 90
QUESTIONS = ("Tell me about a sea.", "Tell me more.", "And more.", LONG, "Thanks. More?", "Go on.")


async def converse(
    url: str, questions: tuple[str, ...], max_tokens: int, *, edit_last: bool = False
) -> list[Turn]:
    """A multi-turn chat of one session on slot 0 that echoes each answer with
    ``Completion.message()`` (``edit_last``: the last turn edits the system prompt)."""
    messages: list[ChatMessage] = [SystemMessage("You are a helpful assistant.")]
    out: list[Turn] = []
    async with Client(Config(base_url=url, load_timeout=120)) as client:
        for i, question in enumerate(questions):
            messages.append(UserMessage(question))
            if edit_last and i == len(questions) - 1:
                messages[0] = SystemMessage("You are a terse assistant.")
            request = ChatRequest(
                messages, slot=0, max_tokens=max_tokens, temperature=0.7, seed=i, session="g"
            )
            first: int | None = None
            misses: list[CacheMiss] = []
            async with client.chat(request) as stream:
                async for event in stream:
                    if isinstance(event, Progress) and first is None:
                        first = event.cache
                    if isinstance(event, CacheMiss):
                        misses.append(event)
            completion = stream.completion
            out.append(Turn(completion, first))
            out[-1].misses = misses
            messages.append(completion.message())
    return out


@pytest.mark.asyncio
async def test_gemma_reuses_all_but_5_tokens_within_the_window_then_everything(
    gemma: LlamaServer,
) -> None:
    turns = await converse(gemma.base_url, QUESTIONS, max_tokens=24)
    within = beyond = 0
    for prev, turn in itertools.pairwise(turns):
        assert turn.progress_cache == turn.cache_n, turns  # the first Progress says it early
        assert turn.cache_n >= prev.prompt - SWA_LOSS, turns  # the bound, on every turn
        prefix = prev.prompt + prev.predicted - 1  # what a full-attention cache would reuse
        assert turn.misses == [], turns  # 5 short is the window: no CacheMiss
        assert turn.report is not None
        assert turn.report.expected == prev.prompt
        if prefix <= N_SWA - 2:
            assert turn.cache_n == prev.prompt - SWA_LOSS, turns
            assert (turn.report.reason, turn.report.shortfall) == ("window", SWA_LOSS)
            within += 1
        elif prefix > N_SWA + 2:
            assert turn.cache_n >= prev.prompt, turns
            assert turn.report.reason is None
            beyond += 1
    # Both regimes must have been seen, or the test proved less than it says.
    assert within >= 2, turns
    assert beyond >= 1, turns


@pytest.mark.asyncio
async def test_gemma_with_swa_full_reuses_the_whole_previous_prompt(
    llama_server_binary: Path, tmp_path: Path
) -> None:
    server = _server(llama_server_binary, tmp_path, "--swa-full")
    server.start()
    try:
        turns = await converse(server.base_url, QUESTIONS[:3], max_tokens=24)
    finally:
        server.stop()
    for prev, turn in itertools.pairwise(turns):
        assert turn.cache_n >= prev.prompt, turns


@pytest.mark.asyncio
async def test_gemma_an_edited_system_prompt_is_a_named_cache_miss(gemma: LlamaServer) -> None:
    turns = await converse(gemma.base_url, QUESTIONS[:3], max_tokens=12, edit_last=True)
    assert turns[1].misses == []
    [miss] = turns[2].misses
    assert (miss.reason, miss.expected) == ("messages", turns[1].prompt)
    assert miss.detail == (
        "messages[0] (system): its content differs from the previous turn's "
        "(an edited system prompt)"
    )
    assert miss.reused < 10  # the system prompt is the first thing Gemma's template writes
