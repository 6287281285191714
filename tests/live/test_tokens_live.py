"""Counting before sending, on a real llama-server (the scripted model): ``count_tokens``
is the chat's own ``prompt_n`` exactly (tools, thinking, several messages), through the
server's ``input_tokens`` and through ``/apply-template`` + ``/tokenize`` alike;
``tokenize``/``detokenize`` round-trip; the pre-flight refuses what does not fit a slot's
context before any prefill, with the numbers, and the server's own overflow carries them."""

from __future__ import annotations

import pytest

from llamaclient import (
    ChatRequest,
    Client,
    ContextOverflowError,
    SystemMessage,
    UnsupportedInputError,
    UserMessage,
)
from tests.live.chat import ALL_TOOLS, live_config, script_request

pytestmark = pytest.mark.anyio

REQUESTS = {
    "plain": lambda: ChatRequest([UserMessage("Hello there.")], max_tokens=8),
    "system and thinking": lambda: ChatRequest(
        [SystemMessage("Be brief."), UserMessage("Why is the sky blue?")],
        thinking=True,
        max_tokens=8,
    ),
    "tools": lambda: script_request("tool_call", tools=ALL_TOOLS, max_tokens=8),
}


@pytest.mark.parametrize("name", sorted(REQUESTS))
async def test_the_count_is_the_chats_own_prompt_n(live_client: Client, name: str) -> None:
    request = REQUESTS[name]()
    counted = await live_client.count_tokens(request)
    completion = await live_client.complete(request)
    assert completion.timings is not None
    assert counted == completion.timings.prompt_n + completion.timings.cache_n
    # And the way an older build is counted: its template, then its tokenizer.
    known = live_client._shared.known
    known.input_tokens = False
    try:
        assert await live_client.count_tokens(request) == counted
    finally:
        known.input_tokens = None


async def test_tokenize_and_detokenize_round_trip(live_client: Client) -> None:
    ids = await live_client.tokenize("Counting: tick tock")
    pieces = await live_client.tokenize("Counting: tick tock", pieces=True)
    assert [p.id for p in pieces] == ids
    assert "".join(p.piece for p in pieces) == "Counting: tick tock"
    assert await live_client.detokenize(ids) == "Counting: tick tock"


async def test_preflight_refuses_before_the_prefill(base_url: str) -> None:
    async with Client(live_config(base_url, preflight=True)) as client:
        props = await client.props()
        assert props.n_ctx is not None
        long = ChatRequest([UserMessage("x " * 5000)], max_tokens=props.n_ctx // 2)
        with pytest.raises(ContextOverflowError) as info:
            await client.complete(long)
        error = info.value
        assert error.preflight
        assert error.n_ctx == props.n_ctx
        assert error.n_prompt_tokens + (error.max_tokens or 0) > error.n_ctx
        slots = await client.slots()
        assert not any(s.is_processing for s in slots)
        fits = ChatRequest([UserMessage("Hi")], max_tokens=8)
        assert (await client.complete(fits)).finish_reason is not None


async def test_the_servers_overflow_has_the_numbers(live_client: Client) -> None:
    request = ChatRequest([UserMessage("x " * 20000)], max_tokens=64)
    with pytest.raises(ContextOverflowError) as info:
        await live_client.complete(request)
    error = info.value
    assert not error.preflight
    assert (error.max_tokens, error.n_ctx) == (64, 8192)
    assert error.n_prompt_tokens > 8192


async def test_an_effort_the_template_cannot_render_is_refused_before_sending(
    live_client: Client,
) -> None:
    """The scripted model's template does not render ``reasoning_effort`` (its /props say
    ``supports_reasoning_effort`` false): refused before the chat is sent."""
    props = await live_client.props()
    assert props.chat_template_caps.supports_reasoning_effort is False
    request = script_request("reasoning_answer", reasoning_effort="low", max_tokens=200)
    with pytest.raises(UnsupportedInputError) as info:
        await live_client.complete(request)
    assert info.value.modality == "reasoning_effort"
    assert not any(s.is_processing for s in await live_client.slots())


async def test_max_time_is_the_servers_cap(live_client: Client) -> None:
    """``t_max_predict_ms`` reaches the server; it checks it at a token with a newline, and
    a turn it cuts ends ``length``, whole."""
    capped = script_request("long_answer", max_time=0.001, max_tokens=40)
    done = await live_client.complete(capped)
    assert done.finish_reason == "length"
