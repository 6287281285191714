"""HTTP/1.1 response framing without I/O: the status line, headers and body framing.

A :class:`ResponseParser` is fed the bytes of one response as they arrive (``feed(data)``;
``eof()`` when the connection ends) and is inspected after each feed:

- ``state``: :data:`HEAD` (the head is not complete yet), :data:`BODY`, :data:`DONE`;
- ``status``, ``reason``, ``version``, ``fields`` (the headers as sent, in order),
  ``headers`` (lower-cased names, repeated headers joined by ``", "``), ``keep_alive``
  (whether the connection may carry another exchange after this one) once the head is in;
- ``body``: a list the decoded body bytes are appended to (the consumer takes and clears it);
- ``trailers`` (chunked bodies) and ``trailing`` (bytes received after the end of the body,
  kept up to :data:`MAX_HEAD`: a connection with any is not reused).

Interim ``1xx`` responses are skipped (their headers are checked, then dropped). A ``101``
is final and ends at its head: what follows belongs to another protocol (``trailing``).
Bodies are framed by ``Transfer-Encoding: chunked``, ``Content-Length`` or the end of the
connection; responses to ``HEAD`` and ``204``/``304`` have none. Each framing has its own
small reader (:class:`ChunkedReader`, :class:`ContentLengthReader`, :class:`Http10Reader`),
and the parser's ``feed`` *is* the current reader's ``feed`` (the attribute is rebound when
the state changes), so a body read costs one call. For the common read of one whole HTTP
chunk (a streaming server's event) that is one ``bytes.find``, one dict lookup of the
size line (in place of ``int`` and the checks that make it strict) and three slices.

``Content-Encoding: gzip`` and ``deflate`` bodies are decoded with :mod:`zlib`, at most
:data:`MAX_DECODED` bytes per ``feed``: when more is left, ``backlog`` is true and ``pump()``
decodes the next piece (the caller should stop reading the socket meanwhile). Any other
coding is an error naming it.

What is rejected (:class:`Http11Error`, with a short ``rule`` name) is at least what h11
rejects, plus, deliberately: bare LF line ends anywhere (h11 accepts them in the head and in
trailers), obs-fold lines (h11 unfolds them), HTTP versions other than 1.0 and 1.1, chunk
sizes of more than 16 hex digits (h11: 20), control characters other than HTAB in chunk
extensions, and content codings. Deliberately more lenient than h11: a ``101`` that no
``Upgrade`` asked for is accepted (it ends the response), and bytes after a complete body
are kept in ``trailing`` whatever the connection's state (h11 raises when the server had
said ``Connection: close``).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable
from typing import Final, Literal

__all__ = [
    "BODY",
    "DONE",
    "HEAD",
    "MAX_DECODED",
    "MAX_HEAD",
    "MAX_LINE",
    "ChunkedReader",
    "ContentLengthReader",
    "Http10Reader",
    "Http11Error",
    "ResponseParser",
    "body_framing",
    "content_decoder",
    "keep_alive",
    "parse_head",
]

HEAD: Final = 0  # waiting for (the rest of) the head
BODY: Final = 1  # the head is in; the body is not complete
DONE: Final = 2  # the response is complete

MAX_HEAD: Final = 64 * 1024  # bytes of one head (status line and headers), or of trailers
MAX_LINE: Final = 4096  # bytes of one chunk-size line, extensions included
MAX_SIZE_DIGITS: Final = 16  # hex digits of a chunk size (64 bits)
MAX_LENGTH_DIGITS: Final = 20  # decimal digits of a Content-Length (like h11)
MAX_DECODED: Final = 256 * 1024  # decoded bytes one feed() or pump() produces at most

Framing = Literal["none", "chunked", "length", "close"]
Feed = Callable[[bytes], None]
Done = Callable[[bytes], None]

_TOKEN = rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+"
_VALUE = rb"(?:[^\x00\s]+(?:[ \t]+[^\x00\s]+)*)?"
_FIELD_RE: Final = re.compile(rb"(" + _TOKEN + rb"):[ \t]*(" + _VALUE + rb")[ \t]*")
_STATUS_RE: Final = re.compile(rb"HTTP/([0-9]\.[0-9]) ([0-9]{3})(?: ((?:[ \t]|[^\x00\s])*))?")
_SIZE_RE: Final = re.compile(rb"[0-9A-Fa-f]+")
_EXT_RE: Final = re.compile(rb"[\t\x20-\x7e\x80-\xff]*")
_HEAD_END_RE: Final = re.compile(rb"\n\r?\n")
_LENGTH_RE: Final = re.compile(rb"[0-9]+")


class Http11Error(Exception):
    """The bytes are not an HTTP/1.1 response as allowed; ``rule`` names what was broken
    (``"status"``, ``"header"``, ``"bare-lf"``, ``"obs-fold"``, ``"version"``,
    ``"chunk-size"``, ``"chunk-ext"``, ``"too-long"``, ``"framing"``, ``"encoding"``,
    ``"incomplete"``, ...). Messages are our own text and show at most 40 bytes."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule


