"""A real loopback HTTP/1.1 server that misbehaves on purpose, for fault-injection tests.

The server speaks just enough HTTP/1.1 to look like llama-server (``Server: llama.cpp``,
chunked ``text/event-stream`` bodies, ``Keep-Alive: timeout=5, max=100``, ``Connection:
close`` after any status >= 400, 5 s idle keep-alive timeout) and lets each test script,
step by step, what goes on the wire: status line and headers, HTTP chunks, raw bytes,
pauses, clean closes, TCP resets, never answering, and so on.

Usage::

    async with FaultServer() as srv:
        srv.route(
            "POST",
            "/v1/chat/completions",
            [Status(200), *chat_chunks(["Hel", "lo"]), End()],
        )
        async with httpx.AsyncClient(base_url=srv.url) as client:
            ...
        assert srv.requests[0].json()["stream"] is True

A *script* is a sequence of steps (``bytes`` is shorthand for :class:`Chunk`). A route can
be given several scripts (or handlers): successive requests get successive scripts and the
last one repeats. A *handler* is a callable taking the :class:`Request` and returning a
script (or an awaitable of one).

While a response is being produced the server keeps reading the socket, so a client that
closes the connection (or half-closes it, like llama-server sees it) is noticed at once:
the script stops, the connection is closed and a :class:`Disconnect` is recorded
(:attr:`FaultServer.disconnects`, :meth:`FaultServer.wait_disconnect`).

Everything is bounded by timeouts, and leaving the ``async with`` block closes every
socket and awaits every task the server started. Mistakes in scripts or handlers are
collected in :attr:`FaultServer.errors` and raised as :class:`FaultServerError` on exit.

The server itself always runs on asyncio. Entered from an asyncio task it runs in that
task's own event loop; entered from trio (or with ``thread=True``) it runs in an asyncio
loop of its own, in a background thread, and the same object is used the same way: the
sync methods (:meth:`FaultServer.route`) and the records (``requests``, ``disconnects``,
``connections``) are read and written directly, the async ones (``wait_*``) are awaited
from the caller's event loop while they run in the server's. Handlers, :class:`Call` and
:class:`Wait` steps run in the server's loop: a test that releases a :class:`Wait` from its
own code uses a :class:`Gate` (safe from any thread), not an ``asyncio.Event``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import json
import math
import socket
import ssl as _ssl
import struct
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from types import TracebackType
from typing import Any, ClassVar, TypeAlias, TypeVar

import anyio

from llamaclient.testing import _wire as wire

__all__ = [
    "DONE",
    "PING",
    "Call",
    "Chunk",
    "Close",
    "ConnectionInfo",
    "Disconnect",
    "End",
    "FaultServer",
    "FaultServerError",
    "Gate",
    "Handler",
    "Headers",
    "Hold",
    "Json",
    "Raw",
    "Request",
    "Reset",
    "Response",
    "Route",
    "Script",
    "Sleep",
    "Status",
    "Step",
    "Wait",
    "chat_chunk",
    "chat_chunks",
    "error_body",
    "error_event",
    "refused_url",
    "sse",
    "stream",
    "timings",
]

# --------------------------------------------------------------------------------------
# SSE / llama-server payload helpers
# --------------------------------------------------------------------------------------

DONE: bytes = wire.DONE
"""The end-of-stream event llama-server sends in its own HTTP chunk."""

PING: bytes = b":\n\n"
"""llama-server's keep-alive ping: an SSE comment with an empty body (not ``: ping``)."""

DEFAULT_MODEL = "gemma-3-270m-it"
DEFAULT_ID = "chatcmpl-" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345"
DEFAULT_CREATED = 1760000000
DEFAULT_FINGERPRINT = "b6000-515e85511"
PROMPT_SPEED, SPEED = 2.5, 10.0  # ms a prompt token, ms a generated token, in the timings

# The chunks are built by the testing kit's one builder (llamaclient/testing/_wire.py):
# these are its functions with this server's defaults.
_dumps = wire.dumps
sse = wire.sse
error_body = wire.error_envelope


def error_event(message: str = "Compute error.", code: int = 500, type: str | None = None) -> bytes:
    """Return an in-band error event (sent after the stream started; no ``[DONE]`` follows)."""
    return sse(error_body(code, message, type))


def _chunk_head(model: str, id: str, created: int) -> wire.Head:
    return wire.Head(id, model, created, DEFAULT_FINGERPRINT)


def chat_chunk(
    delta: Mapping[str, Any] | None,
    *,
    finish_reason: str | None = None,
    index: int = 0,
    model: str = DEFAULT_MODEL,
    id: str = DEFAULT_ID,
    created: int = DEFAULT_CREATED,
    **fields: Any,
) -> dict[str, Any]:
    """Return one ``chat.completion.chunk`` object with llama-server's key order.

    ``delta=None`` gives ``"choices":[]`` (the shape of the usage chunk). ``usage``,
    ``timings``, ``prompt_progress`` and other keys are appended at the end only when given.
    """
    head = _chunk_head(model, id, created)
    return wire.chunk(delta, finish_reason, head=head, index=index, **fields)


def timings(predicted_n: int, prompt_n: int = 20, cache_n: int = 0) -> dict[str, Any]:
    """The ``timings`` of this server's streams: 2.5 ms a prompt token, 10 ms a token."""
    return wire.timings(cache_n, prompt_n, predicted_n, prompt_speed=PROMPT_SPEED, speed=SPEED)


