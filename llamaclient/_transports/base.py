"""The one small interface between the client and an HTTP stack, and its implementations.

A :class:`Transport` sends a request and returns a :class:`Response` once the status line and
headers are in; the body is read as raw byte chunks. Everything above it (SSE framing, the
assembler, timeouts, retries) is ours, so the HTTP stack is replaceable:

- ``AsyncioTransport`` (``_asyncio.py``), the default for ``http://``: HTTP/1.1 written on
  asyncio protocols, the lowest per-read cost measured (see ``docs/benchmarks.md``);
- ``AiohttpTransport`` (``_aiohttp.py``), the default for ``https://``;
- ``HttpxTransport`` (``_httpx.py``), over an ``httpx.AsyncClient`` (yours, or one we make).

Each is imported only when used, so ``import llamaclient`` stays cheap.

Failures are reported as :class:`TransportError` with ``kind``:
``"connect"`` (nothing reached the server), ``"disconnected"`` (the server closed the
connection before any response: a stale keep-alive connection), ``"read"`` (the body broke).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, Protocol

__all__ = ["KEEPALIVE_SECONDS", "Response", "Transport", "TransportError"]

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