def _shown(data: bytes) -> str:
    return repr(data[:40]) + ("..." if len(data) > 40 else "")


def _detached(data: bytes) -> None:
    raise Http11Error("detached", "bytes after the response was released")


# -- the head: pure functions ----------------------------------------------------------------


class Head:
    """One parsed head: ``version`` (``"1.0"``/``"1.1"``), ``status``, ``reason``, ``fields``
    (``(name, value)`` as sent, latin-1)."""

    __slots__ = ("fields", "reason", "status", "version")

    def __init__(
        self, version: str, status: int, reason: str, fields: list[tuple[str, str]]
    ) -> None:
        self.version = version
        self.status = status
        self.reason = reason
        self.fields = fields


def _lines(block: bytes) -> list[bytes]:
    """The lines of a head or trailer block that ends with its empty line; CRLF only."""
    if not block.endswith(b"\r\n\r\n"):
        raise Http11Error("bare-lf", "a line of the head ends in a bare LF")
    lines = block[:-4].split(b"\r\n")
    for line in lines:
        if b"\n" in line:
            raise Http11Error("bare-lf", "a line of the head ends in a bare LF")
    return lines


def parse_fields(lines: list[bytes]) -> list[tuple[str, str]]:
    """Header (or trailer) lines as ``(name, value)``: names are tokens right before the
    colon, values have no NUL, CR, LF, VT or FF; obs-fold lines are refused."""
    fields = []
    for line in lines:
        if line[:1] in (b" ", b"\t"):
            raise Http11Error("obs-fold", f"obsolete folded header line {_shown(line)}")
        match = _FIELD_RE.fullmatch(line)
        if match is None:
            raise Http11Error("header", f"bad header line {_shown(line)}")
        fields.append((match[1].decode("ascii"), match[2].decode("latin-1")))
    return fields


def parse_head(block: bytes) -> Head:
    """The status line and headers of ``block`` (which ends with the empty line)."""
    lines = _lines(block)
    match = _STATUS_RE.fullmatch(lines[0])
    if match is None:
        raise Http11Error("status", f"bad status line {_shown(lines[0])}")
    version = match[1].decode("ascii")
    if version not in ("1.0", "1.1"):
        raise Http11Error("version", f"not an HTTP/1.x response: HTTP/{version}")
    status = int(match[2])
    if status < 100:
        raise Http11Error("status", f"bad status code {status}")
    reason = (match[3] or b"").decode("latin-1")
    return Head(version, status, reason, parse_fields(lines[1:]))


def _content_length(joined: str) -> int:
    """The one Content-Length all the values (repeated headers joined by commas) agree on."""
    seen = {item.strip(" \t") for item in joined.split(",")}
    if len(seen) > 1:
        raise Http11Error("framing", "conflicting Content-Length values")
    value = seen.pop()
    if not _LENGTH_RE.fullmatch(value.encode("latin-1")) or len(value) > MAX_LENGTH_DIGITS:
        raise Http11Error("framing", f"bad Content-Length {value[:40]!r}")
    return int(value)


