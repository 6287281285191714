"""A transport over an ``httpx.AsyncClient``: yours (not closed by us), or one we make."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

import httpx

from .base import KEEPALIVE_SECONDS, Response, TransportError

__all__ = ["HttpxTransport"]


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
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        *,
        read_timeout: float | None = None,
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
