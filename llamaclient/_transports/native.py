"""A minimal HTTP/1.1 transport written directly on asyncio's protocol callbacks.

llama-server writes one event per token with Nagle off, so in real use every event arrives
in its own socket read and the HTTP stack's per-read path dominates the client's CPU. This
transport keeps that path as short as it can be: the socket is read into one reused buffer
(:class:`asyncio.BufferedProtocol`, so no 256 KiB block is allocated per read), the bytes
of the read are copied out once and handed to the response's
:class:`~llamaclient._protocol.http11.ResponseParser` (pure framing, no I/O: for the common
read of one whole HTTP chunk, one ``bytes.find``, one ``int``, two slices), which appends
the decoded bytes to a list that ``read()`` hands out joined; the reader is woken through a
single future. The protocol object only moves bytes and wakes waiters.

What it speaks: ``http://`` and ``https://`` (asyncio's TLS, certificates verified; see
``tls``); request bodies with ``Content-Length`` and ``Accept-Encoding: identity``; response
framing as :mod:`~llamaclient._protocol.http11` allows it (chunked, Content-Length, until
close, 1xx skipped, gzip/deflate decoded); keep-alive connections pooled per host for
:data:`~llamaclient._transports.base.KEEPALIVE_SECONDS`.

Failure kinds (:class:`~llamaclient._transports.base.TransportError`):

- ``"connect"``: refused, unreachable, timed out, or the TLS handshake failed (a bad
  certificate);
- ``"disconnected"``: only a *reused pooled* connection closed before any response byte
  (the server dropped an idle keep-alive connection: safe to retry);
- ``"read"``: a fresh connection closed before any response byte (the server may have
  received the request: never retried silently), or any connection ending after the first
  byte of the status line before the response was complete;
- ``"protocol"``: the bytes are not HTTP/1.1 as allowed, whether in the head (raised by
  ``send()``) or in the body framing or its content coding (raised by ``read()``): the kind
  says what went wrong, and which call raised it says how far the response got;
- ``"stall"``: with ``send(..., read_timeout=s)``, a ``read()`` waited ``s`` seconds
  without a byte; the connection is closed. One timer per connection, re-armed lazily: a
  read that waits writes ``since``, and the timer, when it fires early, re-arms itself for
  ``since + s``. Time between reads never counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import time
from collections.abc import Callable, Mapping
from typing import Final, cast
from urllib.parse import urlsplit

from .._protocol.http11 import BODY, DONE, HEAD, Http11Error, ResponseParser
from .base import KEEPALIVE_SECONDS, Response, TransportError

__all__ = ["AsyncioTransport"]

_HIGH_WATER: Final = 1024 * 1024  # pause reading above this many buffered bytes
# Idle connections kept per host: a pool only holds what was in use at once in the last
# KEEPALIVE_SECONDS, so this only bounds a burst (each one is a file descriptor).
_MAX_IDLE: Final = 1024
_READ_SIZE: Final = 256 * 1024  # the most one read takes, like asyncio's own transports
_PROACTOR: Final[type[asyncio.AbstractEventLoop] | None] = getattr(
    asyncio, "ProactorEventLoop", None
)
_BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH"})
_Future = asyncio.Future  # (what loop.create_future() makes, without its Python frame)

Key = tuple[str, str, int]  # (scheme, host, port)

# What _AsyncioResponse._more says.
_END: Final = 0
_AGAIN: Final = 1
_WAIT: Final = 2


def _clock(loop: asyncio.AbstractEventLoop) -> Callable[[], float]:
    """``loop.time``; for asyncio's own loops that is ``time.monotonic`` (a C function, where
    ``loop.time`` is a Python method calling it: a frame saved per read that waits)."""
    if type(loop).time is asyncio.BaseEventLoop.time:
        return time.monotonic
    return loop.time


def _tokens(value: str | None) -> set[str]:
    """The comma-separated tokens of a header value, lower-cased."""
    if not value:
        return set()
    return {token.strip().lower() for token in value.split(",")}


def _why(exc: Exception | None) -> str:
    """How a connection ended, in our own words."""
    if exc is None:
        return "the server closed the connection"
    if isinstance(exc, OSError) and exc.errno:
        return f"the connection was reset ({os.strerror(exc.errno)})"
    return "the connection was reset"


class _Connection(asyncio.BufferedProtocol):
    """One HTTP/1.1 connection: the protocol object, and the parser of its current response.

    The socket is read with ``recv_into`` a buffer that is reused (``get_buffer``), then
    exactly the bytes received are copied out and fed to the parser (``buffer_updated``). A
    plain ``asyncio.Protocol`` would get a fresh ``recv(256 KiB)`` per read, and allocating,
    shrinking and freeing that block costs more than everything else a small read does.
    Over TLS, asyncio's TLS layer decrypts into the same buffer (a ``memoryview``: with a
    ``bytearray`` some CPython versions lose the bytes) and reports the same way.

    ``parser`` is None while the connection is idle (pooled): a byte then spoils it.
    ``waiter`` is the future of the one task waiting for the head (``send``) or for body
    bytes (``read``); any read wakes it.
    """

    __slots__ = (
        "after_post",
        "broken",
        "buffered",
        "clock",
        "closers",
        "error",
        "exchanges",
        "expiry",
        "keep_alive",
        "key",
        "loop",
        "lost",
        "parser",
        "paused",
        "pool",
        "posted",
        "read_timeout",
        "reused",
        "since",
        "stall",
        "transport",
        "view",
        "waiter",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        key: Key,
        view: memoryview,
        closers: set[Key] | None = None,
    ) -> None:
        self.loop = loop
        self.clock = _clock(loop)  # loop.time, without a Python frame when it can be
        self.key = key
        self.view = view  # what the socket is read into: shared, or this connection's own
        # The hosts known to close a connection after answering a POST (the transport's).
        self.closers: set[Key] = closers if closers is not None else set()
        self.posted = False  # the current (or last) exchange is a POST
        self.after_post = False  # the exchange before it was
        self.transport: asyncio.Transport | None = None
        self.parser: ResponseParser | None = None
        self.buffered = 0  # raw bytes received since the reader last took the body
        self.waiter: asyncio.Future[None] | None = None
        self.error: TransportError | None = None
        self.broken = False  # failed or closed: no more exchanges
        self.lost = False
        self.paused = False
        self.keep_alive = False  # the request allows reuse
        self.exchanges = 0  # requests sent on this connection
        self.reused = False  # the current exchange runs on a connection used before
        self.pool: list[_Connection] | None = None  # the idle list holding us, if any
        self.expiry: asyncio.TimerHandle | None = None
        self.read_timeout: float | None = None
        self.since: float | None = None  # when the waiting read() began to wait
        self.stall: asyncio.TimerHandle | None = None

    # -- asyncio.BufferedProtocol ----------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.view

    def buffer_updated(self, nbytes: int) -> None:
        """Feed the bytes of one read to the parser; wake the waiter. (The same as
        ``data_received``, written out again: this is the per-read path.)"""
        parser = self.parser
        if parser is None:  # bytes nobody asked for: the connection can't be trusted
            self.close()
            return
        try:
            parser.feed(self.view[:nbytes].tobytes())
        except Http11Error as exc:
            self._bad(exc)
            return
        self.buffered += nbytes
        if self.buffered > _HIGH_WATER:
            self._pause()
        waiter = self.waiter
        if waiter is not None:  # _wake(), written out
            self.waiter = None
            self.since = None
            if not waiter.done():
                waiter.set_result(None)

    def data_received(self, data: bytes) -> None:
        """Feed ``data`` to the parser; wake the waiter."""
        parser = self.parser
        if parser is None:
            self.close()
            return
        try:
            parser.feed(data)
        except Http11Error as exc:
            self._bad(exc)
            return
        self.buffered += len(data)
        if self.buffered > _HIGH_WATER:
            self._pause()
        if self.waiter is not None:
            self._wake()

    def eof_received(self) -> bool | None:
        return None  # close our side too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.pool is not None and not self.broken and self.posted:
            # The server closed an idle connection after answering a POST, well before the
            # keep-alive it announced: llama-server does this after every streamed answer.
            self.closers.add(self.key)
        self._leave_pool()
        parser = self.parser
        if parser is not None:
            if not self.broken and parser.state != DONE:
                self._ended(parser, exc)
            parser.detach()
        self._wake()

    def _ended(self, parser: ResponseParser, exc: Exception | None) -> None:
        """The connection ended with the response incomplete."""
        if not parser.started:
            if self.reused:
                if self.after_post:  # closed after a POST (see connection_lost)
                    self.closers.add(self.key)
                error = TransportError("disconnected", f"{_why(exc)} before responding")
            else:
                why = f"{_why(exc)} before responding (the request may have reached it)"
                error = TransportError("read", why)
            self._fail(error)
            return
        try:
            parser.eof()  # a body delimited by the end of the connection is complete
        except Http11Error as err:
            self._fail(TransportError("read", f"{_why(exc)}: {err}"))

    # -- helpers ---------------------------------------------------------------------------
    def _pause(self) -> None:
        """Stop reading the socket until the reader takes the body (flow control: the
        reader does not reset ``buffered`` while the parser has a decoding backlog, so
        compressed input waiting to be decoded is bounded too)."""
        if not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def _bad(self, exc: Http11Error) -> None:
        self._fail(TransportError("protocol", f"bad response from the server: {exc}"))

    def _fail(self, error: TransportError) -> None:
        if self.error is None:
            self.error = error
        self.close()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            self.since = None  # something happened: the waiting read is not stalled
            if not waiter.done():
                waiter.set_result(None)

    def _leave_pool(self) -> None:
        if self.expiry is not None:
            self.expiry.cancel()
            self.expiry = None
        pool = self.pool
        if pool is not None:
            self.pool = None
            with contextlib.suppress(ValueError):
                pool.remove(self)

    def _stop_stall(self) -> None:
        self.since = None
        if self.stall is not None:
            self.stall.cancel()
            self.stall = None

    def check_stall(self) -> None:
        """The stall timer fired: fail the waiting read if it waited ``read_timeout``."""
        self.stall = None
        since = self.since
        timeout = self.read_timeout
        if since is None or timeout is None or self.broken:
            return  # nobody waits now: the next wait arms the timer again
        due = since + timeout
        if self.clock() < due:
            self.stall = self.loop.call_at(due, self.check_stall)
            return
        self._fail(TransportError("stall", f"no byte from the server for {timeout:g} s"))

    def late(self) -> None:
        """The head timer fired: no response head in time (the request may sit in the
        server's queue: closing the connection takes it out)."""
        parser = self.parser
        if parser is not None and parser.state == HEAD and not self.broken:
            self._fail(TransportError("timeout", "no response head in time"))

    def usable(self) -> bool:
        """Whether this idle connection can carry another request."""
        transport = self.transport
        return (
            not self.lost
            and not self.broken
            and transport is not None
            and not transport.is_closing()
            and self.parser is None
        )

    def begin(
        self,
        request: bytes,
        *,
        head_only: bool,
        keep_alive: bool,
        read_timeout: float | None = None,
        post: bool = False,
    ) -> ResponseParser:
        """Reset for a new exchange, write ``request``; return the response's parser."""
        self._leave_pool()
        self.reused = self.exchanges > 0
        self.exchanges += 1
        self.after_post = self.posted
        self.posted = post
        parser = self.parser = ResponseParser(head_only=head_only)
        self.buffered = 0
        self.error = None
        self.keep_alive = keep_alive
        self.read_timeout = read_timeout
        assert self.transport is not None
        self.transport.write(request)
        return parser

    async def wait(self) -> None:
        """Wait until ``data_received`` or ``connection_lost`` says something new.

        A cancelled wait closes the connection: the exchange can't be resumed.
        """
        waiter = self.waiter = self.loop.create_future()
        try:
            await waiter
        except asyncio.CancelledError:
            self.waiter = None
            self.close()
            raise

    def resume(self) -> None:
        """The reader took the buffered body: read from the socket again."""
        self.buffered = 0
        if self.paused:
            self.paused = False
            if self.transport is not None:
                self.transport.resume_reading()

    def close(self) -> None:
        """Close the connection now (the server sees it at once)."""
        self.broken = True
        self.keep_alive = False
        self._leave_pool()
        self._stop_stall()
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.abort()
        self._wake()

    def expire(self) -> None:
        """Called when this connection sat idle for ``KEEPALIVE_SECONDS``."""
        self.expiry = None
        self.close()


class _AsyncioResponse(Response):
    """A response whose head has arrived; the body is read from its connection."""

    __slots__ = ("_body", "_conn", "_owner", "_parser")

    fair_reads = True  # read() hands out everything buffered, or waits (see Response)

    def __init__(self, owner: AsyncioTransport, conn: _Connection, parser: ResponseParser) -> None:
        self._owner = owner
        self._conn: _Connection | None = conn
        self._parser = parser
        self._body = parser.body

    @property
    def status(self) -> int:
        return self._parser.status

    @property
    def complete(self) -> bool:
        """The whole body has arrived: ``aclose()`` pools the connection without another
        read (the stream skips its wait for the body's end; see ``_stream._read_to_end``)."""
        return self._parser.state == DONE and not self._parser.backlog

    def header(self, name: str) -> str | None:
        return self._parser.headers.get(name.lower())

    async def read(self) -> bytes:
        """The next decoded body bytes: everything that arrived since the last call."""
        conn = self._conn
        if conn is None:
            return b""
        body = self._body
        parser = self._parser
        while not body:
            if conn.broken or conn.lost or parser.state != BODY or parser.backlog:
                more = self._more(conn)
                if more == _END:
                    return b""
                if more == _AGAIN:
                    # Decoded from what is already here, without the loop running: a turn
                    # for the other tasks, so that every read either waits or hands out what
                    # came while the reader waited (``fair_reads``; compressed bodies only).
                    await asyncio.sleep(0)
                    continue
            waiter = conn.waiter = _Future(loop=conn.loop)
            timeout = conn.read_timeout
            if timeout is not None:
                since = conn.since = conn.clock()
                if conn.stall is None:
                    conn.stall = conn.loop.call_at(since + timeout, conn.check_stall)
            try:
                await waiter
            except asyncio.CancelledError:
                conn.waiter = None
                self._conn = None
                self._owner._discard(conn)
                raise
            conn.since = None
        data = b"".join(body)  # (one piece: that piece itself, not a copy)
        body.clear()
        if not parser.backlog:
            conn.buffered = 0
            if conn.paused:
                conn.resume()
        return data

    def _more(self, conn: _Connection) -> int:
        """With no body bytes at hand: raise on a failure; ``_END`` at the end of the body;
        ``_AGAIN`` after decoding the next piece of a backlog; else ``_WAIT`` for bytes."""
        if conn.error is not None:
            self._conn = None
            self._owner._discard(conn)
            raise conn.error
        parser = self._parser
        if parser.state == DONE:
            self._conn = None
            self._owner._release(conn, parser)
            return _END
        if parser.backlog:
            try:
                parser.pump()
            except Http11Error as exc:
                conn._bad(exc)
            return _AGAIN
        if conn.broken or conn.lost:  # closed by us (aclose of the transport)
            self._conn = None
            self._owner._discard(conn)
            raise TransportError("read", "the connection was closed")
        return _WAIT

    async def aclose(self) -> None:
        """Release the response: the connection goes back to the pool if the whole body
        arrived, else it is closed at once."""
        conn = self._conn
        if conn is None:
            return
        self._conn = None
        if self._parser.state == DONE and conn.error is None:
            self._owner._release(conn, self._parser)
        else:
            self._owner._discard(conn)


class AsyncioTransport:
    """A :class:`~llamaclient._transports.base.Transport` written directly on asyncio protocols:
    the lowest per-read cost, for ``http://`` and ``https://`` servers.

    ``connect_timeout`` bounds opening a connection, TLS handshake included (None: no
    bound). ``tls`` is for ``https://``: None verifies the server's certificate against the
    system's CAs, a ``str`` is the path of a CA bundle file to verify it against instead,
    an :class:`ssl.SSLContext` is used as given. Idle keep-alive connections are pooled per
    host (at most 16 each), used again only after a response was read to its end and
    neither side said ``Connection: close``, and dropped after ``KEEPALIVE_SECONDS``.
    ``aclose()`` closes every connection, idle or in use; the transport can still be used
    after it (new connections are opened).
    """

    def __init__(
        self,
        connect_timeout: float | None = 10.0,
        *,
        tls: ssl.SSLContext | str | None = None,
    ) -> None:
        self._connect_timeout = connect_timeout
        self._tls = tls
        self._context: ssl.SSLContext | None = tls if isinstance(tls, ssl.SSLContext) else None
        self._idle: dict[Key, list[_Connection]] = {}
        self._active: set[_Connection] = set()
        self._targets: dict[str, tuple[Key, str, str]] = {}
        self._closers: set[Key] = set()  # hosts that close connections after a POST
        self._view: memoryview | None = None  # the read buffer all connections share

    def __repr__(self) -> str:
        idle = sum(len(conns) for conns in self._idle.values())
        return f"AsyncioTransport(active={len(self._active)}, idle={idle})"

    def _target(self, url: str) -> tuple[Key, str, str]:
        """``((scheme, host, port), request target, Host header)`` for ``url``, cached."""
        target = self._targets.get(url)
        if target is not None:
            return target
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            raise ValueError(f"the asyncio transport speaks http:// and https://, not {url!r}")
        host = parts.hostname
        if not host:
            raise ValueError(f"no host in {url!r}")
        port = parts.port or (443 if scheme == "https" else 80)
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        netloc = parts.netloc.rpartition("@")[2]
        if len(self._targets) >= 64:
            self._targets.clear()
        target = self._targets[url] = ((scheme, host, port), path, netloc)
        return target

    async def send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        *,
        read_timeout: float | None = None,
        head_timeout: float | None = None,
    ) -> Response:
        """Send one request; return once the status line and headers are in (within
        ``head_timeout`` seconds: else ``TransportError("timeout")``)."""
        key, path, netloc = self._target(url)
        verb = method.upper()
        post = verb == "POST"
        close = post and key in self._closers  # it would close the connection anyway
        request, keep_alive = _request_bytes(method, path, netloc, headers, body, close=close)
        conn = self._take_idle(key)
        if conn is None:
            conn = await self._connect(key)
        self._active.add(conn)
        parser = conn.begin(
            request,
            head_only=verb == "HEAD",
            keep_alive=keep_alive,
            read_timeout=read_timeout,
            post=post,
        )
        late = None if head_timeout is None else conn.loop.call_later(head_timeout, conn.late)
        try:
            while parser.state == HEAD and not conn.broken:
                await conn.wait()
        except asyncio.CancelledError:
            self._discard(conn)
            raise
        finally:
            if late is not None:
                late.cancel()
        if conn.error is not None and parser.state == HEAD:
            self._discard(conn)
            raise conn.error
        # A failure after the head (the body broke in the read that brought the head) is
        # the body's: read() hands out the bytes before it, then raises it, so the outcome
        # does not depend on how the bytes were split into reads.
        if conn.broken and parser.state == HEAD:  # closed by us (aclose of the transport)
            self._discard(conn)
            raise TransportError("read", "the connection was closed")
        return _AsyncioResponse(self, conn, parser)

    async def aclose(self) -> None:
        """Close every connection, idle or in use (responses still open then fail)."""
        for conns in list(self._idle.values()):
            for conn in list(conns):
                conn.close()
        self._idle.clear()
        for conn in list(self._active):
            conn.close()
        self._active.clear()
        await asyncio.sleep(0)  # let the transports finish closing their sockets

    # -- the pool --------------------------------------------------------------------------
    def _take_idle(self, key: Key) -> _Connection | None:
        conns = self._idle.get(key)
        if not conns:
            return None
        loop = asyncio.get_running_loop()
        while conns:
            conn = conns.pop()
            conn.pool = None
            if conn.loop is loop and conn.usable():
                return conn
            conn.close()
        return None

    def _ssl_context(self) -> ssl.SSLContext:
        if self._context is None:
            cafile = self._tls if isinstance(self._tls, str) else None
            try:
                self._context = ssl.create_default_context(cafile=cafile)
            except (OSError, ssl.SSLError):
                raise TransportError(
                    "connect", f"cannot load the CA bundle {cafile!r} for TLS"
                ) from None
        return self._context

    async def _connect(self, key: Key) -> _Connection:
        loop = asyncio.get_running_loop()
        scheme, host, port = key
        context = self._ssl_context() if scheme == "https" else None
        view = self._view
        if _PROACTOR is not None and isinstance(loop, _PROACTOR):
            # A proactor reads into the buffer in the background: one buffer per connection.
            view = memoryview(bytearray(_READ_SIZE // 4))
        elif view is None:
            # Selector loops (and uvloop) call get_buffer(), recv_into() and buffer_updated()
            # back to back, and the bytes are copied out at once: one buffer serves them all.
            view = self._view = memoryview(bytearray(_READ_SIZE))
        try:
            async with asyncio.timeout(self._connect_timeout):
                _, conn = await loop.create_connection(
                    lambda: _Connection(loop, key, view, self._closers),
                    host,
                    port,
                    ssl=context,
                    server_hostname=host if context is not None else None,
                )
        except TimeoutError:
            raise TransportError(
                "connect", f"connect to {host}:{port} timed out ({self._connect_timeout} s)"
            ) from None
        except ssl.SSLCertVerificationError:
            raise TransportError(
                "connect", f"the TLS certificate of {host}:{port} was not accepted"
            ) from None
        except ssl.SSLError:
            raise TransportError(
                "connect", f"the TLS handshake with {host}:{port} failed"
            ) from None
        except OSError as exc:
            why = os.strerror(exc.errno) if exc.errno else "failed"
            raise TransportError("connect", f"cannot connect to {host}:{port}: {why}") from None
        return conn

    def _release(self, conn: _Connection, parser: ResponseParser) -> None:
        """The response ended cleanly: pool the connection if both sides allow it."""
        self._active.discard(conn)
        conn._stop_stall()
        reusable = conn.keep_alive and parser.keep_alive and not parser.trailing
        if not reusable or not conn.transport or conn.lost or conn.broken:
            conn.close()
            return
        conns = self._idle.setdefault(conn.key, [])
        if len(conns) >= _MAX_IDLE or conn.transport.is_closing():
            conn.close()
            return
        parser.detach()
        conn.parser = None
        conn.resume()
        conn.pool = conns
        conn.expiry = conn.loop.call_later(KEEPALIVE_SECONDS, conn.expire)
        conns.append(conn)

    def _discard(self, conn: _Connection) -> None:
        self._active.discard(conn)
        conn.close()


def _request_bytes(
    method: str,
    path: str,
    netloc: str,
    headers: Mapping[str, str],
    body: bytes | None,
    *,
    close: bool = False,
) -> tuple[bytes, bool]:
    """The request's bytes (head and body, to be written at once) and whether it allows
    keeping the connection alive; ``close`` asks for ``Connection: close``."""
    lines = [f"{method} {path} HTTP/1.1\r\n"]
    keep_alive = True
    has_host = has_encoding = has_connection = False
    for name, value in headers.items():
        if "\r" in name or "\n" in name or "\r" in value or "\n" in value or ":" in name:
            raise ValueError(f"invalid header {name!r} (the value is not shown)")
        lower = name.lower()
        if lower == "content-length" or lower == "transfer-encoding":
            continue  # ours, from the body
        if lower == "host":
            has_host = True
        elif lower == "accept-encoding":
            has_encoding = True
        elif lower == "connection":  # the caller's own is sent as it is
            has_connection = True
            keep_alive = "close" not in _tokens(value)
        lines.append(f"{name}: {value}\r\n")
    if not has_host:
        lines.insert(1, f"Host: {netloc}\r\n")
    if not has_encoding:
        lines.append("Accept-Encoding: identity\r\n")
    if close and not has_connection:
        lines.append("Connection: close\r\n")
        keep_alive = False
    if body:
        lines.append(f"Content-Length: {len(body)}\r\n")
    elif body is not None or method.upper() in _BODY_METHODS:
        lines.append("Content-Length: 0\r\n")
    lines.append("\r\n")
    head = "".join(lines).encode("latin-1")
    return (head + body if body else head), keep_alive