def body_framing(
    status: int, head_only: bool, headers: dict[str, str], te_count: int
) -> tuple[Framing, int]:
    """How the body of a final response is delimited, as h11 decides it (RFC 9112 6.3):
    none for HEAD, 204 and 304 (and 101); then ``Transfer-Encoding: chunked`` (the only
    transfer coding allowed, once) beats Content-Length; else Content-Length; else the end
    of the connection. Content-Length and Transfer-Encoding are checked in every case."""
    encoding = headers.get("transfer-encoding")
    if te_count > 1 or (encoding is not None and encoding.lower() != "chunked"):
        raise Http11Error("framing", "unsupported Transfer-Encoding (only chunked is)")
    length_value = headers.get("content-length")
    length = None if length_value is None else _content_length(length_value)
    if head_only or status in (101, 204, 304):
        return "none", 0
    if encoding is not None:
        return "chunked", 0
    if length is not None:
        return ("length", length) if length else ("none", 0)
    return "close", 0


def keep_alive(version: str, status: int, headers: dict[str, str], framing: Framing) -> bool:
    """Whether the connection may carry another exchange after this response: HTTP/1.1,
    no ``Connection: close``, not a protocol switch, a body with its own end, and not both
    Transfer-Encoding and Content-Length (a smuggling attempt, or a broken proxy)."""
    connection = headers.get("connection", "").lower()
    if "close" in {token.strip(" \t") for token in connection.split(",")}:
        return False
    if "transfer-encoding" in headers and "content-length" in headers:
        return False
    return version == "1.1" and status != 101 and framing != "close"


# -- content codings -------------------------------------------------------------------------


def _zlib_header(data: bytes) -> bool:
    """Whether ``data`` starts like a zlib stream (RFC 1950: deflate, checksummed header)."""
    return data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0


class _Decoder:
    """Incremental gzip / deflate decoding, bounded per call."""

    __slots__ = ("_obj", "_prefix", "_started", "coding")

    def __init__(self, coding: str) -> None:
        self.coding = coding
        self._obj = self._new()
        self._started = False  # some input was given
        self._prefix = b""  # deflate: the first byte, until the second tells the wrapper

    def _new(self, wbits: int = zlib.MAX_WBITS | 16) -> zlib._Decompress:
        return zlib.decompressobj(wbits)

    def decode(self, data: bytes, limit: int) -> tuple[bytes, bytes]:
        """Decode up to ``limit`` bytes out of ``data``; return them and the input left."""
        if self.coding == "deflate" and not self._started:
            # "deflate" is meant to be zlib-wrapped (RFC 9110), but some servers send it raw.
            data = self._prefix + data
            if len(data) < 2:
                self._prefix = data
                return b"", b""
            self._obj = self._new(zlib.MAX_WBITS if _zlib_header(data) else -zlib.MAX_WBITS)
        self._started = True
        try:
            out = self._obj.decompress(data, limit)
        except zlib.error:
            raise Http11Error("encoding", f"the {self.coding} body is corrupt") from None
        return out, self._rest()

    def _rest(self) -> bytes:
        obj = self._obj
        if not obj.eof or not obj.unused_data:
            return obj.unconsumed_tail
        if self.coding != "gzip":
            raise Http11Error("encoding", f"data after the end of the {self.coding} stream")
        rest = obj.unused_data  # another gzip member follows
        self._obj = self._new()
        return rest

    @property
    def finished(self) -> bool:
        return self._obj.eof or not (self._started or self._prefix)


def content_decoder(value: str | None) -> _Decoder | None:
    """The decoder for a Content-Encoding header value (None: identity)."""
    if value is None:
        return None
    codings = [c.strip(" \t").lower() for c in value.split(",")]
    codings = [c for c in codings if c and c != "identity"]
    if not codings:
        return None
    if len(codings) > 1:
        raise Http11Error("encoding", f"more than one content coding: {value[:40]!r}")
    coding = {"gzip": "gzip", "x-gzip": "gzip", "deflate": "deflate"}.get(codings[0])
    if coding is None:
        raise Http11Error("encoding", f"unsupported content coding {codings[0][:40]!r}")
    return _Decoder(coding)


# -- body readers -----------------------------------------------------------------------------


