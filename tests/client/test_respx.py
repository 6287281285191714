"""The error and retry rules again, through respx (httpx transport, no sockets): the status
errors, the in-band error and the early end with their partials, the wait timeout, retries
counted on the route, and the silent retry of a stale connection."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest
import respx

from llamaclient import (
    Client,
    Config,
    ConnectError,
    Content,
    ContextOverflowError,
    HTTPStatusError,
    Retrying,
    ServerError,
    StreamClosedEarlyError,
    Waiting,
    WaitTimeoutError,
)
from tests.conftest import CHAT, FAST, drain, user
from tests.support.faultserver import chat_chunks, error_event

pytestmark = pytest.mark.anyio

BASE = "http://llama.test"
SSE = {"Content-Type": "text/event-stream"}
OK = httpx.Response(200, headers=SSE, content=b"".join(chat_chunks(["Hi"])))


def config(**overrides: Any) -> Config:
    fields: dict[str, Any] = {**FAST, "transport": "httpx", **overrides}
    return Config(BASE, **fields)


async def test_status_error_and_context_overflow() -> None:
    overflow = {"error": {"code": 400, "message": "request (9 tokens) exceeds the available "
                          "context size (4 tokens), try increasing it",
                          "type": "exceed_context_size_error", "n_prompt_tokens": 9, "n_ctx": 4}}
    async with respx.mock(base_url=BASE) as router, Client(config()) as client:
        route = router.post(CHAT)
        route.respond(500, text="Internal Server Error")
        _, error = await drain(client.chat(user()))
        assert type(error) is HTTPStatusError
        assert (error.status, error.body, error.partial) == (500, "Internal Server Error", None)

        route.respond(400, json=overflow)
        _, error = await drain(client.chat(user()))
        assert isinstance(error, ContextOverflowError)
        assert (error.status, error.n_prompt_tokens, error.n_ctx) == (400, 9, 4)
        assert json.loads(error.body) == overflow
        assert route.call_count == 2  # neither was retried


async def test_in_band_error_and_early_end_keep_the_partial() -> None:
    head = chat_chunks(["Hel", "lo"], finish_reason=None, done=False)
    async with respx.mock(base_url=BASE) as router, Client(config()) as client:
        route = router.post(CHAT)
        route.return_value = httpx.Response(
            200, headers=SSE, content=b"".join([*head, error_event("Invalid diff: x")])
        )
        _, error = await drain(client.chat(user()))
        assert isinstance(error, ServerError)
        assert error.message == "Invalid diff: x"
        assert error.partial is not None
        assert error.partial.content == "Hello"

        route.return_value = httpx.Response(200, headers=SSE, content=b"".join(head))
        _, error = await drain(client.chat(user()))
        assert isinstance(error, StreamClosedEarlyError)
        assert error.partial is not None
        assert error.partial.content == "Hello"
        assert error.partial.finish_reason is None
        assert route.call_count == 2


async def test_wait_timeout() -> None:
    async def queued(request: httpx.Request) -> httpx.Response:
        await anyio.sleep(5)
        return OK

    async with respx.mock(base_url=BASE, assert_all_called=False) as router, Client(
        config(wait_timeout=0.2)
    ) as client:
        router.post(CHAT).mock(side_effect=queued)
        started = anyio.current_time()
        events, error = await drain(client.chat(user()))
        assert events == []
        assert isinstance(error, WaitTimeoutError)
        assert error.partial is None
        assert anyio.current_time() - started < 1.0


async def test_retries_then_success_and_no_retry_of_500() -> None:
    async with respx.mock(base_url=BASE) as router, Client(config()) as client:
        route = router.post(CHAT).mock(side_effect=[
            httpx.Response(503, json={"error": {"code": 503, "message": "busy",
                                                "type": "unavailable_error"}}),
            httpx.Response(429, headers={"Retry-After": "0"}),
            OK,
        ])
        events, error = await drain(client.chat(user()))
        assert error is None
        assert [type(e) for e in events] == [Retrying, Retrying, Content]
        assert [e.error for e in events if isinstance(e, Retrying)] == ["HTTP 503", "HTTP 429"]
        assert route.call_count == 3

        route.mock(side_effect=[httpx.Response(500, text="boom"), OK])
        _, error = await drain(client.chat(user()))
        assert isinstance(error, HTTPStatusError)
        assert route.call_count == 4


async def test_loading_model() -> None:
    loading = {"error": {"message": "Loading model", "type": "unavailable_error", "code": 503}}
    async with respx.mock(base_url=BASE) as router, Client(config()) as client:
        router.post(CHAT).mock(side_effect=[httpx.Response(503, json=loading), OK])
        health = router.get("/health").mock(side_effect=[
            httpx.Response(503, json=loading), httpx.Response(200, json={"status": "ok"})])
        events, error = await drain(client.chat(user()))
        assert error is None
        assert events == [Waiting(slot_busy=False), Content("Hi")]
        assert health.call_count == 2


async def test_a_disconnect_not_known_to_be_a_stale_connection_is_not_sent_again() -> None:
    """Under respx there is no connection pool, so nothing says the failed request went out
    on a reused connection: the server may have read it, and it is not sent again."""
    # resume=False: nothing else is mocked (with resume, the client would ask the server's
    # session what became of the request; see tests/client/test_resume.py).
    cfg = config(max_retries=2, resume=False)
    async with respx.mock(base_url=BASE) as router, Client(cfg) as client:
        route = router.post(CHAT).mock(side_effect=[
            httpx.RemoteProtocolError("Server disconnected without sending a response."), OK])
        events, error = await drain(client.chat(user()))
        assert events == []
        assert isinstance(error, StreamClosedEarlyError)
        assert route.call_count == 1


async def test_refused_connection() -> None:
    async with respx.mock(base_url=BASE) as router, Client(config(max_retries=2)) as client:
        route = router.post(CHAT).mock(side_effect=httpx.ConnectError("refused"))
        events, error = await drain(client.chat(user()))
        assert [e.attempt for e in events if isinstance(e, Retrying)] == [1, 2]
        assert len(events) == 2
        assert isinstance(error, ConnectError)
        assert route.call_count == 3


class _InMemory(httpx.AsyncBaseTransport):
    """Your own httpx transport answering from memory: every response is read already
    (``httpx.Response(..., json=...)`` loads its content at once)."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/props":
            return httpx.Response(404, json={"error": {"code": 404, "message": "Not Found"}})
        return httpx.Response(200, headers=SSE, content=b"".join(chat_chunks(["Hi", "!"])))


async def test_responses_read_already_by_your_own_transport_are_read_whole() -> None:
    """Was a ``ConnectError`` ('the response was closed (StreamConsumed)'): a body httpx had
    already read could not be streamed again."""
    async with (
        httpx.AsyncClient(transport=_InMemory()) as http,
        Client(config(), http_client=http) as client,
    ):
        with pytest.raises(HTTPStatusError) as info:
            await client.props()
        completion = await client.chat(user()).collect()
    assert info.value.status == 404
    assert info.value.message == "Not Found"
    assert completion.content == "Hi!"