def chat_chunks(
    content: str | Sequence[str] = ("Hello", " world"),
    *,
    reasoning: str | Sequence[str] = (),
    finish_reason: str | None = "stop",
    usage: bool = True,
    timings: bool = True,
    role: bool = True,
    done: bool = True,
    model: str = DEFAULT_MODEL,
    id: str = DEFAULT_ID,
    created: int = DEFAULT_CREATED,
    prompt_tokens: int = 20,
    cached_tokens: int = 0,
) -> list[bytes]:
    """Build a realistic llama-server chat stream; each list item is one HTTP chunk.

    Shape (one generated token per delta, ``timings_per_token`` style when ``timings``):

    1. The first token's result: the role delta ``{"role":"assistant","content":null}``
       followed by that token's delta, both in the same chunk; ``timings`` only on the
       second event (``role=False`` drops the role delta).
    2. One chunk per further delta (``reasoning`` deltas first, then ``content``), each
       with ``timings`` (``predicted_n`` counting up).
    3. The final result in one chunk: the finish chunk (``delta == {}``) and, with
       ``usage``, the usage chunk (``choices == []``); ``timings`` on the last of them.
       ``finish_reason=None`` leaves the final result out (a truncated generation).
    4. ``data: [DONE]\n\n`` in its own chunk (unless ``done=False``).
    """
    reasoning_parts = [reasoning] if isinstance(reasoning, str) else list(reasoning)
    content_parts = [content] if isinstance(content, str) else list(content)
    deltas: list[dict[str, Any]] = [{"reasoning_content": r} for r in reasoning_parts if r]
    deltas += [{"content": c} for c in content_parts if c]
    layout = wire.Layout(_chunk_head(model, id, created), prompt_tokens, cached_tokens,
                         per_token=timings, usage=usage, prompt_speed=PROMPT_SPEED, speed=SPEED)
    return [p.data for p in layout.pieces(deltas, finish_reason, role=role, done=done)]


# --------------------------------------------------------------------------------------
# Script steps
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Status:
    """Write the status line and headers.

    With ``chunked=True`` (default) the llama-server streaming headers are sent:
    ``Server: llama.cpp``, ``X-Accel-Buffering: no``, ``Content-Type: text/event-stream``,
    ``Transfer-Encoding: chunked`` and ``Keep-Alive: timeout=5, max=100`` (or
    ``Connection: close`` when the connection will be closed: status >= 400, or the
    client sent ``Connection: close``). With ``chunked=False`` only ``Server`` and the
    keep-alive header are defaults; the body is then raw bytes (give a ``Content-Length``
    header, or end with :class:`Close` for a read-until-close body).

    ``headers`` are added after the defaults; a header with the same name (any case)
    replaces the default, and a value of ``None`` removes it.
    """

    code: int = 200
    headers: Mapping[str, str | None] | None = None
    chunked: bool = True
    reason: str | None = None


@dataclass(frozen=True)
class Chunk:
    """Write one HTTP chunk (``<hex len>\\r\\n<data>\\r\\n``) in a single write.

    Before :class:`Status`, in a non-chunked response, or with ``raw=True`` the bytes are
    written as they are, without chunk framing. An empty chunk writes nothing (use
    :class:`End` for the terminator).
    """

    data: bytes
    raw: bool = False


def Raw(data: bytes) -> Chunk:
    """Write ``data`` as it is, without chunk framing (shorthand for ``Chunk(data, raw=True)``)."""
    return Chunk(data, raw=True)


@dataclass(frozen=True)
class Sleep:
    """Pause for ``seconds`` (a client disconnect during the pause is noticed at once)."""

    seconds: float


@dataclass(frozen=True)
class Close:
    """Flush and close the socket cleanly (FIN), even mid-body without the terminator."""


@dataclass(frozen=True)
class Reset:
    """Flush, then abort the connection with a TCP RST (``SO_LINGER`` 0)."""


@dataclass(frozen=True)
class End:
    """Finish the response: write the chunked terminator ``0\\r\\n\\r\\n`` if chunked.

    The connection is then kept alive for the next request unless it must close (status
    >= 400, client asked to close, non-chunked body without ``Content-Length``). After a
    hand-made response written with :func:`Raw` (no :class:`Status`), ``End()`` writes
    nothing and just declares the response complete, so the connection is kept alive.
    A script that runs out before its response is complete closes the connection.
    """


@dataclass(frozen=True)
class Hold:
    """Never answer: wait until the client disconnects (or ``timeout``/the server's
    ``hold_timeout`` passes; then the connection is closed)."""

    timeout: float | None = None


@dataclass(frozen=True)
class Response:
    """A complete response with ``Content-Length``.

    ``Connection: close`` is sent for status >= 400 (and the connection is closed after),
    ``Keep-Alive: timeout=5, max=100`` otherwise. ``headers`` override the defaults like
    in :class:`Status`.
    """

    code: int = 200
    body: bytes = b""
    content_type: str | None = "text/plain; charset=utf-8"
    headers: Mapping[str, str | None] | None = None
    reason: str | None = None


def Json(
    code: int,
    obj: Any,
    headers: Mapping[str, str | None] | None = None,
) -> Response:
    """A complete JSON response like llama-server's (compact JSON, ``Content-Length``,
    ``Content-Type: application/json; charset=utf-8``, ``Connection: close`` if >= 400)."""
    return Response(
        code=code,
        body=_dumps(obj).encode("utf-8"),
        content_type="application/json; charset=utf-8",
        headers=headers,
    )