class ContentLengthReader:
    """A body of ``length`` bytes (``length`` > 0)."""

    __slots__ = ("_done", "_left", "_out")

    def __init__(self, length: int, out: list[bytes], done: Done) -> None:
        self._left = length
        self._out = out
        self._done = done

    def feed(self, data: bytes) -> None:
        left = self._left
        n = len(data)
        if n < left:
            if n:
                self._out.append(data)
                self._left = left - n
            return
        self._out.append(data if n == left else data[:left])
        self._left = 0
        self._done(data[left:])

    def eof(self) -> None:
        raise Http11Error(
            "incomplete", f"the connection ended {self._left} bytes before the end of the body"
        )


class Http10Reader:
    """A body that ends with the connection."""

    __slots__ = ("_done", "_out")

    def __init__(self, out: list[bytes], done: Done) -> None:
        self._out = out
        self._done = done

    def feed(self, data: bytes) -> None:
        if data:
            self._out.append(data)

    def eof(self) -> None:
        self._done(b"")


_SIZE: Final = 0  # a chunk-size line
_DATA: Final = 1  # inside a chunk's data
_CRLF: Final = 2  # the CRLF after a chunk's data
_TRAILER: Final = 3  # trailer lines up to the empty line
_END: Final = 4  # complete


# Chunk-size lines as servers write them (lower-case hex, no leading zero, no extension) up
# to 0xfff, and their values: a dict lookup is cheaper than int() with the checks that make
# it strict. Filled by the first ChunkedReader (about 400 KB).
_SIZES: Final[dict[bytes, int]] = {}


def chunk_size(line: bytes) -> int:
    """The size in a chunk-size line (without its CRLF): ``1*16HEXDIG [ ";" ext ] OWS``
    (like h11: no whitespace before the ``;``; extensions are not parsed)."""
    size, sep, ext = line.partition(b";")
    if not sep:
        size = size.rstrip(b" \t")
    if not _SIZE_RE.fullmatch(size):
        raise Http11Error("chunk-size", f"bad chunk-size line {_shown(line)}")
    if len(size) > MAX_SIZE_DIGITS:
        raise Http11Error("chunk-size", f"chunk size of {len(size)} digits")
    if not _EXT_RE.fullmatch(ext):
        raise Http11Error("chunk-ext", f"bad chunk extension {_shown(line)}")
    return int(size, 16)


