"""Why the prompt cache missed, live on the scripted model (issue 25 part 2): a session's
second turn, sent back by exact echo or changed one way, on a real llama-server. Each reason
is the server really reusing less (``timings.cache_n``), and the client saying why:
``messages`` (an edited system prompt, an answer not echoed), ``tools`` (another order),
``slot`` (another pinned slot), ``evicted`` (another conversation took the slot between the
turns), ``server`` (a pool's session moved when its server died). The sliding window's
reason is proven on Gemma (``test_gemma_cache.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.llama_server import LlamaServer
from llamaclient import (
    AssistantMessage,
    CacheMiss,
    CacheReport,
    ChatEvent,
    ChatMessage,
    ChatRequest,
    Client,
    Completion,
    Pool,
    Progress,
    Routed,
    SystemMessage,
    UserMessage,
)
from tests.live.chat import ALL_TOOLS, live_config, script_request

# --cache-ram 0: no host-RAM prompt cache, so a slot another conversation took really loses
# the session's prompt (with it, measured: 1221 of 1222 tokens came back from RAM, pinned).
LLAMA_SERVER_FLAGS = ("-np", "2", "-c", "8192", "--cache-ram", "0")
FIRST: list[ChatMessage] = [
    SystemMessage("You are agent cache."),
    UserMessage("Read notes.txt, then write out.txt."),
]

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the reasons do not depend on the event loop: one is enough


async def turn(
    chat: Any, messages: list[ChatMessage], **fields: Any
) -> tuple[list[ChatEvent], Completion]:
    fields.setdefault("tools", ALL_TOOLS)
    fields.setdefault("session", "agent")
    request: ChatRequest = script_request("reasoning_answer", messages, **fields)
    events: list[ChatEvent] = []
    async with chat(request) as stream:
        async for event in stream:
            events.append(event)
    return events, stream.completion


async def second_turn(
    client: Client, change: Any = None, **fields: Any
) -> tuple[list[ChatEvent], CacheReport, int]:
    """Turn 1 of a new session on slot 0, then turn 2 (``fields`` for it, ``change`` applied
    to its messages); its events, its report, turn 1's prompt."""
    session = f"s{id(change)}{sorted(fields)}"
    _, first = await turn(client.chat, FIRST, slot=0, session=session)
    assert first.usage.prompt_tokens is not None
    messages = [*FIRST, first.message(), UserMessage("Thanks. Next?")]
    if change is not None:
        messages = change(messages)
    fields.setdefault("slot", 0)
    events, second = await turn(client.chat, messages, session=session, **fields)
    assert second.cache is not None
    return events, second.cache, first.usage.prompt_tokens


@pytest.fixture
async def client(base_url: str) -> Any:
    async with Client(live_config(base_url, "asyncio")) as c:
        yield c


def the_miss(events: list[ChatEvent]) -> CacheMiss:
    [miss] = [e for e in events if isinstance(e, CacheMiss)]
    at = events.index(miss)
    assert isinstance(events[at - 1], Progress)  # right after the first Progress
    assert not any(isinstance(e, Progress) for e in events[: at - 1])
    return miss


async def test_exact_echo_reuses_the_previous_prompt_and_says_nothing(client: Client) -> None:
    events, report, prompt = await second_turn(client)
    assert not any(isinstance(e, CacheMiss) for e in events)
    assert report.expected == prompt
    assert report.reused >= prompt
    assert report.reason is None


async def test_an_edited_system_prompt(client: Client) -> None:
    events, report, prompt = await second_turn(
        client, lambda m: [SystemMessage("You are agent CACHE."), *m[1:]]
    )
    miss = the_miss(events)
    assert (miss.reason, miss.expected) == ("messages", prompt)
    assert "an edited system prompt" in miss.detail
    assert report.reused < 40  # really lost: all but the template's first tokens


async def test_an_answer_not_sent_back_as_it_came(client: Client) -> None:
    """Turn 3 re-sends turn 1's answer without its thinking: that answer was part of turn
    2's prompt, so the cache is lost from there (the latest answer is not: this template
    renders a past answer from its own text, so how it was echoed costs at most a token)."""
    _, first = await turn(client.chat, FIRST, slot=0, session="echo")
    messages = [*FIRST, first.message(), UserMessage("Thanks. Next?")]
    _, second = await turn(client.chat, messages, slot=0, session="echo")
    assert second.usage.prompt_tokens is not None
    answer = messages[2]
    assert isinstance(answer, AssistantMessage)
    assert answer.reasoning_content
    messages[2] = AssistantMessage(content=answer.content)
    messages += [second.message(), UserMessage("And then?")]
    events, third = await turn(client.chat, messages, slot=0, session="echo")
    miss = the_miss(events)
    assert (miss.reason, miss.expected) == ("messages", second.usage.prompt_tokens)
    assert miss.detail.startswith("messages[2] (assistant): its reasoning_content differs")
    assert third.timings is not None
    assert third.timings.cache_n < second.usage.prompt_tokens - 5


async def test_tools_in_another_order(client: Client) -> None:
    events, report, prompt = await second_turn(client, tools=list(reversed(ALL_TOOLS)))
    miss = the_miss(events)
    assert miss.reason == "tools"
    assert "another order" in miss.detail
    assert report.reused < prompt - 5


async def test_another_pinned_slot(client: Client) -> None:
    events, report, _ = await second_turn(client, slot=1)
    miss = the_miss(events)
    assert (miss.reason, miss.detail) == (
        "slot",
        "the previous turn ran on slot 0, this one on slot 1",
    )
    assert report.reused == 0


async def test_another_conversation_took_the_slot(client: Client) -> None:
    session = "evicted"
    _, first = await turn(client.chat, FIRST, slot=0, session=session)
    other: list[ChatMessage] = [SystemMessage("Someone else entirely."), UserMessage("Hi.")]
    await turn(client.chat, other, slot=0, session="other")
    messages = [*FIRST, first.message(), UserMessage("Thanks. Next?")]
    events, _ = await turn(client.chat, messages, slot=0, session=session)
    miss = the_miss(events)
    assert miss.reason == "evicted"
    assert miss.reused < 40


@pytest.fixture
def two_servers(
    llama_server_binary: Path, scripted_model_path: Path, tmp_path: Path
) -> Iterator[list[LlamaServer]]:
    servers = [
        LlamaServer(
            scripted_model_path,
            *LLAMA_SERVER_FLAGS,
            log_path=tmp_path / f"s{i}.log",
            binary=llama_server_binary,
        )
        for i in range(2)
    ]
    try:
        for server in servers:
            server.start()
        yield servers
    finally:
        for server in servers:
            server.stop()


async def test_a_pools_session_moved_by_a_dead_server(two_servers: list[LlamaServer]) -> None:
    configs = [live_config(s.base_url, "asyncio", max_retries=1) for s in two_servers]
    async with Pool(configs) as pool:
        started, first = await turn(pool.chat, FIRST, session="moving")
        routed = next(e for e in started if isinstance(e, Routed))
        [home] = [s for s in two_servers if s.base_url == routed.server]
        home.stop()
        messages = [*FIRST, first.message(), UserMessage("Thanks. Next?")]
        events, second = await turn(pool.chat, messages, session="moving")
    miss = the_miss(events)
    assert miss.reason == "server"
    assert home.base_url in miss.detail
    assert second.cache is not None
    assert second.cache.reused == 0