class Gate:
    """A flag for :class:`Wait` steps that may be set from any thread or event loop.

    An ``asyncio.Event`` only works in the loop that waits on it; a test whose server runs
    in a thread of its own (under trio) releases a :class:`Wait` with a gate instead.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flag = False
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        """Set the flag and wake every waiter (safe from any thread)."""
        with self._lock:
            self._flag = True
            waiters, self._waiters = self._waiters, []
        for loop, event in waiters:
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
                loop.call_soon_threadsafe(event.set)

    async def wait(self) -> bool:
        """Wait (in an asyncio loop: the server's) until the flag is set."""
        with self._lock:
            if self._flag:
                return True
            event = asyncio.Event()
            self._waiters.append((asyncio.get_running_loop(), event))
        await event.wait()
        return True

    def __repr__(self) -> str:
        return f"Gate(set={self._flag})"


@dataclass(frozen=True)
class Wait:
    """Pause until ``event`` is set (bounded by ``timeout`` or the server's
    ``hold_timeout``; running out is recorded as an error).

    ``event`` is a :class:`Gate` (settable from anywhere) or an ``asyncio.Event`` (only
    when the server runs in the caller's own asyncio loop)."""

    event: Gate | asyncio.Event
    timeout: float | None = None


@dataclass(frozen=True)
class Call:
    """Call ``fn()`` (awaiting the result if it is awaitable), e.g. to signal the test."""

    fn: Callable[[], object]


def stream(
    events: Iterable[bytes],
    *,
    code: int = 200,
    headers: Mapping[str, str | None] | None = None,
    delay: float = 0.0,
    end: bool = True,
) -> list[Step]:
    """Return ``[Status(code, headers), Chunk(e1), Sleep(delay), Chunk(e2), ..., End()]``.

    ``delay`` pauses between chunks (not before the first); ``end=False`` leaves the body
    unterminated, so the script running out closes the connection mid-body.
    """
    steps: list[Step] = [Status(code, headers)]
    for i, event in enumerate(events):
        if i and delay:
            steps.append(Sleep(delay))
        steps.append(Chunk(event))
    if end:
        steps.append(End())
    return steps


# --------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------


class Headers(Mapping[str, str]):
    """Case-insensitive, order-preserving header view; repeated headers are joined by
    ``", "`` on lookup, :meth:`get_list` gives them separately."""

    def __init__(self, items: Iterable[tuple[str, str]] = ()) -> None:
        self._items: list[tuple[str, str]] = list(items)

    def __getitem__(self, key: str) -> str:
        values = self.get_list(key)
        if not values:
            raise KeyError(key)
        return ", ".join(values)

    def __iter__(self) -> Iterator[str]:
        seen: set[str] = set()
        for name, _ in self._items:
            if name.lower() not in seen:
                seen.add(name.lower())
                yield name

    def __len__(self) -> int:
        return len({name.lower() for name, _ in self._items})

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and any(n.lower() == key.lower() for n, _ in self._items)

    def get_list(self, key: str) -> list[str]:
        """All values of header ``key`` (any case), in order."""
        k = key.lower()
        return [v for n, v in self._items if n.lower() == k]

    def raw(self) -> list[tuple[str, str]]:
        """The headers as received: (name, value) pairs in order."""
        return list(self._items)

    def __repr__(self) -> str:
        return f"Headers({self._items!r})"


@dataclass
class Request:
    """A request the server received (recorded before its script runs)."""

    method: str
    target: str
    """The raw request target, e.g. ``/v1/chat/completions?x=1``."""
    path: str
    query: str
    version: str
    headers: Headers
    body: bytes
    time: float
    """``time.monotonic()`` when the request was fully received."""
    conn_id: int
    """Id of the connection (1, 2, ... in accept order); equal ids mean keep-alive reuse."""
    index_on_conn: int
    """0 for the first request on its connection, 1 for the next, ..."""
    outcome: str | None = None
    """How the response ended: ``"complete"``, ``"closed"`` (Close step, or the script
    ran out mid-response), ``"reset"``, ``"disconnected"`` (client went away),
    ``"hold_timeout"``, ``"write_timeout"``, ``"error"``, ``"shutdown"``;
    ``None`` while in progress."""
    finished: float | None = None
    """``time.monotonic()`` when the outcome was set."""

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)


Step: TypeAlias = (
    Status | Chunk | Sleep | Close | Reset | End | Hold | Response | Wait | Call | bytes
)
"""One script step; ``bytes`` is shorthand for :class:`Chunk`."""

Script: TypeAlias = Sequence[Step]
"""A list of steps applied to one request."""

Handler: TypeAlias = Callable[[Request], Script | Awaitable[Script]]
"""Callable deciding the script from the request (sync or async)."""


@dataclass(frozen=True)
class Disconnect:
    """The client closed (or half-closed, or reset) the connection mid-response."""

    request: Request
    time: float
    """``time.monotonic()`` when the server noticed."""
    step: int
    """Index of the script step that was running or about to run (-1: before the script)."""
    reset: bool
    """True if the client reset the connection rather than closing it."""


@dataclass
class ConnectionInfo:
    """One accepted connection."""

    id: int
    peer: tuple[str, int]
    opened: float
    requests: int = 0
    closed: float | None = None
    close_reason: str | None = None
    """``"client"`` (client closed while idle or while sending a request),
    ``"disconnect"`` (client closed mid-response), ``"idle"`` (keep-alive timeout),
    ``"close"`` (script Close, the script ran out mid-response, or a response that ends
    the connection), ``"reset"``, ``"bad_request"``, ``"max_requests"``, ``"timeout"``,
    ``"error"``, ``"shutdown"``."""


class FaultServerError(AssertionError):
    """Raised on exit when scripts or handlers failed (see :attr:`FaultServer.errors`)."""


@dataclass
class Route:
    """A programmed route; successive requests take successive responses, the last
    one repeating."""

    method: str
    path: str
    responses: list[Script | Handler]
    calls: int = 0
    """Number of requests this route received."""

    def next(self) -> Script | Handler:
        """The script or handler for the next request."""
        item = self.responses[min(self.calls, len(self.responses) - 1)]
        self.calls += 1
        return item


# --------------------------------------------------------------------------------------
# Connection plumbing
# --------------------------------------------------------------------------------------


_T = TypeVar("_T")


class _Expired(Exception):
    """A bounded wait ran out of time."""


async def _bounded(aw: Awaitable[_T], seconds: float | None, what: str = "wait") -> _T:
    """Await ``aw`` for at most ``seconds`` (``None``: no bound), cancelling it on expiry.

    Raises :class:`_Expired` instead of a timeout error, so the behaviour is the same on
    Python 3.10 (where ``asyncio.TimeoutError`` is not the builtin) and later.
    """
    fut = asyncio.ensure_future(aw)
    try:
        done, _ = await asyncio.wait({fut}, timeout=seconds)
    finally:
        if not fut.done():
            fut.cancel()
            await asyncio.gather(fut, return_exceptions=True)
        elif not fut.cancelled():
            fut.exception()  # retrieved even when we leave by a cancel: no "never retrieved"
    if not done:
        raise _Expired(f"{what} did not finish within {seconds}s")
    return fut.result()


class _PeerClosed(Exception):
    """The client closed the connection while the server was reading."""


class _ReadTimeout(Exception):
    """Reading from the client timed out."""


class _BadRequest(Exception):
    """The request could not be parsed."""


