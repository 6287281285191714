"""The respx recipe of docs/testing.md: mocking httpx works once the client runs on httpx
(``Config(transport="httpx")`` or your own ``httpx.AsyncClient``); with the default transport
under asyncio the client has its own HTTP stack and respx never sees the request."""

from __future__ import annotations

import httpx
import pytest
import respx

from llamaclient import ChatRequest, Client, Config, ConnectError, UserMessage
from llamaclient.testing import stream_body

URL = "http://llama.test"


@pytest.mark.asyncio
async def test_respx_with_the_httpx_transport() -> None:
    async with respx.mock(base_url=URL) as router:
        route = router.post("/v1/chat/completions").respond(
            200, headers={"Content-Type": "text/event-stream"}, content=stream_body("Hi there.")
        )
        async with Client(Config(URL, transport="httpx")) as client:
            completion = await client.complete(ChatRequest([UserMessage("hi")]))
    assert completion.content == "Hi there."
    assert route.call_count == 1


@pytest.mark.asyncio
async def test_respx_with_your_own_httpx_client() -> None:
    async with respx.mock(base_url=URL) as router, httpx.AsyncClient() as http:
        router.post("/v1/chat/completions").respond(
            200, headers={"Content-Type": "text/event-stream"}, content=stream_body("Hi.")
        )
        async with Client(Config(URL), http_client=http) as client:
            completion = await client.complete(ChatRequest([UserMessage("hi")]))
    assert completion.content == "Hi."


@pytest.mark.asyncio
async def test_respx_does_not_see_the_default_transport() -> None:
    """The pitfall the recipe warns about: respx patches httpx only."""
    async with respx.mock(base_url=URL, assert_all_called=False) as router:
        route = router.post("/v1/chat/completions").respond(
            200, headers={"Content-Type": "text/event-stream"}, content=stream_body("Hi.")
        )
        config = Config(URL, max_retries=0, connect_timeout=2.0)
        async with Client(config) as client:
            with pytest.raises(ConnectError):
                await client.complete(ChatRequest([UserMessage("hi")]))
    assert route.call_count == 0
