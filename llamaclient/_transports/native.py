"""A minimal HTTP/1.1 transport written directly on asyncio's protocol callbacks.

llama-server writes one event per token with Nagle off, so in real use every event arrives
in its own socket read and the HTTP stack's per-read path dominates the client's CPU. This
transport keeps that path as short as it can be: the socket is read into one reused buffer
(:class:`asyncio.BufferedProtocol`, so no 256 KiB block is allocated per read), the bytes
of the read are copied out once, and ``data_received`` de-frames them in place (for the
common case of one whole HTTP chunk per read: one ``bytes.find``, one ``int``, two slices)
and appends the decoded bytes to a list that ``read()`` hands out joined, waking the reader
through a single future. No ``StreamReader``, no parser objects.

What it speaks: ``http://`` only; request bodies with ``Content-Length``; response bodies
framed by ``Transfer-Encoding: chunked`` (extensions and trailers accepted and ignored),
``Content-Length`` or the end of the connection; 1xx interim responses skipped; keep-alive
connections pooled per host for :data:`~llamaclient._transports.base.KEEPALIVE_SECONDS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Mapping
from typing import Final, Literal, cast
from urllib.parse import urlsplit

from .base import KEEPALIVE_SECONDS, Response, TransportError

__all__ = ["AsyncioTransport"]

# Parser states of a connection.
_IDLE: Final = 0  # no request in flight (a pooled connection)
_HEAD: Final = 1  # waiting for the status line and headers
_SIZE: Final = 2  # chunked: waiting for a chunk-size line
_DATA: Final = 3  # chunked: inside a chunk's data
_CRLF: Final = 4  # chunked: the CRLF after a chunk's data
_TRAILER: Final = 5  # chunked: trailer lines up to the empty line
_LENGTH: Final = 6  # Content-Length body
_UNTIL_CLOSE: Final = 7  # body delimited by the end of the connection
_DONE: Final = 8  # the body is complete
_BROKEN: Final = 9  # failed or closed: ignore anything more

_MAX_HEAD: Final = 64 * 1024  # bytes of status line + headers (and of one trailer section)
_MAX_LINE: Final = 4096  # bytes of one chunk-size line
_HIGH_WATER: Final = 1024 * 1024  # pause reading above this many buffered bytes
_MAX_IDLE: Final = 16  # idle connections kept per host
_READ_SIZE: Final = 256 * 1024  # the most one read takes, like asyncio's own transports
_PROACTOR: Final[type[asyncio.AbstractEventLoop] | None] = getattr(
    asyncio, "ProactorEventLoop", None
)
_NO_BODY_STATUS: Final = frozenset({204, 304})
_BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH"})


class _BadResponse(Exception):
    """The server sent something that is not HTTP/1.1 as we speak it."""


def _chunk_size(line: bytes) -> int:
    """The size in a chunk-size line with extensions (``1a3;name=value``): the slow path,
    when ``int(line, 16)`` failed."""
    digits = line.partition(b";")[0].strip(b" \t")
    if not digits or digits.strip(b"0123456789abcdefABCDEF"):
        raise _BadResponse(f"bad chunk-size line {line[:64]!r}")
    return int(digits, 16)


def _tokens(value: str | None) -> set[str]:
    """The comma-separated tokens of a header value, lower-cased."""
    if not value:
        return set()
    return {token.strip().lower() for token in value.split(",")}


class _Connection(asyncio.BufferedProtocol):
    """One HTTP/1.1 connection: the protocol object and the state of its current response.

    The socket is read with ``recv_into`` a buffer that is reused (``get_buffer``), then
    exactly the bytes received are copied out and parsed (``data_received``). A plain
    ``asyncio.Protocol`` would get a fresh ``recv(256 KiB)`` per read, and allocating,
    shrinking and freeing that block costs more than everything else a small read does.

    ``body`` holds the decoded body bytes not yet read; ``waiter`` is the future of the one
    task waiting for the head (``send``) or for body bytes (``read``).
    """

    __slots__ = (
        "body",
        "buffered",
        "error",
        "exchanges",
        "expiry",
        "got_bytes",
        "head_only",
        "headers",
        "keep_alive",
        "key",
        "left",
        "loop",
        "lost",
        "paused",
        "pending",
        "pool",
        "state",
        "status",
        "transport",
        "view",
        "waiter",
    )

    def __init__(
        self, loop: asyncio.AbstractEventLoop, key: tuple[str, int], view: memoryview
    ) -> None:
        self.loop = loop
        self.key = key
        self.view = view  # what the socket is read into: shared, or this connection's own
        self.transport: asyncio.Transport | None = None
        self.state: int = _IDLE
        self.pending = b""  # an incomplete line (head, chunk size, CRLF, trailer) so far
        self.left = 0  # body bytes still to come in this chunk / Content-Length body
        self.body: list[bytes] = []
        self.exchanges = 0  # requests sent on this connection
        self.buffered = 0  # raw bytes received since the reader last took the body
        self.waiter: asyncio.Future[None] | None = None
        self.error: TransportError | None = None
        self.lost = False
        self.paused = False
        self.got_bytes = False  # any byte of the response arrived
        self.head_only = False  # the request was HEAD: no body whatever the headers say
        self.keep_alive = False
        self.status = 0
        self.headers: dict[str, str] = {}
        self.pool: list[_Connection] | None = None  # the idle list holding us, if any
        self.expiry: asyncio.TimerHandle | None = None

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
        self.data_received(self.view[:nbytes].tobytes())

    def data_received(self, data: bytes) -> None:
        """Parse ``data``, the bytes of one read: head, then body framing; wake the waiter."""
        if self.pending:
            data = self.pending + data
            self.pending = b""
        entry = state = self.state
        body = self.body
        n = len(data)
        i = 0
        try:
            while i < n:
                if state == _SIZE:
                    eol = data.find(b"\r\n", i)
                    if eol < 0:
                        if n - i > _MAX_LINE:
                            raise _BadResponse("chunk-size line too long")
                        self.pending = data[i:]
                        break
                    try:
                        size = int(data[i:eol], 16)
                    except ValueError:  # chunk extensions, or garbage
                        size = _chunk_size(data[i:eol])
                    i = eol + 2
                    if size <= 0:
                        if size:
                            raise _BadResponse(f"negative chunk size {size}")
                        state = _TRAILER
                        continue
                    end = i + size
                    if end + 2 <= n:  # the fast path: the whole chunk is here
                        if not data.startswith(b"\r\n", end):
                            raise _BadResponse("chunk data not followed by CRLF")
                        body.append(data[i:end])
                        i = end + 2
                    else:
                        self.left = size
                        state = _DATA
                elif state in (_DATA, _LENGTH):
                    left = self.left
                    if n - i > left:
                        body.append(data[i : i + left])
                        i += left
                        self.left = 0
                        state = _CRLF if state == _DATA else self._finish(i < n)
                    else:
                        body.append(data[i:] if i else data)
                        left -= n - i
                        i = n
                        self.left = left
                        if not left:
                            state = _CRLF if state == _DATA else self._finish(False)
                elif state == _CRLF:
                    if n - i < 2:
                        if data[i] != 13:  # b"\r"
                            raise _BadResponse("chunk data not followed by CRLF")
                        self.pending = data[i:]
                        break
                    if not data.startswith(b"\r\n", i):
                        raise _BadResponse("chunk data not followed by CRLF")
                    i += 2
                    state = _SIZE
                elif state == _UNTIL_CLOSE:
                    body.append(data[i:] if i else data)
                    i = n
                elif state == _TRAILER:
                    eol = data.find(b"\r\n", i)
                    if eol < 0:
                        if n - i > _MAX_HEAD:
                            raise _BadResponse("trailer section too long")
                        self.pending = data[i:]
                        break
                    blank = eol == i  # the empty line ends the trailers
                    i = eol + 2
                    if blank:
                        state = self._finish(i < n)
                elif state == _HEAD:
                    self.got_bytes = True
                    end = data.find(b"\r\n\r\n", i)
                    if end < 0:
                        if n - i > _MAX_HEAD:
                            raise _BadResponse("response head too long")
                        self.pending = data[i:]
                        break
                    state = self._parse_head(data[i:end])
                    i = end + 4
                elif state in (_DONE, _IDLE):
                    # Bytes nobody asked for: the connection can no longer be trusted.
                    self.keep_alive = False
                    if state == _IDLE:
                        self.close()
                        state = _BROKEN
                    break
                else:  # _BROKEN
                    break
        except _BadResponse as exc:
            self.state = _BROKEN
            self._fail(TransportError("read", f"bad response from the server: {exc}"))
            return
        self.state = state
        self.buffered += n
        if self.buffered > _HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        waiter = self.waiter
        if waiter is not None and (body or state == _DONE or (entry == _HEAD and state != _HEAD)):
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def eof_received(self) -> bool | None:
        return None  # close our side too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._leave_pool()
        state = self.state
        if state == _UNTIL_CLOSE and exc is None:
            self.state = _DONE
        elif state == _HEAD:
            if self.got_bytes:
                self._fail(TransportError("read", f"connection lost in the response head: {exc}"))
            else:
                why = "connection reset" if exc else "server closed the connection"
                # Only a reused keep-alive connection closed unanswered is stale (safe to send
                # again); on a fresh one the server may have read the request.
                kind: Literal["disconnected", "read"] = (
                    "disconnected" if self.exchanges > 1 else "read"
                )
                self._fail(TransportError(kind, f"{why} before responding"))
            return
        elif _SIZE <= state <= _UNTIL_CLOSE:
            why = f"connection reset: {exc!r}" if exc else "server closed the connection"
            self._fail(TransportError("read", f"{why} before the body ended"))
            return
        self._wake()

    # -- helpers ---------------------------------------------------------------------------
    def _finish(self, extra: bool) -> int:
        """The body is complete; ``extra``: more bytes followed it (don't reuse)."""
        if extra:
            self.keep_alive = False
        return _DONE

    def _parse_head(self, head: bytes) -> int:
        """Parse the status line and headers; return the state to read the body in."""
        lines = head.decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        code = rest[:3]
        digits = code.isascii() and code.isdigit()
        if not version.startswith("HTTP/1.") or len(code) != 3 or not digits:
            raise _BadResponse(f"bad status line {lines[0][:80]!r}")
        if rest[3:4] not in ("", " "):
            raise _BadResponse(f"bad status line {lines[0][:80]!r}")
        status = int(code)
        if 100 <= status < 200 and status != 101:
            return _HEAD  # an interim response (100 Continue, 103 Early Hints): skip it
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.rstrip(" \t") or line[0] in " \t":
                raise _BadResponse(f"bad header line {line[:80]!r}")
            key = name.lower()
            value = value.strip(" \t")
            old = headers.get(key)
            headers[key] = value if old is None else f"{old}, {value}"
        self.status = status
        self.headers = headers
        connection = _tokens(headers.get("connection"))
        if version == "HTTP/1.1":
            keep = "close" not in connection
        else:
            keep = "keep-alive" in connection and "close" not in connection
        self.keep_alive = self.keep_alive and keep and status != 101
        if self.head_only or status in _NO_BODY_STATUS or status == 101:
            return _DONE
        encoding = headers.get("transfer-encoding")
        if encoding is not None:
            if "content-length" in headers:
                self.keep_alive = False
            codings = encoding.lower().split(",")
            if codings[-1].strip() == "chunked":
                return _SIZE
            self.keep_alive = False
            return _UNTIL_CLOSE
        length = headers.get("content-length")
        if length is not None:
            values = {v.strip() for v in length.split(",")}
            value = values.pop()
            if values or not (value.isascii() and value.isdigit()):
                raise _BadResponse(f"bad Content-Length {length[:80]!r}")
            self.left = int(value)
            return _LENGTH if self.left else _DONE
        self.keep_alive = False
        return _UNTIL_CLOSE

    def _fail(self, error: TransportError) -> None:
        if self.error is None:
            self.error = error
        self.state = _BROKEN
        self.keep_alive = False
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
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

    def usable(self) -> bool:
        """Whether this idle connection can carry another request."""
        transport = self.transport
        return (
            not self.lost
            and transport is not None
            and not transport.is_closing()
            and self.state == _IDLE
            and not self.pending
        )

    def begin(self, request: bytes, *, head_only: bool, keep_alive: bool) -> None:
        """Reset for a new exchange and write ``request``."""
        self._leave_pool()
        self.exchanges += 1
        self.state = _HEAD
        self.pending = b""
        self.left = 0
        self.body = []
        self.buffered = 0
        self.error = None
        self.got_bytes = False
        self.head_only = head_only
        self.keep_alive = keep_alive
        self.status = 0
        self.headers = {}
        assert self.transport is not None
        self.transport.write(request)

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
        self.state = _BROKEN
        self.keep_alive = False
        self._leave_pool()
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.abort()
        self._wake()

    def expire(self) -> None:
        """Called when this connection sat idle for ``KEEPALIVE_SECONDS``."""
        self.expiry = None
        self.close()


def _stall(waiter: asyncio.Future[None], seconds: float) -> None:
    # Interim (one timer per waiting read); the framing rewrite re-arms one per connection.
    if not waiter.done():
        waiter.set_exception(TransportError("stall", f"no bytes for {seconds} s"))


class _AsyncioResponse:
    """A response whose head has arrived; the body is read from its connection."""

    __slots__ = ("_conn", "_headers", "_owner", "_read_timeout", "_status")

    def __init__(
        self, owner: AsyncioTransport, conn: _Connection, read_timeout: float | None = None
    ) -> None:
        self._owner = owner
        self._read_timeout = read_timeout
        self._conn: _Connection | None = conn
        self._status = conn.status
        self._headers = conn.headers

    @property
    def status(self) -> int:
        return self._status

    def header(self, name: str) -> str | None:
        return self._headers.get(name.lower())

    async def read(self) -> bytes:
        """The next decoded body bytes: everything that arrived since the last call."""
        conn = self._conn
        if conn is None:
            return b""
        body = conn.body
        while not body:
            if conn.error is not None:
                self._conn = None
                self._owner._discard(conn)
                raise conn.error
            if conn.state == _DONE:
                self._conn = None
                self._owner._release(conn)
                return b""
            if conn.state == _BROKEN:  # closed by us (aclose of the transport)
                self._conn = None
                self._owner._discard(conn)
                raise TransportError("read", "the connection was closed")
            waiter = conn.waiter = conn.loop.create_future()
            timer = None
            if self._read_timeout is not None:
                timer = conn.loop.call_later(self._read_timeout, _stall, waiter, self._read_timeout)
            try:
                await waiter
            except (asyncio.CancelledError, TransportError):
                conn.waiter = None
                self._conn = None
                self._owner._discard(conn)
                raise
            finally:
                if timer is not None:
                    timer.cancel()
        data = body[0] if len(body) == 1 else b"".join(body)
        body.clear()
        conn.buffered = 0
        if conn.paused:
            conn.resume()
        return data

    async def aread(self) -> bytes:
        """The rest of the body."""
        pieces: list[bytes] = []
        while data := await self.read():
            pieces.append(data)
        return b"".join(pieces)

    async def aclose(self) -> None:
        """Release the response: the connection goes back to the pool if the whole body
        arrived, else it is closed at once."""
        conn = self._conn
        if conn is None:
            return
        self._conn = None
        if conn.state == _DONE and conn.error is None:
            self._owner._release(conn)
        else:
            self._owner._discard(conn)


class AsyncioTransport:
    """A :class:`~llamaclient._transports.base.Transport` written directly on asyncio protocols:
    the lowest per-read cost, for ``http://`` servers only.

    ``connect_timeout`` bounds opening a TCP connection (None: no bound). Idle keep-alive
    connections are pooled per host (at most 16 each), used again only after a response was
    read to its end and neither side said ``Connection: close``, and dropped after
    ``KEEPALIVE_SECONDS``. ``aclose()`` closes every connection, idle or in use; the
    transport can still be used after it (new connections are opened).
    """

    def __init__(self, connect_timeout: float | None = 10.0) -> None:
        self._connect_timeout = connect_timeout
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._active: set[_Connection] = set()
        self._targets: dict[str, tuple[tuple[str, int], str, str]] = {}
        self._view: memoryview | None = None  # the read buffer all connections share

    def __repr__(self) -> str:
        idle = sum(len(conns) for conns in self._idle.values())
        return f"AsyncioTransport(active={len(self._active)}, idle={idle})"

    def _target(self, url: str) -> tuple[tuple[str, int], str, str]:
        """``((host, port), request target, Host header)`` for ``url``, cached."""
        target = self._targets.get(url)
        if target is not None:
            return target
        parts = urlsplit(url)
        if parts.scheme != "http":
            raise ValueError(
                f"the asyncio transport speaks plain http:// only, not {parts.scheme}://"
                f" ({url!r}); use transport 'httpx'"
            )
        host = parts.hostname
        if not host:
            raise ValueError(f"no host in {url!r}")
        port = parts.port or 80
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        netloc = parts.netloc.rpartition("@")[2]
        if len(self._targets) >= 64:
            self._targets.clear()
        target = self._targets[url] = ((host, port), path, netloc)
        return target

    async def send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        *,
        read_timeout: float | None = None,
    ) -> Response:
        """Send one request; return once the status line and headers are in."""
        key, path, netloc = self._target(url)
        request, keep_alive = _request_bytes(method, path, netloc, headers, body)
        conn = self._take_idle(key)
        if conn is None:
            conn = await self._connect(key)
        self._active.add(conn)
        conn.begin(request, head_only=method.upper() == "HEAD", keep_alive=keep_alive)
        try:
            while conn.state == _HEAD:
                await conn.wait()
        except asyncio.CancelledError:
            self._discard(conn)
            raise
        if conn.error is not None:
            self._discard(conn)
            raise conn.error
        if conn.state == _BROKEN:
            self._discard(conn)
            raise TransportError("disconnected", "the connection was closed")
        return _AsyncioResponse(self, conn, read_timeout)

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
    def _take_idle(self, key: tuple[str, int]) -> _Connection | None:
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

    async def _connect(self, key: tuple[str, int]) -> _Connection:
        loop = asyncio.get_running_loop()
        host, port = key
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
                    lambda: _Connection(loop, key, view), host, port
                )
        except TimeoutError as exc:
            raise TransportError(
                "connect", f"connect to {host}:{port} timed out ({self._connect_timeout} s)"
            ) from exc
        except OSError as exc:
            raise TransportError("connect", f"cannot connect to {host}:{port}: {exc}") from exc
        return conn

    def _release(self, conn: _Connection) -> None:
        """The response ended cleanly: pool the connection if both sides allow it."""
        self._active.discard(conn)
        if not conn.keep_alive or not conn.transport or conn.lost or conn.pending:
            conn.close()
            return
        conns = self._idle.setdefault(conn.key, [])
        if len(conns) >= _MAX_IDLE or conn.transport.is_closing():
            conn.close()
            return
        conn.state = _IDLE
        conn.body = []
        conn.resume()
        conn.pool = conns
        conn.expiry = conn.loop.call_later(KEEPALIVE_SECONDS, conn.expire)
        conns.append(conn)

    def _discard(self, conn: _Connection) -> None:
        self._active.discard(conn)
        conn.close()


def _request_bytes(
    method: str, path: str, netloc: str, headers: Mapping[str, str], body: bytes | None
) -> tuple[bytes, bool]:
    """The request's bytes (head and body, to be written at once) and whether it allows
    keeping the connection alive."""
    lines = [f"{method} {path} HTTP/1.1\r\n"]
    keep_alive = True
    has_host = False
    for name, value in headers.items():
        if "\r" in name or "\n" in name or "\r" in value or "\n" in value or ":" in name:
            raise ValueError(f"invalid header {name!r} (the value is not shown)")
        lower = name.lower()
        if lower == "content-length" or lower == "transfer-encoding":
            continue  # ours, from the body
        if lower == "host":
            has_host = True
        elif lower == "connection" and "close" in _tokens(value):
            keep_alive = False
        lines.append(f"{name}: {value}\r\n")
    if not has_host:
        lines.insert(1, f"Host: {netloc}\r\n")
    if body:
        lines.append(f"Content-Length: {len(body)}\r\n")
    elif body is not None or method.upper() in _BODY_METHODS:
        lines.append("Content-Length: 0\r\n")
    lines.append("\r\n")
    head = "".join(lines).encode("latin-1")
    return (head + body if body else head), keep_alive
