"""``Config(model=...)``: the look at ``GET /models`` before the first chat gets the chat's own
retry and wait policies, on the fault server (both transports). A server that is briefly
down, or still loading, is waited for exactly as it is without ``model=``."""

from __future__ import annotations

import json
import socket

import anyio
import pytest

from llamaclient import Client, ConnectError, Content, Retrying, Waiting
from tests.conftest import CHAT, ClientFactory, TransportName, drain, make_config, user
from tests.support.faultserver import FaultServer, Json, chat_chunks, refused_url, stream

pytestmark = pytest.mark.anyio

LOADING = {"error": {"message": "Loading model", "type": "unavailable_error", "code": 503}}
ROUTER_MODELS = {
    "data": [{"id": "m", "aliases": [], "status": {"value": "loaded", "args": []}}]
}


@pytest.mark.parametrize("model", ["", "m"])
async def test_a_refused_connection_is_retried_the_same_with_or_without_a_model(
    transport: TransportName, model: str
) -> None:
    config = make_config(refused_url(), transport, max_retries=2, model=model)
    async with Client(config) as client:
        events, error = await drain(client.chat(user()))
    assert [type(e) for e in events] == [Retrying, Retrying]
    assert isinstance(error, ConnectError)
    assert error.partial is None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.mark.parametrize("model", ["", "m"])
async def test_a_server_that_comes_back_is_reached_with_a_model_too(
    transport: TransportName, model: str
) -> None:
    """The server restarts: refused at first, then up. The chat retries and succeeds."""
    port = _free_port()
    config = make_config(
        f"http://127.0.0.1:{port}", transport, model=model, max_retries=8,
        retry_backoff=0.1, retry_max_backoff=0.2,
    )
    async with Client(config) as client:
        stream_ = client.chat(user())
        first = await anext(stream_)
        assert isinstance(first, Retrying)
        async with FaultServer(port=port) as server:
            server.route("POST", CHAT, stream(chat_chunks(["Hi"])))
            server.route("GET", "/models", [Json(200, ROUTER_MODELS)])
            events, error = await drain(stream_)
        assert error is None
        assert [e for e in events if not isinstance(e, Retrying)] == [Content("Hi")]
        paths = [r.path for r in server.requests]
    assert paths == (["/models", CHAT] if model else [CHAT])


async def test_a_router_still_loading_is_waited_for_before_the_look(
    server: FaultServer, make_client: ClientFactory
) -> None:
    """``GET /models`` answered 503 ``Loading model``: wait (``Waiting``, ``/health``), then
    look again; the router is not mistaken for a plain server."""
    server.route("GET", "/models", [Json(503, LOADING)], [Json(200, ROUTER_MODELS)])
    server.route("GET", "/health", [Json(200, {"status": "ok"})])
    server.route("POST", CHAT, stream(chat_chunks(["Hi"])))
    client = make_client(model="m")
    events, error = await drain(client.chat(user()))
    assert error is None
    assert events == [Waiting(slot_busy=False), Content("Hi")]
    # Known as a router now: the chat goes first, ?autoload=false (a ready model answers).
    events, error = await drain(client.chat(user()))
    assert error is None
    assert [r.path for r in server.requests] == ["/models", "/health", "/models", CHAT, CHAT]
    assert json.loads(server.requests[3].body)["model"] == "m"
    assert server.requests[4].target.endswith("?autoload=false")


async def test_a_retried_look_says_what_failed(transport: TransportName) -> None:
    config = make_config(refused_url(), transport, max_retries=1, model="m")
    async with Client(config) as client:
        with anyio.fail_after(5):
            events, error = await drain(client.chat(user()))
    [retry] = events
    assert isinstance(retry, Retrying)
    assert retry.error
    assert isinstance(error, ConnectError)


async def test_concurrent_first_chats_share_one_look(
    server: FaultServer, make_client: ClientFactory
) -> None:
    """50 first chats at once on a plain server: one ``GET /models`` answers them all (it
    is learnt not to be a router), as ``/props`` is asked once."""
    import anyio

    plain = {"data": [{"id": "m.gguf", "object": "model"}]}
    server.route("GET", "/models", [Json(200, plain)])
    server.route("POST", CHAT, stream(chat_chunks(["Hi"])))
    client = make_client(model="m")
    async with anyio.create_task_group() as tg:
        for _ in range(50):
            tg.start_soon(drain, client.chat(user()))
    paths = [r.path for r in server.requests]
    assert paths.count("/models") == 1
    assert paths.count(CHAT) == 50