class ChunkedReader:
    """A ``Transfer-Encoding: chunked`` body: extensions skipped, trailers checked and kept
    in ``trailers``."""

    __slots__ = ("_done", "_left", "_out", "_pending", "_state", "trailers")

    def __init__(self, out: list[bytes], done: Done) -> None:
        if not _SIZES:
            _SIZES.update({b"%x" % size: size for size in range(4096)})
        self._out = out
        self._done = done
        self._state = _SIZE
        self._left = 0  # bytes of the current chunk still to come
        self._pending = b""  # an incomplete line (size, CRLF, trailers) so far
        self.trailers: list[tuple[str, str]] = []

    def feed(self, data: bytes) -> None:
        """Take the next bytes of the body. The fast path is the usual read of a streaming
        server: one whole chunk (``1a3\r\n...\r\n``) that starts the read."""
        if self._pending or self._state:  # (_SIZE is 0)
            self._feed(data, 0)
            return
        eol = data.find(b"\r\n")
        if 0 < eol < 4:
            size = _SIZES.get(data[:eol])
            if size:
                start = eol + 2
                end = start + size
                if data[end : end + 2] == b"\r\n":
                    self._out.append(data[start:end])
                    if end + 2 < len(data):
                        self._feed(data, end + 2)
                    return
        self._feed(data, 0)

    def _feed(self, data: bytes, i: int) -> None:
        """Take ``data[i:]``, in any state."""
        if self._pending:
            data = self._pending + data
            self._pending = b""
        n = len(data)
        while i < n:
            if self._state != _SIZE:
                i = self._step(data, i)
                continue
            eol = data.find(b"\r\n", i)
            if eol < 0:
                self._hold(data, i, MAX_LINE, "chunk-size line")
                return
            line = data[i:eol]
            size = _SIZES.get(line)  # the sizes servers write, checked once for all
            if size is None:
                size = chunk_size(line)
            i = eol + 2
            end = i + size
            if size and end + 2 <= n and data.startswith(b"\r\n", end):
                self._out.append(data[i:end])  # the whole chunk is here
                i = end + 2
            else:
                self._left = size
                self._state = _DATA if size else _TRAILER

    def _step(self, data: bytes, i: int) -> int:
        """Go on in any state but a chunk-size line; return where to go on from."""
        state = self._state
        if state == _DATA:
            left = self._left
            n = len(data)
            if n - i <= left:
                self._out.append(data[i:] if i else data)
                self._left = left - (n - i)
                self._state = _DATA if self._left else _CRLF
                return n
            self._out.append(data[i : i + left])
            self._state = _CRLF
            return i + left
        if state == _CRLF:
            if data.startswith(b"\r\n", i):
                self._state = _SIZE
                return i + 2
            if len(data) - i == 1 and data[i] == 13:
                self._pending = b"\r"
                return i + 1
            raise Http11Error("chunk-size", "chunk data not followed by CRLF")
        if state == _TRAILER:
            return self._trailer(data, i)
        raise Http11Error("framing", "data after the end of the chunked body")  # not reached

    def _trailer(self, data: bytes, i: int) -> int:
        if data.startswith(b"\r\n", i):  # the empty line: no (more) trailers
            block = b"\r\n"
        else:
            end = data.find(b"\r\n\r\n", i)
            if end < 0:
                self._hold(data, i, MAX_HEAD, "trailer section")
                return len(data)
            block = data[i : end + 4]
        if block != b"\r\n":
            self.trailers = parse_fields(_lines(block))
        self._state = _END
        self._done(data[i + len(block) :])
        return len(data)

    def _hold(self, data: bytes, i: int, limit: int, what: str) -> None:
        """Keep the incomplete line (or trailer section) that starts at ``i``."""
        rest = data[i:]
        if len(rest) > limit:
            raise Http11Error("too-long", f"{what} longer than {limit} bytes")
        if b"\n" in rest.replace(b"\r\n", b""):
            raise Http11Error("bare-lf", f"bare LF in a {what}")
        self._pending = rest

    def eof(self) -> None:
        raise Http11Error("incomplete", "the connection ended inside a chunked body")


Reader = ChunkedReader | ContentLengthReader | Http10Reader


# -- the parser -------------------------------------------------------------------------------


