"""Shared fixtures and helpers for the client tests (``tests/client``, ``tests/live``).

- ``anyio_backend``: every test marked ``anyio`` runs once per event loop, ``"asyncio"`` and
  ``"trio"`` (anyio's pytest plugin runs the test and its async fixtures on it). Tests that
  are about asyncio itself stay on pytest-asyncio (``@pytest.mark.asyncio``).
- ``transport``: every fault-server test runs once per transport, ``"asyncio"`` and ``"httpx"``.
  Our asyncio transport needs an asyncio loop: under trio the client always uses httpx, so
  the (``trio``, ``asyncio``) combination is skipped at collection (impossible by design).
- ``server``: a fresh :class:`~tests.support.faultserver.FaultServer` on loopback: in the
  test's own loop under asyncio, in an asyncio loop of its own in a thread under trio (the
  same API either way).
- ``make_client``: builds ``Client`` objects for ``server`` over ``transport`` with small
  timeouts and fast backoff; on teardown every client is closed and the server must see all
  of its connections closed (a leaked connection fails the test).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, Literal

import pytest

from llamaclient import ChatEvent, ChatRequest, ChatStream, Client, Config, UserMessage
from tests.support.faultserver import FaultServer

TransportName = Literal["asyncio", "httpx"]
TRANSPORTS: tuple[TransportName, ...] = ("asyncio", "httpx")
CHAT = "/v1/chat/completions"
CONTROL = "/v1/chat/completions/control"

ClientFactory = Callable[..., Client]

# Defaults for test clients: fail fast, never hang the suite.
FAST: dict[str, Any] = {
    # 2 s gave an occasional ConnectTimeout on loopback (an unexpected Retrying) on the
    # loaded 2-core machine; the likely cause, a dropped SYN, is resent after 1 s, then 3 s.
    "connect_timeout": 5.0,
    "wait_timeout": 5.0,
    "stall_timeout": 5.0,
    "load_timeout": 5.0,
    "retry_backoff": 0.01,
    "retry_max_backoff": 0.02,
}


BackendName = Literal["asyncio", "trio"]
BACKENDS: tuple[BackendName, ...] = ("asyncio", "trio")
TRIO_NEEDS_HTTPX = (
    "the asyncio transport needs an asyncio event loop; under trio the client uses httpx"
)


@pytest.fixture(params=[pytest.param(name, id=name) for name in BACKENDS])
def anyio_backend(request: pytest.FixtureRequest) -> BackendName:
    """The event loop of every ``anyio`` test (overrides the plugin's asyncio-only default)."""
    name: BackendName = request.param
    return name


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Skip the (trio, asyncio transport) combinations: they cannot exist."""
    for item in items:
        params = getattr(item, "callspec", None)
        if params is None or params.params.get("anyio_backend") != "trio":
            continue
        if "asyncio" in (params.params.get("transport"), params.params.get("live_transport")):
            item.add_marker(pytest.mark.skip(reason=TRIO_NEEDS_HTTPX))


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> TransportName:
    name: TransportName = request.param
    return name


@pytest.fixture
async def server() -> AsyncIterator[FaultServer]:
    async with FaultServer(hold_timeout=10.0) as srv:
        yield srv


def make_config(base_url: str, transport: TransportName, **overrides: Any) -> Config:
    fields: dict[str, Any] = {**FAST, "transport": transport, **overrides}
    return Config(base_url, **fields)


@pytest.fixture
async def make_client(
    server: FaultServer, transport: TransportName
) -> AsyncIterator[ClientFactory]:
    clients: list[Client] = []

    def make(**overrides: Any) -> Client:
        client = Client(make_config(server.url, transport, **overrides))
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.aclose()
    await server.wait_closed_connections(timeout=5.0)


def user(text: str = "hi", **fields: Any) -> ChatRequest:
    """A one-message request."""
    return ChatRequest([UserMessage(text)], **fields)


async def drain(stream: ChatStream) -> tuple[list[ChatEvent], BaseException | None]:
    """Iterate ``stream`` to its end inside ``async with``; return the events and the error
    that ended it (None when it finished normally)."""
    events: list[ChatEvent] = []
    try:
        async with stream:
            async for event in stream:
                events.append(event)
    except Exception as exc:
        return events, exc
    return events, None
