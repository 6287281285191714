"""What FakeLlama answers with: a :class:`FakeResponse` plays its body steps on the fake
server's clock, behind the :class:`FakeTransport` a Client sends through."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

import anyio

from .._transports.base import Response, Transport, TransportError
from ._wire import Piece, dumps, error_body

__all__ = [
    "JSON",
    "Cut",
    "Fault",
    "FakeResponse",
    "FakeTransport",
    "Hold",
    "Raw",
    "Server",
    "Stall",
    "Step",
    "Timed",
    "error_response",
    "faulty",
    "json_response",
]

JSON = (("Content-Type", "application/json; charset=utf-8"),)


class Cut:
    """The connection breaks here."""


class Stall:
    """No more bytes, ever."""


class Hold:
    """No more bytes until ``event`` is set."""

    def __init__(self, event: anyio.Event) -> None:
        self.event = event


Step = bytes | Cut | Stall | Hold
Timed = tuple[float, Step]  # a step and when it is due, in seconds after the headers


class FakeResponse(Response):
    """A response of the fake server: its body steps are played on ``read()``, each when it
    is due on the server's clock (a wait longer than ``read_timeout`` is a stall)."""

    __slots__ = ("_headers", "_on_close", "_read_timeout", "_start", "_status", "_steps", "closed")

    fair_reads = True  # every read is a scheduling point

    def __init__(
        self,
        status: int,
        headers: Iterable[tuple[str, str]],
        steps: Iterable[Step | Timed],
        read_timeout: float | None,
    ) -> None:
        self._status = status
        self._headers = [(k.lower(), v) for k, v in headers]
        self._steps = deque(s if isinstance(s, tuple) else (0.0, s) for s in steps)
        self._read_timeout = read_timeout
        self._start: float | None = None  # when the headers were sent (the server's clock)
        self._on_close: Callable[[], None] | None = None
        self.closed = False

    @property
    def status(self) -> int:
        return self._status

    def header(self, name: str) -> str | None:
        name = name.lower()
        return next((v for k, v in self._headers if k == name), None)

    def add_header(self, name: str, value: str) -> None:
        """One more header (what a proxy in front of the server adds)."""
        self._headers.append((name.lower(), value))

    def started(self, now: float) -> FakeResponse:
        """Start the server's clock: each step is due its seconds after ``now``."""
        self._start = now
        return self

    def on_close(self, release: Callable[[], None]) -> FakeResponse:
        """Call ``release`` once, when the response is closed (the chat leaves its slot)."""
        self._on_close = release
        return self

    async def read(self) -> bytes:
        await anyio.lowlevel.checkpoint()
        if self.closed:
            raise TransportError("read", "the response was closed")
        while self._steps and isinstance(step := self._steps[0][1], Hold):
            await self._hold(step.event)
            self._steps.popleft()
        if not self._steps:
            return b""
        at, step = self._steps[0]
        await self._until(float("inf") if isinstance(step, Stall) else at)
        if isinstance(step, bytes):
            self._steps.popleft()
            return step
        raise TransportError("read", "FakeLlama: the connection was cut (scripted)")

    async def _hold(self, event: anyio.Event) -> None:
        """Wait for ``event``; longer than the read timeout is a stall, as on a socket."""
        with anyio.move_on_after(self._read_timeout):
            await event.wait()
        if not event.is_set():
            raise TransportError("stall", f"no bytes for {self._read_timeout} s")

    async def _until(self, at: float) -> None:
        """Wait for the step due ``at`` seconds after the headers; a wait longer than the
        read timeout is a stall, as on a socket."""
        if self._start is None:
            self._start = anyio.current_time()
        wait = self._start + at - anyio.current_time()
        if wait <= 0:
            return
        timeout = self._read_timeout
        if timeout is not None and wait > timeout:
            await anyio.sleep(timeout)
            raise TransportError("stall", f"no bytes for {timeout} s")
        if wait == float("inf"):
            await anyio.sleep_forever()
        await anyio.sleep(wait)

    async def aclose(self) -> None:
        self.closed = True
        release, self._on_close = self._on_close, None
        if release is not None:
            release()


class Server(Protocol):
    """A fake server: what answers the requests a :class:`FakeTransport` sends."""

    def _serve(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        read_timeout: float | None,
    ) -> FakeResponse: ...


class FakeTransport(Transport):
    """The :class:`~llamaclient.Transport` of a :class:`FakeLlama`."""

    def __init__(self, fake: Server) -> None:
        self._fake = fake

    async def send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        *,
        read_timeout: float | None = None,
    ) -> Response:
        await anyio.lowlevel.checkpoint()
        response = self._fake._serve(method, url, headers, body, read_timeout)
        return response.started(anyio.current_time())

    async def aclose(self) -> None:
        pass


def json_response(status: int, obj: object) -> FakeResponse:
    """A whole JSON answer."""
    return FakeResponse(status, JSON, [dumps(obj).encode()], None)


def error_response(status: int, message: str, type: str | None = None) -> FakeResponse:
    """llama-server's error answer (``Connection: close``, as after any status >= 400)."""
    headers = (*JSON, ("Connection", "close"))
    return FakeResponse(status, headers, [error_body(status, message, type)], None)


@dataclass
class Fault:
    """What :meth:`FakeLlama.fail` scripted for an answer."""

    cut_after: int | None = None
    stall: bool = False
    error: str | None = None
    status: int = 500
    prefill: float = 0.0
    hold: anyio.Event | None = None

    @property
    def breaks(self) -> bool:
        """Whether the stream ends early (cut, stall or in-band error)."""
        return self.cut_after is not None or self.stall or self.error is not None


@dataclass
class Raw:
    """A recorded answer: status, headers and the body's HTTP chunks."""

    status: int
    headers: tuple[tuple[str, str], ...]
    chunks: list[bytes]
    cut: bool


def faulty(chunks: list[Piece], fault: Fault | None) -> list[Timed]:
    """The steps of a streamed answer's ``chunks``, with its ``fault``."""
    steps: list[Timed] = [(p.at, p.data) for p in chunks]
    if fault is None:
        return steps
    if fault.breaks:
        n = _cut_index(chunks, fault.cut_after or 0)
        at = chunks[n].at  # the break comes instead of chunk n, when it was due
        end: Step = Stall() if fault.stall else Cut()
        if fault.error is not None:
            end = b"data: " + error_body(fault.status, fault.error) + b"\n\n"
        steps = [*steps[:n], (at, end)]
    if fault.hold is not None:
        steps.insert(0, (0.0, Hold(fault.hold)))
    return steps


def _cut_index(chunks: list[Piece], after: int) -> int:
    """How many HTTP chunks go out before the break: those with at most ``after`` tokens,
    never the final chunk (finish reason) or ``[DONE]``."""
    n = 0
    for piece in chunks[:-2]:
        if piece.tokens > after:
            break
        n += 1
    return n
