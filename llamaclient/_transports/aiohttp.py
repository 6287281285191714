"""The transport on aiohttp: the default for ``https://`` base URLs."""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp

from .base import KEEPALIVE_SECONDS, Response, TransportError

__all__ = ["AiohttpTransport"]


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
        content = self._response.content
        try:
            chunk = content.read_nowait()  # everything already buffered, without waiting
            if chunk:
                return chunk
            chunk = await content.readany()
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
    """A transport on an ``aiohttp.ClientSession`` it owns."""

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
