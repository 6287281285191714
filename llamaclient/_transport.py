"""The one small interface between the client and an HTTP stack, and its two implementations.

A :class:`Transport` sends a request and returns a :class:`Response` once the status line and
headers are in; the body is read as raw byte chunks. Everything above it (SSE framing, the
assembler, timeouts, retries) is ours, so the HTTP stack is replaceable:

- :class:`AiohttpTransport`, the default: aiohttp's per-read path is the cheapest measured
  (see ``docs/benchmarks.md``);
- :class:`HttpxTransport`, over an ``httpx.AsyncClient`` (yours, or one we make).

Failures are reported as :class:`TransportError` with ``kind``:
``"connect"`` (nothing reached the server), ``"disconnected"`` (the server closed the
connection before any response: a stale keep-alive connection), ``"read"`` (the body broke).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Literal, Protocol

import aiohttp
import httpx

__all__ = ["AiohttpTransport", "HttpxTransport", "Response", "Transport", "TransportError"]

# llama-server closes idle keep-alive connections after 5 s; drop ours before that.
KEEPALIVE_SECONDS = 4.0


class TransportError(Exception):
    """A transport-level failure; ``kind`` says how far the request got."""

    def __init__(self, kind: Literal["connect", "disconnected", "read"], message: str) -> None:
        super().__init__(message)
        self.kind = kind


class Response(Protocol):
    """A response whose status and headers have arrived."""

    @property
    def status(self) -> int: ...

    def header(self, name: str) -> str | None: ...

    async def read(self) -> bytes:
        """The next raw piece of the body as it arrives; ``b""`` at its end."""
        ...

    async def aread(self) -> bytes: ...

    async def aclose(self) -> None:
        """Release the response; closes the connection unless the body was read to its end."""
        ...


class Transport(Protocol):
    async def send(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None
    ) -> Response: ...

    async def aclose(self) -> None: ...


# -- aiohttp ---------------------------------------------------------------------------------
class _AiohttpResponse:
    __slots__ = ("_eof", "_response")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self._eof = False

    @property
    def status(self) -> int:
        return self._response.status

    def header(self, name: str) -> str | None:
        return self._response.headers.get(name)

    async def read(self) -> bytes:
        try:
            chunk = await self._response.content.readany()
        except (aiohttp.ClientError, OSError) as exc:
            raise TransportError("read", f"the response body broke: {exc!r}") from exc
        if not chunk:
            self._eof = True
        return chunk

    async def aread(self) -> bytes:
        try:
            data = await self._response.read()
        except (aiohttp.ClientError, OSError) as exc:
            raise TransportError("read", f"the response body broke: {exc!r}") from exc
        self._eof = True
        return data

    async def aclose(self) -> None:
        if self._eof:
            self._response.release()
        else:
            self._response.close()


class AiohttpTransport:
    """The default transport, on an ``aiohttp.ClientSession`` it owns."""

    def __init__(self, connect_timeout: float) -> None:
        self._connect_timeout = connect_timeout
        self._session: aiohttp.ClientSession | None = None

    def _get_session(self) -> aiohttp.ClientSession:
        # Made lazily: a ClientSession wants a running event loop.
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_SECONDS)
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(
                    total=None, sock_connect=self._connect_timeout, sock_read=None
                ),
                auto_decompress=False,
                skip_auto_headers=("User-Agent",),
            )
        return self._session

    async def send(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None
    ) -> Response:
        session = self._get_session()
        try:
            response = await session.request(method, url, headers=headers, data=body)
        except aiohttp.ServerDisconnectedError as exc:
            raise TransportError("disconnected", f"server disconnected: {exc}") from exc
        except aiohttp.ClientConnectorError as exc:
            raise TransportError("connect", f"cannot connect: {exc}") from exc
        except (aiohttp.ClientOSError, ConnectionError) as exc:
            raise TransportError("disconnected", f"connection lost: {exc!r}") from exc
        except TimeoutError as exc:
            raise TransportError("connect", "connect timed out") from exc
        except aiohttp.ClientError as exc:
            raise TransportError("disconnected", f"request failed: {exc!r}") from exc
        return _AiohttpResponse(response)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


# -- httpx -------------------------------------------------------------------------------------
class _HttpxResponse:
    __slots__ = ("_chunks", "_eof", "_response")

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self._chunks: AsyncIterator[bytes] | None = None
        self._eof = False

    @property
    def status(self) -> int:
        return self._response.status_code

    def header(self, name: str) -> str | None:
        value: str | None = self._response.headers.get(name)
        return value

    async def read(self) -> bytes:
        if self._chunks is None:
            self._chunks = self._response.aiter_raw().__aiter__()
        try:
            while True:
                chunk = await self._chunks.__anext__()
                if chunk:
                    return chunk
        except StopAsyncIteration:
            self._eof = True
            return b""
        except httpx.TransportError as exc:
            raise TransportError("read", f"the response body broke: {exc!r}") from exc

    async def aread(self) -> bytes:
        try:
            data = await self._response.aread()
        except httpx.TransportError as exc:
            raise TransportError("read", f"the response body broke: {exc!r}") from exc
        self._eof = True
        return data

    async def aclose(self) -> None:
        await self._response.aclose()


class HttpxTransport:
    """A transport over an ``httpx.AsyncClient``: the one you pass (not closed by us), or ours."""

    def __init__(self, client: httpx.AsyncClient | None = None, connect_timeout: float = 10.0):
        self._owned = client is None
        self._client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(None, connect=connect_timeout),
            limits=httpx.Limits(max_connections=None, keepalive_expiry=KEEPALIVE_SECONDS),
        )

    async def send(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None
    ) -> Response:
        request = self._client.build_request(method, url, headers=headers, content=body)
        try:
            response = await self._client.send(request, stream=True)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise TransportError("connect", f"cannot connect: {exc!r}") from exc
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            raise TransportError("disconnected", f"connection lost: {exc!r}") from exc
        except httpx.TransportError as exc:
            raise TransportError("disconnected", f"request failed: {exc!r}") from exc
        return _HttpxResponse(response)

    async def aclose(self) -> None:
        if self._owned:
            await self._client.aclose()
