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
- ``"timeout"``: with ``send(..., head_timeout=s)`` (our own stacks), no response head came
  within ``s`` seconds (the connection is closed: the server may have the request queued);
- ``"protocol"``: the response is not HTTP/1.1 as allowed (bad status line, headers or
  framing, an encoding we cannot decode);
- ``"read"``: the connection broke after the response had started;
- ``"stall"``: a read waited ``read_timeout`` with no byte.

Messages are our own text: never a third-party exception's repr (it may carry the request
headers, and so the API key). What each kind means to the caller is decided in one place,
``_turn/failures.py``.

A transport of your own implements ``send`` as below; the client then bounds the wait for
the head itself. Ours also take ``head_timeout=`` and enforce it the cheapest way they have
(one timer), because the wait for the head is part of every stream.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, Protocol

__all__ = [
    "KEEPALIVE_SECONDS",
    "Response",
    "TimedTransport",
    "Transport",
    "TransportError",
    "TransportErrorKind",
]

# llama-server closes idle keep-alive connections after 5 s; drop ours before that.
KEEPALIVE_SECONDS = 4.0

TransportErrorKind = Literal["connect", "disconnected", "timeout", "protocol", "read", "stall"]


class TransportError(Exception):
    """A transport-level failure; ``kind`` says how far the request got."""

    def __init__(self, kind: TransportErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind: TransportErrorKind = kind


class Response(Protocol):
    """A response whose status and headers have arrived.

    ``fair_reads``: a ``read()`` is a scheduling point, or hands out at once everything that
    came while the reader was suspended (so the next read waits): the events of one read are
    then all a reader can take without giving the loop a turn (ours on asyncio, the testing
    kit's). Other stacks' reads may not suspend (httpx hands out the chunks h11 already holds
    one by one): the client then counts every event. ``complete``: the whole body has
    arrived (``aclose()`` then pools the connection without another read).
    """

    __slots__ = ()  # our stacks subclass it for the defaults; their instances stay slotted

    @property
    def fair_reads(self) -> bool:
        return False

    @property
    def complete(self) -> bool:
        return False

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


class TimedTransport(Transport, Protocol):
    """Our own stacks: ``send`` also bounds the wait for the head (``head_timeout``)."""

    async def send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        *,
        read_timeout: float | None = None,
        head_timeout: float | None = None,
    ) -> Response: ...