class _Conn:
    """One connection: a pump task reads the socket into ``buf`` continuously, so EOF
    (client disconnect) is noticed even while the server is writing or sleeping."""

    def __init__(
        self,
        info: ConnectionInfo,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.info = info
        self.reader = reader
        self.writer = writer
        self.buf = bytearray()
        self.eof = asyncio.Event()
        self.eof_time: float | None = None
        self.reset_by_peer = False
        self._more = asyncio.Event()
        self.pump_task: asyncio.Task[None] | None = None

    async def pump(self) -> None:
        """Read everything the client sends until EOF or error."""
        try:
            while True:
                data = await self.reader.read(65536)
                if not data:
                    break
                self.buf += data
                self._more.set()
        except OSError:
            self.reset_by_peer = True
        finally:
            if self.eof_time is None:
                self.eof_time = time.monotonic()
            self.eof.set()
            self._more.set()

    async def fill(self, ready: Callable[[], bool], seconds: float | None) -> None:
        """Wait until ``ready()`` holds for the buffer.

        Raises :class:`_PeerClosed` on EOF and :class:`_ReadTimeout` after ``seconds``.
        """
        loop = asyncio.get_running_loop()
        deadline = None if seconds is None else loop.time() + seconds
        while not ready():
            if self.eof.is_set():
                raise _PeerClosed
            self._more.clear()
            remaining = None if deadline is None else max(0.0, deadline - loop.time())
            try:
                await _bounded(self._more.wait(), remaining)
            except _Expired:
                raise _ReadTimeout from None

    async def read_until(self, sep: bytes, seconds: float | None, limit: int) -> bytes:
        """Read up to and including ``sep``."""

        def ready() -> bool:
            if len(self.buf) > limit and sep not in self.buf:
                raise _BadRequest("header section too large")
            return sep in self.buf

        await self.fill(ready, seconds)
        i = self.buf.index(sep) + len(sep)
        data = bytes(self.buf[:i])
        del self.buf[:i]
        return data

    async def read_exactly(self, n: int, seconds: float | None) -> bytes:
        """Read exactly ``n`` bytes."""
        await self.fill(lambda: len(self.buf) >= n, seconds)
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data

    async def wait_eof(self, seconds: float | None) -> bool:
        """Wait up to ``seconds`` for the client to go away; True if it did."""
        try:
            await _bounded(self.eof.wait(), seconds)
        except _Expired:
            return False
        return True


@dataclass
class _Exchange:
    """State of the response being written for one request."""

    request: Request
    must_close: bool
    status: int | None = None
    chunked: bool = False
    has_length: bool = False
    complete: bool = False
    raw: bool = False
    """Raw bytes were written before any Status (a hand-made response)."""
    step: int = -1


_STREAM_HEADERS: tuple[tuple[str, str], ...] = (
    ("Server", "llama.cpp"),
    ("X-Accel-Buffering", "no"),
    ("Content-Type", "text/event-stream"),
    ("Transfer-Encoding", "chunked"),
)

_MAX_HEAD = 64 * 1024
_MAX_BODY = 100 * 1024 * 1024

_NOT_FOUND_BODY = {"error": {"message": "File Not Found", "type": "not_found_error", "code": 404}}


def _merge_headers(
    defaults: Sequence[tuple[str, str]], overrides: Mapping[str, str | None] | None
) -> list[tuple[str, str]]:
    result = list(defaults)
    for name, value in (overrides or {}).items():
        result = [(n, v) for n, v in result if n.lower() != name.lower()]
        if value is not None:
            result.append((name, value))
    return result


def _status_line(code: int, reason: str | None) -> bytes:
    if reason is None:
        try:
            reason = HTTPStatus(code).phrase
        except ValueError:
            reason = "Unknown"
    return f"HTTP/1.1 {code} {reason}\r\n".encode("latin-1")


def _head(code: int, reason: str | None, headers: Sequence[tuple[str, str]]) -> bytes:
    lines = b"".join(f"{n}: {v}\r\n".encode("latin-1") for n, v in headers)
    return _status_line(code, reason) + lines + b"\r\n"


class _StepError(Exception):
    """A script was wrong (recorded in ``FaultServer.errors``)."""


@dataclass(frozen=True)
class _Stop:
    """A step ended the response itself (its outcome is already set); ``reason`` is what
    the script returns (``"close"``, ``"reset"``, ``"timeout"``)."""

    reason: str


_StepResult: TypeAlias = bool | str | _Stop
"""What a step handler returns: True to go on, False when the client is gone,
``"timeout"`` when a write stalled, or a :class:`_Stop`."""

_StepHandler: TypeAlias = (
    "Callable[[FaultServer, _Conn, _Exchange, int, Any], Awaitable[_StepResult]]"
)
"""A ``FaultServer._step_*`` method: (server, conn, exchange, step index, step)."""


# --------------------------------------------------------------------------------------
# Hosting the server in a thread of its own (for callers that are not on asyncio)
# --------------------------------------------------------------------------------------


def _in_asyncio() -> bool:
    """True when the caller runs in an asyncio event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class _LoopThread:
    """An asyncio event loop running in a daemon thread of its own."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="FaultServer loop", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            try:
                pending = asyncio.all_tasks(self.loop)
                for task in pending:
                    task.cancel()
                if pending:
                    self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
                self.loop.run_until_complete(self.loop.shutdown_default_executor())
            finally:
                asyncio.set_event_loop(None)
                self.loop.close()

    def on_loop(self) -> bool:
        """True when called from the loop's own thread."""
        return threading.current_thread() is self._thread

    def submit(self, aw: Awaitable[_T]) -> concurrent.futures.Future[_T]:
        """Run ``aw`` in the loop; its result (or error) comes in the returned future."""

        async def run() -> _T:
            return await aw

        return asyncio.run_coroutine_threadsafe(run(), self.loop)

    def close(self) -> None:
        """Stop the loop and wait for the thread to end (the loop closes there)."""
        with contextlib.suppress(RuntimeError):  # already closed
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10.0)