class ResponseParser:
    """The framing of one response (see the module docstring). ``head_only``: the request
    was ``HEAD`` (no body whatever the headers say)."""

    __slots__ = (
        "_decoder",
        "_framed",
        "_head",
        "_interim",
        "_raw",
        "_reader",
        "_scanned",
        "backlog",
        "body",
        "feed",
        "fields",
        "head_only",
        "headers",
        "keep_alive",
        "reason",
        "state",
        "status",
        "trailing",
        "version",
    )

    def __init__(self, *, head_only: bool = False) -> None:
        self.head_only = head_only
        self.state: int = HEAD
        self.feed: Feed = self._feed_head
        self.body: list[bytes] = []
        self.status = 0
        self.reason = ""
        self.version = ""
        self.fields: list[tuple[str, str]] = []
        self.headers: dict[str, str] = {}
        self.keep_alive = False
        self.trailing = b""
        self.backlog = False  # decoded output is waiting for pump()
        self._head = b""  # the incomplete head so far
        self._scanned = 0  # how far _head was searched for its end
        self._reader: Reader | None = None
        self._decoder: _Decoder | None = None
        self._raw: list[bytes] = []  # encoded body bytes not decoded yet
        self._framed = False  # the reader saw the end of the (encoded) body
        self._interim = False  # an interim (1xx) response was skipped

    @property
    def started(self) -> bool:
        """Whether any byte of the response arrived."""
        return self.state != HEAD or self._interim or bool(self._head)

    @property
    def trailers(self) -> list[tuple[str, str]]:
        reader = self._reader
        return reader.trailers if isinstance(reader, ChunkedReader) else []

    # -- the head --------------------------------------------------------------------------
    def _feed_head(self, data: bytes) -> None:
        head = self._head + data if self._head else data
        match = _HEAD_END_RE.search(head, max(0, self._scanned - 2))
        if match is None:
            if not b"HTTP/".startswith(head[:5]):
                raise Http11Error("status", f"not an HTTP/1.x response: {_shown(head)}")
            if len(head) > MAX_HEAD:
                raise Http11Error("too-long", f"response head longer than {MAX_HEAD} bytes")
            self._head = head
            self._scanned = len(head)
            return
        end = match.end()
        self._head = b""
        self._scanned = 0
        self._start(parse_head(head[:end]), head[end:])

    def _start(self, head: Head, rest: bytes) -> None:
        """A head is in: skip an interim response, else choose the body's reader."""
        headers: dict[str, str] = {}
        te_count = 0
        for name, value in head.fields:
            key = name.lower()
            te_count += key == "transfer-encoding"
            old = headers.get(key)
            headers[key] = value if old is None else f"{old}, {value}"
        framing, length = body_framing(head.status, self.head_only, headers, te_count)
        if 100 <= head.status < 200 and head.status != 101:
            self._interim = True
            if rest:
                self.feed(rest)  # the final response follows
            return
        self.status, self.reason, self.version = head.status, head.reason, head.version
        self.fields, self.headers = head.fields, headers
        self.keep_alive = keep_alive(head.version, head.status, headers, framing)
        if framing != "none":
            self._decoder = content_decoder(headers.get("content-encoding"))
        self.state = BODY
        if framing == "none":
            self._framed_end(rest)
            return
        self._body(framing, length)
        if rest:
            self.feed(rest)

    def _body(self, framing: Framing, length: int) -> None:
        out = self.body if self._decoder is None else self._raw
        reader: Reader
        if framing == "chunked":
            reader = ChunkedReader(out, self._framed_end)
        elif framing == "length":
            reader = ContentLengthReader(length, out, self._framed_end)
        else:
            reader = Http10Reader(out, self._framed_end)
        self._reader = reader
        self.feed = reader.feed if self._decoder is None else self._feed_decoded

    def detach(self) -> None:
        """Nobody feeds this parser any more (its response was released, or its connection
        ended): break its reference cycles (``feed`` is a bound method, of the parser or of
        its reader, and the reader calls back into the parser), so it is freed at once and
        not left to the cyclic garbage collector: at a thousand streams, those collections
        were the longest pauses in the client. What it parsed stays readable."""
        self.feed = _detached
        self._reader = None

    # -- the end ----------------------------------------------------------------------------
    def _framed_end(self, rest: bytes) -> None:
        """The reader saw the end of the body; ``rest`` came after it."""
        self._framed = True
        self.feed = self._feed_after
        if rest:
            self._feed_after(rest)
        if self._decoder is None:
            self.state = DONE

    def _feed_after(self, data: bytes) -> None:
        room = MAX_HEAD - len(self.trailing)
        if room > 0:
            self.trailing += data[:room]
        self.keep_alive = False

    def eof(self) -> None:
        """The connection ended: completes a body delimited by it; raises
        :class:`Http11Error` (``rule="incomplete"``) when the response is cut short."""
        if self.state == HEAD:
            raise Http11Error("incomplete", "the connection ended before the response head")
        if not self._framed and self._reader is not None:
            self._reader.eof()
            if self._decoder is not None and not self.backlog:
                self._decode()

    # -- decoding ---------------------------------------------------------------------------
    def _feed_decoded(self, data: bytes) -> None:
        reader = self._reader
        assert reader is not None
        reader.feed(data)
        if not self.backlog:
            self._decode()

    def pump(self) -> None:
        """Decode the next piece of a backlog (at most :data:`MAX_DECODED` bytes)."""
        if self.backlog:
            self._decode()

    def _decode(self) -> None:
        decoder = self._decoder
        assert decoder is not None
        raw = self._raw
        data = raw[0] if len(raw) == 1 else b"".join(raw)
        raw.clear()
        out, rest = decoder.decode(data, MAX_DECODED) if data else (b"", b"")
        if out:
            self.body.append(out)
        self.backlog = bool(rest) or len(out) == MAX_DECODED
        if rest:
            raw.append(rest)
        if self.backlog or not self._framed:
            return
        if not decoder.finished:
            raise Http11Error("encoding", f"the {decoder.coding} body is truncated")
        self.state = DONE
