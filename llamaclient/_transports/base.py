"""The one small interface between the client and an HTTP stack.

A :class:`Transport` sends a request and returns a :class:`Response` once the status line and
headers are in; the body is read as raw byte chunks. Everything above it (SSE framing, the
assembler, retries, the slot line) is ours, so the HTTP stack is replaceable.

``send(..., read_timeout=s)`` bounds each body read: a ``read()`` that waits ``s`` seconds
with no byte at all fails with ``TransportError("stall")``. Time a caller spends between
reads (a slow consumer) never counts. Each stack enforces it the cheapest way it has (ours:
one lazily re-armed timer per connection; httpx: its read timeout), so the per-read path of
the client carries no timer or cancel scope.

Failures are reported as :class:`TransportError` with ``kind``:

- ``"connect"``: nothing reached the server (refused, unreachable, connect timeout, TLS);
- ``"disconnected"``: a reused keep-alive connection was closed before any response byte
  (the only failure that may be retried silently);
- ``"protocol"``: the response is not HTTP/1.1 as allowed (bad status line, headers or
  framing, an encoding we cannot decode);
- ``"read"``: the connection broke after the response had started;
- ``"stall"``: a read waited ``read_timeout`` with no byte.

Messages are our own text: never a third-party exception's repr (it may carry the request
headers, and so the API key).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, Protocol

__all__ = ["KEEPALIVE_SECONDS", "Response", "Transport", "TransportError", "TransportErrorKind"]

# llama-server closes idle keep-alive connections after 5 s; drop ours before that.
KEEPALIVE_SECONDS = 4.0

TransportErrorKind = Literal["connect", "disconnected", "protocol", "read", "stall"]


class TransportError(Exception):
    """A transport-level failure; ``kind`` says how far the request got."""

    def __init__(self, kind: TransportErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind: TransportErrorKind = kind


class Response(Protocol):
    """A response whose status and headers have arrived."""

    __slots__ = ()  # our stacks subclass it for ``aread``; their instances stay slotted

    @property
    def status(self) -> int: ...

    def header(self, name: str) -> str | None: ...

    async def read(self) -> bytes:
        """The next raw piece of the body as it arrives; ``b""`` at its end."""
        ...

    async def aread(self) -> bytes:
        """The rest of the body (for a stack that subclasses ``Response``: ``read()`` to the
        end)."""
        pieces: list[bytes] = []
        while data := await self.read():
            pieces.append(data)
        return b"".join(pieces)

    async def aclose(self) -> None:
        """Release the response; closes the connection unless the body was read to its end."""
        ...


class Transport(Protocol):
    async def send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        *,
        read_timeout: float | None = None,
    ) -> Response: ...

    async def aclose(self) -> None: ...