async def _await_future(fut: concurrent.futures.Future[_T]) -> _T:
    """Await a future completed in another thread, from asyncio or from trio.

    Cancelling the wait cancels the future (and so the coroutine behind it)."""
    if _in_asyncio():
        return await asyncio.wrap_future(fut)
    import trio  # the only other loop the tests run on

    token = trio.lowlevel.current_trio_token()
    done = trio.Event()

    def wake(_: object) -> None:
        with contextlib.suppress(trio.RunFinishedError):
            token.run_sync_soon(done.set)

    fut.add_done_callback(wake)
    try:
        await done.wait()
    except BaseException:
        fut.cancel()
        raise
    return fut.result()


# --------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------


class FaultServer:
    """Loopback HTTP/1.1 server whose responses are scripted per route.

    Args:
        host: Address to bind (loopback by default).
        port: Port to bind; 0 picks a free one.
        idle_timeout: Close a keep-alive connection after this many idle seconds while
            waiting for the next request, like llama-server's 5 s; ``None`` waits until
            the client closes (or the server stops).
        read_timeout: Bound for receiving the rest of a request once it started.
        write_timeout: Bound for one write to be flushed (a client not reading).
        hold_timeout: Default bound for :class:`Hold`, :class:`Wait` and async handlers.
        keep_alive_max: Requests per connection before ``Connection: close`` (100).
        raise_errors: Raise :class:`FaultServerError` on exit if :attr:`errors` is
            non-empty (and no other exception is propagating).
        thread: Run in an asyncio loop of its own, in a background thread (``True``), or in
            the caller's asyncio loop (``False``). ``None`` (default): in the caller's loop
            when the caller runs on asyncio, in a thread otherwise (trio).
        ssl: Serve HTTPS with this server context (:attr:`url` is then ``https://``).
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        idle_timeout: float | None = 5.0,
        read_timeout: float = 10.0,
        write_timeout: float = 10.0,
        hold_timeout: float = 30.0,
        keep_alive_max: int = 100,
        raise_errors: bool = True,
        thread: bool | None = None,
        ssl: _ssl.SSLContext | None = None,
    ) -> None:
        self.host = host
        self.ssl = ssl
        self._port = port
        self.idle_timeout = idle_timeout
        self.read_timeout = read_timeout
        self.write_timeout = write_timeout
        self.hold_timeout = hold_timeout
        self.keep_alive_max = keep_alive_max
        self.raise_errors = raise_errors
        self.thread = thread

        self.requests: list[Request] = []
        """Every request received, in order (including unrouted ones)."""
        self.disconnects: list[Disconnect] = []
        """Client disconnects noticed mid-response, in order."""
        self.connections: list[ConnectionInfo] = []
        """Every accepted connection, in accept order."""
        self.errors: list[BaseException] = []
        """Exceptions from scripts and handlers (test bugs), raised on exit."""

        self._routes: dict[tuple[str, str], Route] = {}
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._conns: dict[int, _Conn] = {}
        self._changed: asyncio.Event | None = None
        self._closing = False
        self._host: _LoopThread | None = None

    # ----------------------------------------------------------------- lifecycle

    @property
    def threaded(self) -> bool:
        """True while the server runs in a thread (an asyncio loop) of its own."""
        return self._host is not None

    async def start(self) -> FaultServer:
        """Start listening (the ``async with`` form calls this)."""
        if self._server is not None or self._host is not None:
            raise RuntimeError("FaultServer already started")
        if self.thread if self.thread is not None else not _in_asyncio():
            host = _LoopThread()
            try:
                await _await_future(host.submit(self._start()))
            except BaseException:
                host.close()
                raise
            self._host = host
        else:
            await self._start()
        return self

    async def _start(self) -> None:
        self._changed = asyncio.Event()
        self._server = await asyncio.start_server(
            self._on_connect, self.host, self._port, ssl=self.ssl
        )

    async def stop(self) -> None:
        """Stop listening, abort every connection and await every task (and, when the
        server runs in a thread of its own, end that thread)."""
        host = self._host
        if host is None or host.on_loop():
            await self._stop()
            return
        try:
            # Shielded: a cancelled test still closes its server and thread.
            with anyio.CancelScope(shield=True):
                await _await_future(host.submit(self._stop()))
        finally:
            self._host = None
            host.close()

    async def _stop(self) -> None:
        self._closing = True
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await asyncio.sleep(0)  # let just-accepted connections register their tasks
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5.0)
        for conn in list(self._conns.values()):  # only if a task failed to clean up
            conn.writer.transport.abort()
        if server is not None:
            with contextlib.suppress(_Expired):
                await _bounded(server.wait_closed(), 5.0)

    async def __aenter__(self) -> FaultServer:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
        if exc is None and self.raise_errors and self.errors:
            details = "; ".join(f"{type(e).__name__}: {e}" for e in self.errors)
            raise FaultServerError(f"{len(self.errors)} fault server error(s): {details}") from (
                self.errors[0]
            )

    # ----------------------------------------------------------------- addresses

    @property
    def port(self) -> int:
        """The bound port."""
        if self._server is None or not self._server.sockets:
            raise RuntimeError("FaultServer is not running")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:PORT`` (no trailing slash; ``https`` with
        ``ssl``)."""
        scheme = "https" if self.ssl is not None else "http"
        return f"{scheme}://{self.host}:{self.port}"

    # ----------------------------------------------------------------- programming

    def route(self, method: str, path: str, *responses: Script | Handler) -> Route:
        """Program ``method path`` (path matched exactly, without the query string).

        Each of ``responses`` is a script or a handler; request *k* gets response *k*
        and the last one repeats. Calling again for the same method and path replaces
        the route. ``route("*", "*", ...)`` takes every request no other route takes;
        unrouted requests get llama-server's JSON ``404``.
        """
        if not responses:
            raise ValueError("route() needs at least one script or handler")
        r = Route(method.upper(), path, list(responses))
        self._routes[(r.method, path)] = r
        return r

    # ----------------------------------------------------------------- observing

    @property
    def connections_accepted(self) -> int:
        """Number of connections accepted so far."""
        return len(self.connections)

    @property
    def connections_open(self) -> int:
        """Number of connections currently open."""
        return sum(1 for c in self.connections if c.closed is None)

    async def wait_for(
        self,
        predicate: Callable[[], bool],
        timeout: float = 5.0,  # noqa: ASYNC109 - an explicit bound reads best in tests
    ) -> None:
        """Wait until ``predicate()`` is true; it is re-checked whenever the server's state
        changes (request, outcome, disconnect, connection opened/closed).

        Raises:
            TimeoutError: after ``timeout`` seconds.
        """
        host = self._host
        if host is not None and not host.on_loop():
            # ``predicate`` runs in the server's thread, next to the state it reads.
            await _await_future(host.submit(self.wait_for(predicate, timeout)))
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate():
            assert self._changed is not None, "FaultServer is not running"
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(f"FaultServer.wait_for: condition not met in {timeout}s")
            try:
                await _bounded(self._changed.wait(), remaining)
            except _Expired:
                raise TimeoutError(
                    f"FaultServer.wait_for: condition not met in {timeout}s"
                ) from None

    async def wait_disconnect(self, n: int = 1, timeout: float = 5.0) -> Disconnect:  # noqa: ASYNC109
        """Wait until at least ``n`` mid-response client disconnects were noticed; return
        the ``n``-th. Raises :class:`TimeoutError` after ``timeout`` seconds."""
        try:
            await self.wait_for(lambda: len(self.disconnects) >= n, timeout)
        except TimeoutError:
            raise TimeoutError(
                f"expected {n} client disconnect(s) within {timeout}s, saw {len(self.disconnects)}"
            ) from None
        return self.disconnects[n - 1]

    async def wait_requests(self, n: int = 1, timeout: float = 5.0) -> Request:  # noqa: ASYNC109
        """Wait until at least ``n`` requests were received; return the ``n``-th."""
        try:
            await self.wait_for(lambda: len(self.requests) >= n, timeout)
        except TimeoutError:
            raise TimeoutError(
                f"expected {n} request(s) within {timeout}s, saw {len(self.requests)}"
            ) from None
        return self.requests[n - 1]

    async def wait_closed_connections(self, timeout: float = 5.0) -> None:  # noqa: ASYNC109
        """Wait until no connection is open."""
        await self.wait_for(lambda: self.connections_open == 0, timeout)

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = asyncio.Event()

    # ----------------------------------------------------------------- connections

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        peer = writer.get_extra_info("peername") or ("?", 0)
        info = ConnectionInfo(
            len(self.connections) + 1, (str(peer[0]), int(peer[1])), time.monotonic()
        )
        self.connections.append(info)
        conn = _Conn(info, reader, writer)
        self._conns[info.id] = conn
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # Make every drain() wait until the transport buffer is empty (handed to the
        # kernel), so each scripted write goes out before the next step runs. Not over TLS:
        # asyncio's TLS transport (3.11) with a zero high-water mark garbles the stream
        # from the third write on (the client reads a close_notify); there a drain() may
        # return with the write still in the TLS layer's buffer.
        if self.ssl is None:
            writer.transport.set_write_buffer_limits(high=0)
        conn.pump_task = asyncio.create_task(conn.pump())
        self._notify()
        reason = "close"
        try:
            if self._closing:
                reason = "shutdown"
            else:
                reason = await self._serve(conn)
        except asyncio.CancelledError:
            reason = "shutdown"
            self._finish_open(conn, "shutdown")
            raise
        except Exception as e:  # pragma: no cover - defensive: a bug in this module
            self.errors.append(e)
            reason = "error"
            self._finish_open(conn, "error")
        finally:
            try:
                await self._teardown(conn, reset=(reason == "reset"))
            finally:
                info.close_reason = info.close_reason or reason
                info.closed = time.monotonic()
                self._conns.pop(info.id, None)
                if task is not None:
                    self._tasks.discard(task)
                self._notify()

    def _finish_open(self, conn: _Conn, outcome: str) -> None:
        for req in self.requests:
            if req.conn_id == conn.info.id and req.outcome is None:
                self._set_outcome(req, outcome)

    def _set_outcome(self, req: Request, outcome: str) -> None:
        req.outcome = outcome
        req.finished = time.monotonic()
        self._notify()

    async def _teardown(self, conn: _Conn, *, reset: bool) -> None:
        writer = conn.writer
        if reset:
            sock = writer.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        elif self._closing:
            writer.transport.abort()
        else:
            writer.close()
        try:
            await _bounded(writer.wait_closed(), 2.0)
        except (OSError, _Expired):
            writer.transport.abort()
        except asyncio.CancelledError:
            writer.transport.abort()
            raise
        finally:
            if conn.pump_task is not None:
                conn.pump_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await conn.pump_task

    async def _serve(self, conn: _Conn) -> str:
        """Serve requests on one connection; return the close reason."""
        while True:
            timeout = self.idle_timeout
            try:
                # Wait for the first byte of the next request (keep-alive idle wait).
                await conn.fill(lambda: len(conn.buf.lstrip(b"\r\n")) > 0, timeout)
            except _PeerClosed:
                return "client"
            except _ReadTimeout:
                return "idle"
            try:
                req = await self._read_request(conn)
            except _PeerClosed:
                return "client"
            except _ReadTimeout:
                return "timeout"
            except _BadRequest as e:
                body = _dumps(error_body(400, f"bad request: {e}")).encode()
                await self._write_quietly(
                    conn,
                    _head(
                        400,
                        None,
                        [
                            ("Server", "llama.cpp"),
                            ("Content-Type", "application/json; charset=utf-8"),
                            ("Content-Length", str(len(body))),
                            ("Connection", "close"),
                        ],
                    )
                    + body,
                )
                return "bad_request"
            self.requests.append(req)
            conn.info.requests += 1
            self._notify()
            ex = _Exchange(req, must_close=self._must_close(req, conn))
            action = await self._respond(conn, ex)
            if action != "keep":
                return action
            if ex.must_close:
                return "max_requests" if conn.info.requests >= self.keep_alive_max else "close"

    def _must_close(self, req: Request, conn: _Conn) -> bool:
        tokens = {t.strip().lower() for t in req.headers.get("connection", "").split(",")}
        if "close" in tokens:
            return True
        if req.version == "HTTP/1.0" and "keep-alive" not in tokens:
            return True
        return conn.info.requests >= self.keep_alive_max

    async def _read_request(self, conn: _Conn) -> Request:
        while conn.buf.startswith(b"\r\n"):
            del conn.buf[:2]
        head = await conn.read_until(b"\r\n\r\n", self.read_timeout, _MAX_HEAD)
        lines = head[:-4].decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            raise _BadRequest(f"malformed request line {lines[0]!r}")
        method, target, version = parts
        pairs: list[tuple[str, str]] = []
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                raise _BadRequest(f"malformed header line {line!r}")
            pairs.append((name, value.strip()))
        headers = Headers(pairs)
        body = await self._read_body(conn, headers)
        path, _, query = target.partition("?")
        return Request(
            method=method,
            target=target,
            path=path,
            query=query,
            version=version,
            headers=headers,
            body=body,
            time=time.monotonic(),
            conn_id=conn.info.id,
            index_on_conn=conn.info.requests,
        )

    async def _read_body(self, conn: _Conn, headers: Headers) -> bytes:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = bytearray()
            while True:
                line = await conn.read_until(b"\r\n", self.read_timeout, 1024)
                try:
                    size = int(line.split(b";")[0].strip(), 16)
                except ValueError:
                    raise _BadRequest(f"bad chunk size line {line!r}") from None
                if size == 0:
                    # trailers, up to the empty line
                    while await conn.read_until(b"\r\n", self.read_timeout, _MAX_HEAD) != b"\r\n":
                        pass
                    return bytes(body)
                body += await conn.read_exactly(size, self.read_timeout)
                if await conn.read_exactly(2, self.read_timeout) != b"\r\n":
                    raise _BadRequest("chunk not followed by CRLF")
                if len(body) > _MAX_BODY:
                    raise _BadRequest("body too large")
        length = headers.get("content-length")
        if length is None:
            return b""
        try:
            n = int(length)
        except ValueError:
            raise _BadRequest(f"bad Content-Length {length!r}") from None
        if n < 0 or n > _MAX_BODY:
            raise _BadRequest(f"bad Content-Length {length!r}")
        return await conn.read_exactly(n, self.read_timeout)

    # ----------------------------------------------------------------- responses

    async def _respond(self, conn: _Conn, ex: _Exchange) -> str:
        """Run the script for ``ex.request``; return ``"keep"`` or a close reason."""
        req = ex.request
        try:
            script = await self._script_for(req)
        except Exception as e:
            self.errors.append(e)
            self._set_outcome(req, "error")
            await self._write_quietly(
                conn,
                self._response_bytes(
                    ex, Json(500, error_body(500, f"fault server handler failed: {e!r}"))
                ),
            )
            return "error"
        try:
            return await self._run_script(conn, ex, script)
        except Exception as e:
            self.errors.append(e)
            self._set_outcome(req, "error")
            return "error"

    async def _script_for(self, req: Request) -> Script:
        route = self._routes.get((req.method.upper(), req.path)) or self._routes.get(("*", "*"))
        if route is None:
            return [Json(404, _NOT_FOUND_BODY)]
        item = route.next()
        if isinstance(item, Sequence):
            return item
        result = item(req)
        if isinstance(result, Sequence):
            return result
        return await _bounded(result, self.hold_timeout, f"handler for {req.method} {req.path}")

    def _disconnected(self, conn: _Conn, ex: _Exchange) -> str:
        self.disconnects.append(
            Disconnect(ex.request, conn.eof_time or time.monotonic(), ex.step, conn.reset_by_peer)
        )
        conn.info.close_reason = "disconnect"
        self._set_outcome(ex.request, "disconnected")
        return "disconnect"

    async def _run_script(self, conn: _Conn, ex: _Exchange, script: Script) -> str:
        for i, step in enumerate(script):
            ex.step = i
            if conn.eof.is_set():
                return self._disconnected(conn, ex)
            if ex.complete:
                raise _StepError(f"step {i} ({step!r}) after the response was complete")
            if isinstance(step, bytes):
                step = Chunk(step)
            ok = await self._step_handler(i, step)(self, conn, ex, i, step)
            stop = self._stop_after_step(conn, ex, ok)
            if stop is not None:
                return stop
        return self._script_ended(conn, ex)

    def _stop_after_step(self, conn: _Conn, ex: _Exchange, ok: _StepResult) -> str | None:
        """What the script returns after a step that gave ``ok``; None to go on."""
        if isinstance(ok, _Stop):
            return ok.reason
        if ok == "timeout":
            self._set_outcome(ex.request, "write_timeout")
            return "timeout"
        if not ok:
            return self._disconnected(conn, ex)
        return None

    def _script_ended(self, conn: _Conn, ex: _Exchange) -> str:
        """What the script returns when it ran out of steps."""
        if conn.eof.is_set() and not ex.complete:
            return self._disconnected(conn, ex)
        if not ex.complete:
            self._set_outcome(ex.request, "closed")
            return "close"
        self._set_outcome(ex.request, "complete")
        if ex.status is not None and ex.status >= 400:
            ex.must_close = True
        if ex.status is not None and not ex.chunked and not ex.has_length:
            ex.must_close = True
        return "keep"

    # One handler per step type (dispatched through ``_STEP_HANDLERS``), each returning a
    # ``_StepResult``; ``i`` is the step's index, for error messages.

    async def _step_status(self, conn: _Conn, ex: _Exchange, i: int, step: Status) -> _StepResult:
        if ex.status is not None:
            raise _StepError(f"step {i}: second Status {step!r}")
        return await self._write(conn, ex, self._status_bytes(ex, step))

    async def _step_chunk(self, conn: _Conn, ex: _Exchange, i: int, step: Chunk) -> _StepResult:
        if not step.data:
            return True
        if ex.chunked and not step.raw:
            data = b"%x\r\n" % len(step.data) + step.data + b"\r\n"
        else:
            data = step.data
            ex.raw = ex.raw or ex.status is None
        return await self._write(conn, ex, data)

    async def _step_response(
        self, conn: _Conn, ex: _Exchange, i: int, step: Response
    ) -> _StepResult:
        if ex.status is not None:
            raise _StepError(f"step {i}: {step!r} after Status")
        ok = await self._write(conn, ex, self._response_bytes(ex, step))
        ex.complete = True
        return ok

    async def _step_end(self, conn: _Conn, ex: _Exchange, i: int, step: End) -> _StepResult:
        if ex.status is None and not ex.raw:
            raise _StepError(f"step {i}: End before Status or Raw bytes")
        ok = await self._write(conn, ex, b"0\r\n\r\n") if ex.chunked else True
        ex.complete = True
        return ok

    async def _step_sleep(self, conn: _Conn, ex: _Exchange, i: int, step: Sleep) -> _StepResult:
        return not await conn.wait_eof(step.seconds)

    async def _step_hold(self, conn: _Conn, ex: _Exchange, i: int, step: Hold) -> _StepResult:
        timeout = self.hold_timeout if step.timeout is None else step.timeout
        if not await conn.wait_eof(timeout):
            self._set_outcome(ex.request, "hold_timeout")
            return _Stop("timeout")
        return False

    async def _step_wait(self, conn: _Conn, ex: _Exchange, i: int, step: Wait) -> _StepResult:
        timeout = self.hold_timeout if step.timeout is None else step.timeout
        woke = await self._wait_event(conn, step.event, timeout)
        if woke is None:
            raise _StepError(f"step {i}: Wait timed out after {timeout}s")
        return woke

    async def _step_call(self, conn: _Conn, ex: _Exchange, i: int, step: Call) -> _StepResult:
        result = step.fn()
        if inspect.isawaitable(result):
            await _bounded(result, self.hold_timeout, f"step {i} {step!r}")
        return True

    async def _step_close(self, conn: _Conn, ex: _Exchange, i: int, step: Close) -> _StepResult:
        self._set_outcome(ex.request, "closed")
        return _Stop("close")

    async def _step_reset(self, conn: _Conn, ex: _Exchange, i: int, step: Reset) -> _StepResult:
        self._set_outcome(ex.request, "reset")
        return _Stop("reset")

    _STEP_HANDLERS: ClassVar[Mapping[type, _StepHandler]] = {
        Status: _step_status,
        Chunk: _step_chunk,
        Response: _step_response,
        End: _step_end,
        Sleep: _step_sleep,
        Hold: _step_hold,
        Wait: _step_wait,
        Call: _step_call,
        Close: _step_close,
        Reset: _step_reset,
    }

    @classmethod
    def _step_handler(cls, i: int, step: Step) -> _StepHandler:
        """The handler for ``step``'s type (or a base of it, as ``isinstance`` would match)."""
        for base in type(step).__mro__:
            handler = cls._STEP_HANDLERS.get(base)
            if handler is not None:
                return handler
        raise _StepError(f"step {i}: unknown step {step!r}")

    async def _wait_event(
        self, conn: _Conn, event: Gate | asyncio.Event, seconds: float
    ) -> bool | None:
        """Wait for ``event``; False if the client went away first, None on timeout."""
        ev_task = asyncio.ensure_future(event.wait())
        eof_task = asyncio.ensure_future(conn.eof.wait())
        try:
            done, _ = await asyncio.wait(
                {ev_task, eof_task}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for t in (ev_task, eof_task):
                t.cancel()
            await asyncio.gather(ev_task, eof_task, return_exceptions=True)
        if eof_task in done:
            return False
        if ev_task in done:
            return True
        return None

    def _keepalive_header(self, ex: _Exchange, code: int) -> tuple[str, str]:
        if ex.must_close or code >= 400:
            return ("Connection", "close")
        # llama-server: "timeout=5, max=100"; with another idle_timeout, its value rounded up
        timeout = math.ceil(self.idle_timeout) if self.idle_timeout is not None else 5
        return ("Keep-Alive", f"timeout={timeout}, max={self.keep_alive_max}")

    def _status_bytes(self, ex: _Exchange, step: Status) -> bytes:
        defaults = list(_STREAM_HEADERS) if step.chunked else [("Server", "llama.cpp")]
        defaults.append(self._keepalive_header(ex, step.code))
        headers = _merge_headers(defaults, step.headers)
        names = {n.lower(): v for n, v in headers}
        ex.status = step.code
        ex.chunked = "chunked" in names.get("transfer-encoding", "").lower()
        ex.has_length = "content-length" in names
        if names.get("connection", "").lower() == "close":
            ex.must_close = True
        return _head(step.code, step.reason, headers)

    def _response_bytes(self, ex: _Exchange, step: Response) -> bytes:
        defaults = [("Server", "llama.cpp")]
        if step.content_type is not None:
            defaults.append(("Content-Type", step.content_type))
        defaults.append(("Content-Length", str(len(step.body))))
        defaults.append(self._keepalive_header(ex, step.code))
        headers = _merge_headers(defaults, step.headers)
        ex.status = step.code
        ex.has_length = True
        if any(n.lower() == "connection" and v.lower() == "close" for n, v in headers):
            ex.must_close = True
        return _head(step.code, step.reason, headers) + step.body

    async def _write(self, conn: _Conn, ex: _Exchange, data: bytes) -> bool | str:
        """Write and flush; False if the client is gone, ``"timeout"`` if it stalls."""
        if conn.eof.is_set():
            return False
        try:
            conn.writer.write(data)
            await _bounded(conn.writer.drain(), self.write_timeout)
        except _Expired:
            return "timeout"
        except OSError:
            conn.reset_by_peer = True
            if conn.eof_time is None:
                conn.eof_time = time.monotonic()
            conn.eof.set()
            return False
        return True

    async def _write_quietly(self, conn: _Conn, data: bytes) -> None:
        with contextlib.suppress(OSError, _Expired):
            conn.writer.write(data)
            await _bounded(conn.writer.drain(), self.write_timeout)


# --------------------------------------------------------------------------------------
# Refused connections
# --------------------------------------------------------------------------------------


def refused_url(host: str = "127.0.0.1") -> str:
    """Return ``http://host:PORT`` where nothing listens (connecting is refused).

    The port is taken by binding a socket and closing it, so another process could grab
    it in between; on a test machine that is very unlikely.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port = s.getsockname()[1]
    return f"http://{host}:{port}"
