"""``AsyncioTransport`` over TLS: a loopback fault server with a certificate made in the test
by a throwaway CA (``trustme``): verified against that CA, refused without it, and a whole
chat through the client."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
import trustme

from llamaclient import ChatRequest, Client, Config, ConnectError, UserMessage
from llamaclient._transports.base import TransportError
from llamaclient._transports.native import AsyncioTransport
from tests.support.faultserver import Chunk, FaultServer, Hold, Json, Status, chat_chunks, stream

pytestmark = pytest.mark.asyncio

CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def ca_file(ca: trustme.CA, tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


def server_context(ca: trustme.CA, *names: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert(*names).configure_cert(context)
    return context


@pytest_asyncio.fixture
async def server(ca: trustme.CA) -> AsyncIterator[FaultServer]:
    async with FaultServer(hold_timeout=10.0, ssl=server_context(ca, "127.0.0.1")) as srv:
        yield srv


async def fetch(t: AsyncioTransport, url: str) -> tuple[int, bytes]:
    response = await t.send("GET", url, {}, None)
    try:
        return response.status, await response.aread()
    finally:
        await response.aclose()


async def test_verified_against_the_ca_file(server: FaultServer, ca_file: str) -> None:
    assert server.url.startswith("https://")
    server.route("GET", "/j", [Json(200, {"ok": True})])
    server.route("GET", "/s", stream([b"data: 1\n\n", b"x" * 300_000, b"data: 2\n\n"]))
    t = AsyncioTransport(connect_timeout=5, tls=ca_file)
    try:
        for _ in range(2):
            assert await fetch(t, server.url + "/j") == (200, b'{"ok":true}')
        assert await fetch(t, server.url + "/s") == (
            200,
            b"data: 1\n\n" + b"x" * 300_000 + b"data: 2\n\n",
        )
        assert server.connections_accepted == 1  # kept alive and reused over TLS too
    finally:
        await t.aclose()
    await server.wait_closed_connections(timeout=5.0)


async def test_a_context_is_used_as_given(server: FaultServer, ca: trustme.CA) -> None:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    server.route("GET", "/j", [Json(200, {})])
    t = AsyncioTransport(connect_timeout=5, tls=context)
    try:
        assert await fetch(t, server.url + "/j") == (200, b"{}")
    finally:
        await t.aclose()


async def test_refused_without_the_ca(server: FaultServer) -> None:
    server.route("GET", "/j", [Json(200, {})])
    t = AsyncioTransport(connect_timeout=5)  # the system's CAs don't know ours
    with pytest.raises(TransportError) as info:
        await fetch(t, server.url + "/j")
    assert info.value.kind == "connect"
    assert str(info.value) == f"the TLS certificate of 127.0.0.1:{server.port} was not accepted"
    assert not server.requests
    await t.aclose()


async def test_refused_for_another_name(ca: trustme.CA, ca_file: str) -> None:
    async with FaultServer(ssl=server_context(ca, "example.com")) as srv:
        srv.route("GET", "/j", [Json(200, {})])
        t = AsyncioTransport(connect_timeout=5, tls=ca_file)
        with pytest.raises(TransportError) as info:
            await fetch(t, srv.url + "/j")
        assert info.value.kind == "connect"
        await t.aclose()


async def test_plain_http_server_behind_an_https_url_is_a_connect_error() -> None:
    async with FaultServer() as srv:
        srv.route("GET", "/j", [Json(200, {})])
        t = AsyncioTransport(connect_timeout=0.5)  # the server waits for a request line
        with pytest.raises(TransportError) as info:
            await fetch(t, srv.url.replace("http://", "https://") + "/j")
        assert info.value.kind == "connect"
        await t.aclose()


async def test_a_missing_ca_file_is_a_connect_error(server: FaultServer, tmp_path: Path) -> None:
    t = AsyncioTransport(connect_timeout=5, tls=str(tmp_path / "nope.pem"))
    with pytest.raises(TransportError, match="cannot load the CA bundle") as info:
        await fetch(t, server.url + "/j")
    assert info.value.kind == "connect"
    await t.aclose()


async def test_https_default_port() -> None:
    t = AsyncioTransport()
    assert t._target("https://example.com/x")[0] == ("https", "example.com", 443)
    assert t._target("http://example.com/x")[0] == ("http", "example.com", 80)
    await t.aclose()


async def test_a_stall_over_tls(server: FaultServer, ca_file: str) -> None:
    server.route("GET", "/s", [Status(200), Chunk(b"a"), Hold()])
    t = AsyncioTransport(connect_timeout=5, tls=ca_file)
    response = await t.send("GET", server.url + "/s", {}, None, read_timeout=0.1)
    assert await response.read() == b"a"
    with pytest.raises(TransportError) as info:
        await response.read()
    assert info.value.kind == "stall"
    await response.aclose()
    await server.wait_disconnect(timeout=2.0)
    await t.aclose()


async def test_client_chat_over_https(server: FaultServer, ca_file: str) -> None:
    server.route("POST", CHAT, stream(chat_chunks(["Hel", "lo"]), delay=0.002))
    config = Config(server.url, tls=ca_file, transport="asyncio")
    transport = AsyncioTransport(config.connect_timeout, tls=config.tls)
    async with Client(config, transport=transport) as client:
        completion = await client.complete(ChatRequest([UserMessage("hi")]))
    assert completion.content == "Hello"
    await server.wait_closed_connections(timeout=5.0)


@pytest.mark.parametrize("transport", ["auto", "asyncio", "httpx"])
async def test_client_config_alone_selects_tls(
    server: FaultServer, ca_file: str, transport: str
) -> None:
    """``Config.tls`` (a CA bundle) is all it takes, on either stack."""
    server.route("POST", CHAT, stream(chat_chunks(["Hel", "lo"])))
    config = Config(server.url, tls=ca_file, transport=transport)  # type: ignore[arg-type]
    async with Client(config) as client:
        completion = await client.complete(ChatRequest([UserMessage("hi")]))
    assert completion.content == "Hello"
    assert repr(client).endswith(
        "transport=HttpxTransport)" if transport == "httpx" else "transport=AsyncioTransport)"
    )


async def test_an_unknown_certificate_is_refused_by_default(server: FaultServer) -> None:
    """Without ``tls`` the system's CAs are used: a self-signed server is a ConnectError."""
    server.route("POST", CHAT, stream(chat_chunks(["Hel", "lo"])))
    async with Client(Config(server.url, max_retries=0)) as client:
        with pytest.raises(ConnectError):
            await client.complete(ChatRequest([UserMessage("hi")]))
