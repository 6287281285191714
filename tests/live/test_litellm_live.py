"""The client behind LiteLLM's proxy (PyPI's ``litellm[proxy]``), in front of a llama-server
with the scripted model and one with Gemma 3 270M. Run by ``nox -s litellm``, which installs
the proxy; elsewhere this module is skipped (the proxy and its ~150 packages take minutes to
install, so CI leaves it out).

- A chat, tool calls and a typed output work through it, and the prompt cache hits there;
- what is lost through it is found from its first answer and said once (``Proxied``, one
  WARNING): a break ends the turn at once with its partial, with no resume tried; ``slots()``
  says why it fails;
- the thinking budget is kept: the server applies it from the body;
- its error envelopes become our typed errors.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from devtools.llama_server import LlamaServer
from llamaclient import (
    ChatRequest,
    Client,
    ContextOverflowError,
    FinishReason,
    HTTPStatusError,
    ModelNotFoundError,
    Proxied,
    Resuming,
    StreamClosedEarlyError,
    ToolCallDone,
    UserMessage,
)
from llamaclient._embedded import GEMMA_FLAGS, gemma_path
from tests.live.chat import drain, live_config, output, script_request
from tests.live.litellm import KEY, available, litellm_proxy
from tests.live.proxy import CutProxy

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        not available(), reason="LiteLLM's proxy is not installed here: nox -s litellm runs it"
    ),
]

LOST = ("resume", "slots", "token counts")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def servers(
    llama_server_binary: Path, scripted_model_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """The scripted model and Gemma, each on a llama-server of its own."""
    binary = llama_server_binary
    scripted = LlamaServer(scripted_model_path, "-np", "2", "-c", "8192", binary=binary)
    gemma = LlamaServer(gemma_path(), *GEMMA_FLAGS, binary=binary)  # the main job's flags
    scripted.start()
    try:
        gemma.start()
        try:
            yield {"scripted": scripted.base_url, "gemma": gemma.base_url}
        finally:
            gemma.stop()
    finally:
        scripted.stop()


@pytest.fixture(scope="module")
def proxy(servers: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with litellm_proxy(servers, tmp_path_factory.mktemp("litellm")) as url:
        yield url


def through(url: str, model: str = "scripted", **fields: Any) -> Client:
    return Client(live_config(url, "asyncio", api_key=KEY, model=model, **fields))


def proxied(events: list[Any]) -> list[Proxied]:
    return [e for e in events if isinstance(e, Proxied)]


async def test_a_chat_works_says_once_what_is_lost_and_its_cache_hits(
    proxy: str, servers: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    async with Client(live_config(servers["scripted"], "asyncio")) as direct:
        expected = await direct.complete(script_request("reasoning_answer"))
    caplog.set_level(logging.WARNING, "llamaclient")
    async with through(proxy) as client:
        first = client.chat(script_request("reasoning_answer"))
        events, error = await drain(first)
        assert error is None
        said = proxied(events)
        assert len(said) == 1
        assert said[0].proxy.startswith("LiteLLM 1.")
        assert said[0].lost == LOST
        assert output(events)[0] == said[0]  # before any output
        done = first.completion
        assert (done.reasoning_content, done.content) == (
            expected.reasoning_content,
            expected.content,
        )
        assert done.timings is not None  # llama-server's own fields come through
        messages = [*script_request("reasoning_answer").messages, done.message()]
        messages.append(UserMessage("And then?"))
        second = client.chat(script_request("reasoning_answer", messages))
        events, error = await drain(second)
        assert error is None
        assert proxied(events) == []
        timings = second.completion.timings
        assert timings is not None
        assert timings.cache_n >= (done.usage.prompt_tokens or 0) > 0  # the echo hit the cache
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"through {said[0].proxy}, which passes on no resume, slots, token counts"]


async def test_tool_calls_arrive_whole_and_eagerly(proxy: str) -> None:
    async with through(proxy) as client:
        stream = client.chat(script_request("two_tool_calls"))
        events, error = await drain(stream)
    assert error is None
    done = [e.call for e in events if isinstance(e, ToolCallDone)]
    assert [c.name for c in done] == ["list_dir", "read_file"]
    assert [msgspec.json.decode(c.arguments) for c in done] == [
        {"path": "."},
        {"path": "notes.txt"},
    ]
    assert stream.completion.finish_reason is FinishReason.TOOL_CALLS
    assert stream.completion.tool_calls == tuple(done)


class Person(msgspec.Struct):
    name: str
    age: int


async def test_a_typed_output_is_parsed(proxy: str) -> None:
    request = ChatRequest(
        [UserMessage("Invent a person. Answer in JSON with name and age.")],
        max_tokens=120,
        temperature=0,
        seed=7,
    )
    async with through(proxy, model="gemma") as client:
        person = await client.parse(request, Person)
    assert isinstance(person, Person)
    assert person.name
    assert isinstance(person.age, int)


async def test_the_thinking_budget_is_kept(proxy: str) -> None:
    """The first turn, before the proxy is known: the control call 404s, and the server's
    backstop (budget + grace) ends the reasoning; from then on the body carries the budget
    itself. Either way the answer follows, with no error."""
    async with through(proxy, thinking_budget=8, thinking_grace=40) as client:
        turns = [await client.complete(script_request("endless_reasoning", max_tokens=400))]
        turns.append(await client.complete(script_request("endless_reasoning", max_tokens=400)))
    assert [t.reasoning_tokens for t in turns] == [8 + 40 - 1, 8 - 1]
    assert all(t.thinking_capped and t.content == "Done." for t in turns)


async def test_a_break_ends_the_turn_at_once_with_its_partial(
    proxy: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Cut between the client and the proxy: nothing to resume from (the proxy passes on
    neither the conversation id nor the routes), so no reconnect, and the partial is exactly
    what the events delivered."""
    port = int(proxy.rsplit(":", 1)[1])
    caplog.set_level(logging.DEBUG, "llamaclient.http")
    # The model named in the body only: no /models look first, so the chat opens the
    # connection (the cutter judges a connection by its first request).
    request = script_request("long_answer", extra={"model": "scripted"})
    with CutProxy(port).running() as cutter:
        cutter.arm(6000)
        async with through(cutter.url, model="") as client:
            events, error = await drain(client.chat(request))
    assert type(error) is StreamClosedEarlyError, error
    assert proxied(events)
    assert not [e for e in events if isinstance(e, Resuming)]
    partial = error.partial
    assert partial is not None
    assert partial.content
    assert "".join(getattr(e, "text", "") for e in events if type(e).__name__ == "Content") == (
        partial.content
    )
    requests = [r.getMessage() for r in caplog.records if r.name == "llamaclient.http"]
    assert not [r for r in requests if "/v1/stream" in r], requests


async def test_its_errors_are_our_typed_errors(proxy: str) -> None:
    async with through(proxy) as client:
        with pytest.raises(ContextOverflowError) as overflow:
            await client.complete(ChatRequest([UserMessage("word " * 9000)], max_tokens=8))
        assert overflow.value.n_ctx == 4096  # a slot's: 8192 over 2
        assert overflow.value.n_prompt_tokens > 4096
        assert overflow.value.max_tokens == 8
        with pytest.raises(ModelNotFoundError):
            await client.complete(script_request("reasoning_answer", model="nope"))
        await client.complete(script_request("reasoning_answer"))  # the proxy is known now
        with pytest.raises(HTTPStatusError) as slots:
            await client.slots()
    assert slots.value.status == 404
    assert "is a proxy: it passes on no /slots" in str(slots.value)
