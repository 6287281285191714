"""The client behind LiteLLM's proxy, as the testing kit plays it (``FakeLlama(litellm=...)``):
said once per client, a break not resumed, the side routes' errors naming the proxy, the
thinking budget in the body. The real proxy: tests/live/test_litellm_live.py."""

from __future__ import annotations

import logging

import pytest

from llamaclient import (
    ChatRequest,
    Client,
    Config,
    HTTPStatusError,
    Proxied,
    Resuming,
    StreamClosedEarlyError,
    UserMessage,
)
from llamaclient.testing import FakeLlama
from tests.conftest import drain

pytestmark = pytest.mark.anyio

VERSION = "1.108.7"
SAID = Proxied(f"LiteLLM {VERSION}", ("resume", "slots", "token counts"))


def hi(**fields: object) -> ChatRequest:
    return ChatRequest([UserMessage("hi")], **fields)  # type: ignore[arg-type]


def client(fake: FakeLlama, **fields: object) -> Client:
    config = Config("http://proxy", retry_backoff=0.001, **fields)  # type: ignore[arg-type]
    return Client(config, transport=fake.transport())


async def test_it_is_said_once_per_client_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeLlama(litellm=VERSION).reply("one").reply("two")
    caplog.set_level(logging.WARNING, "llamaclient")
    async with client(fake) as c:
        first, error = await drain(c.chat(hi()))
        assert error is None
        second, error = await drain(c.chat(hi()))
        assert error is None
    assert first[0] == SAID
    assert SAID not in second
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    said = f"through LiteLLM {VERSION}, which passes on no resume, slots, token counts"
    assert warnings == [said]


async def test_a_server_answering_itself_is_not_a_proxy() -> None:
    fake = FakeLlama().reply("one")
    async with client(fake) as c:
        events, _ = await drain(c.chat(hi()))
    assert not [e for e in events if isinstance(e, Proxied)]


async def test_a_break_is_not_resumed_and_keeps_its_partial() -> None:
    """The server behind could resume, but the proxy drops the conversation id: the break
    ends the turn, with no reconnect tried."""
    fake = FakeLlama(litellm=VERSION, resumable=True).fail(cut_after=3).reply("a b c d e f g")
    async with client(fake) as c:
        events, error = await drain(c.chat(hi()))
    assert type(error) is StreamClosedEarlyError
    assert not [e for e in events if isinstance(e, Resuming)]
    assert not [call for call in fake.calls if call.path.startswith("/v1/stream")]
    assert error.partial is not None
    assert error.partial.content == "a b c"
    assert "x-conversation-id" not in fake.requests[0].headers


async def test_a_side_route_fails_naming_the_proxy_once_it_is_known() -> None:
    fake = FakeLlama(litellm=VERSION).reply("one")
    async with client(fake) as c:
        with pytest.raises(HTTPStatusError) as before:
            await c.slots()
        await c.complete(hi())
        with pytest.raises(HTTPStatusError) as after:
            await c.props()
    assert before.value.status == after.value.status == 404
    assert "proxy" not in str(before.value)
    assert f"LiteLLM {VERSION} is a proxy: it passes on no /props" in str(after.value)


async def test_the_thinking_budget_goes_in_the_body() -> None:
    """A backstop past the grace until the proxy is known, then the budget itself."""
    fake = FakeLlama(litellm=VERSION).reply("one").reply("two")
    async with client(fake, thinking_budget=50, thinking_grace=10) as c:
        await c.complete(hi())
        await c.complete(hi())
    budgets = [r.body.get("reasoning_budget_tokens") for r in fake.requests]
    assert budgets == [60, 50]
