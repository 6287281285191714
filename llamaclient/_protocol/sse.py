"""A pure, byte-level Server-Sent Events decoder (no I/O).

Feed it the response body as it arrives; it returns the ``data`` of each event the chunk
completes::

    decoder = SSEDecoder()
    async for chunk in body:
        for data in decoder.feed(chunk):
            ...  # bytes: one event's data, e.g. b'{"choices":[...]}' or b"[DONE]"
    for data in decoder.flush():  # the body ended
        ...

It follows the WHATWG "event stream interpretation" rules
(https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation):

- lines end in ``\\r\\n``, ``\\n`` or ``\\r``, also when a ``\\r\\n`` is split across chunks;
- a blank line dispatches the event; ``data`` lines are joined with ``b"\\n"``;
- exactly one space after the colon is stripped; a line without a colon is a field name
  with an empty value; lines starting with ``:`` are comments (llama-server's ``:`` ping);
- ``event`` sets the type; events of the default type ``message`` are returned, and so are
  ``error`` events, as :class:`ErrorData` (Groq's in-band error is ``event: error`` then
  ``data: {"error": ...}``); events of any other type are ignored;
  ``id`` (ignored if it holds NUL) sets ``last_event_id``; ``retry`` (ASCII digits only)
  sets ``retry``; other fields are ignored;
- an event whose data buffer is empty is not dispatched;
- one leading UTF-8 byte order mark is stripped.

One deliberate departure: the spec discards an event that the body ends in before its
blank line; ``flush()`` returns it, so a server that closes without the final blank line
loses nothing. A truncated event then shows up as data the caller cannot parse.

Payloads stay ``bytes`` until a line is complete, so a UTF-8 sequence split across reads is
never decoded half-way (``\\r`` and ``\\n`` never occur inside a multi-byte sequence).

Fast path for llama-server's ``data: <compact JSON>\\n\\n`` events: a read holding exactly
one event is a few ``bytes`` method calls; a read of several is one ``split(b"\\n")`` plus
C-level checks (``any``/``all``/``map``), with no Python loop per event. The start of an event
cut by the end of a read is kept raw and joined to the next read. Other fields, comments,
multi-line events and CR line ends take a per-block or per-line path. An incomplete event
over 64 KiB is kept line by line, its last line as pieces that are joined once, so a long
line costs linear time.

Memory is bounded: the decoder never holds more than ``max_event_bytes`` of one event (its
``data`` values, one byte more each for the joining newline, plus the line being read); an
event that would need more raises :class:`~llamaclient.ProtocolError` naming the limit, and the
decoder must not be fed again. So no returned ``data`` is ever longer than the limit, however
the body is split. The check costs nothing per event on the fast paths: a read is only
measured once (a read longer than the limit goes the line-by-line way), and an event cut by
the end of a read once, when it is joined.
"""

from __future__ import annotations

from itertools import repeat
from operator import itemgetter

from .._types.config import MAX_EVENT_BYTES
from .._types.errors import RAW_KEPT, ProtocolError

__all__ = ["ErrorData", "SSEDecoder"]

_BOM = b"\xef\xbb\xbf"
_DATA = b"data: "
_LF = b"\n"
_LFLF = b"\n\n"
_CR = b"\r"
_CRLF = b"\r\n"
_MESSAGE = b"message"
_ERROR = b"error"
_PAYLOAD = itemgetter(slice(6, None))  # b"data: <payload>" -> b"<payload>"
_RAW_LIMIT = 1 << 16  # an incomplete event bigger than this is taken apart line by line


class ErrorData(bytes):
    """The data of an ``event: error`` event: the server reports an error in-band."""

    __slots__ = ()


class SSEDecoder:
    """Incremental SSE decoder: ``feed()`` body bytes, get the completed events' ``data``.

    Also tracks the stream state the spec keeps across events: ``last_event_id`` (the last
    ``id`` field), ``retry`` (the last valid ``retry`` field, milliseconds) and
    ``last_event_type`` (the type of the last completed event with data, returned or not).
    """

    __slots__ = (
        "_bom",
        "_cr",
        "_data",
        "_data_size",
        "_edge",
        "_id",
        "_line",
        "_line_size",
        "_max",
        "_raw",
        "_raw_max",
        "_raw_size",
        "_retry",
        "_type",
        "_type_seen",
    )

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        if max_event_bytes < 1:
            raise ValueError(f"max_event_bytes must be positive, not {max_event_bytes}")
        self._max = max_event_bytes
        self._raw_max = min(_RAW_LIMIT, max_event_bytes)
        self._edge = True  # a BOM may still come, or the last chunk ended in "\r"
        self._bom: bytes | None = b""  # bytes seen while a BOM is still possible; None: done
        self._cr = False  # the last chunk ended in "\r": drop a "\n" that starts the next
        # The incomplete event after the last event boundary, kept as raw pieces while small:
        self._raw: list[bytes] = []
        self._raw_size = 0
        # Line-by-line state, used inside an event that was too big to keep raw:
        self._line: list[bytes] = []  # pieces of the incomplete last line
        self._line_size = 0
        self._data: list[bytes] = []  # data lines of the current event
        self._data_size = 0  # their length, plus one each for the joining newline
        self._type = b""  # event type buffer of the current event
        self._type_seen = _MESSAGE
        self._id = b""
        self._retry: int | None = None

    @property
    def last_event_id(self) -> bytes:
        """The last event ID buffer: the value of the last ``id`` field (``b""`` if none)."""
        return self._id

    @property
    def retry(self) -> int | None:
        """The reconnection time the server asked for with ``retry``, or None."""
        return self._retry

    @property
    def last_event_type(self) -> bytes:
        """The type of the last completed event that had data (``b"message"`` by default)."""
        return self._type_seen

    def feed(self, chunk: bytes) -> list[bytes]:
        """Decode the next piece of the body; return the data of each event it completes."""
        # The common read first: exactly one whole ``data: <line>\n\n`` event, at an event
        # boundary (nothing pending), no CR anywhere, within the size limit.
        if chunk.startswith(_DATA) and not (
            self._edge or self._raw or self._line or self._data or self._type
        ):
            end = chunk.find(_LF)
            size = len(chunk)
            if end == size - 2 and chunk[-1] == 10 and size <= self._max and _CR not in chunk:
                self._type_seen = _MESSAGE
                return [chunk[6:end]]
        if self._edge:
            chunk = self._strip_edge(chunk)
        if chunk.find(_CR) >= 0:
            self._cr = self._edge = chunk[-1:] == _CR
            chunk = chunk.replace(_CRLF, _LF).replace(_CR, _LF)
        # From here on, lines end in "\n" only.
        if not chunk:
            return []
        out: list[bytes] = []
        if len(chunk) > self._max:  # could hold an event over the limit: measure each
            self._big(chunk, out)
            return out
        if self._raw or self._line or self._data or self._type:
            chunk = self._go_on(chunk, out)
            if not chunk:
                return out
        # At an event boundary. The common case: only "data: <line>\n\n" events.
        if chunk.startswith(_DATA):
            end = chunk.find(_LF)
            if end == len(chunk) - 2 and chunk.endswith(_LFLF):  # exactly one event
                self._type_seen = _MESSAGE
                out.append(chunk[6:end])
                return out
            if self._only_data(chunk, out):
                return out
        self._blocks(chunk, out)
        return out

    def _go_on(self, chunk: bytes, out: list[bytes]) -> bytes:
        """Continue what the last piece left open; return what is left from an event
        boundary on (b"" when nothing is)."""
        raw = self._raw
        if not raw:
            return self._finish_event(chunk, out)
        if chunk.find(_LF) < 0:  # the event's current line goes on
            raw.append(chunk)
            self._raw_size += len(chunk)
            if self._raw_size > self._raw_max:
                self._raw = []
                self._lines(b"".join(raw), out)
            return b""
        self._raw = []
        if self._raw_size + len(chunk) > self._max:  # the joined text may be too much
            self._lines(b"".join(raw), out)
            return self._finish_event(chunk, out)
        raw.append(chunk)
        return b"".join(raw)

    def _only_data(self, chunk: bytes, out: list[bytes]) -> bool:
        """Whole ``data:`` events, one line each, and maybe the start of the next: decoded
        into ``out`` (True); anything else is left to the general path (False)."""
        lines = chunk.split(_LF)
        n = len(lines)
        if not n & 1:
            return False
        heads = lines[0 : n - 1 : 2]
        if any(lines[1::2]) or not all(map(bytes.startswith, heads, repeat(_DATA))):
            return False
        if heads:
            out += map(_PAYLOAD, heads)
            self._type_seen = _MESSAGE
        rest = lines[-1]
        if rest:
            self._keep(rest, out)
        return True

    def _blocks(self, chunk: bytes, out: list[bytes]) -> None:
        """The general path: events separated by blank lines, any fields."""
        blocks = chunk.split(_LFLF)
        rest = blocks.pop()
        for block in blocks:
            if block.startswith(_DATA) and _LF not in block:
                out.append(block[6:])
                self._type_seen = _MESSAGE
            elif block:
                for line in block.split(_LF):
                    self._field(line, out)
                self._dispatch(out)
        if rest:
            self._keep(rest, out)

    def flush(self) -> list[bytes]:
        """The body ended: return the data of an event it left without its blank line."""
        out: list[bytes] = []
        self._bom = None  # one or two bytes of a BOM can never form a field line
        self._cr = self._edge = False
        if self._raw:
            self._lines(b"".join(self._raw), out)
            self._raw = []
        if self._line:
            line = b"".join(self._line)
            self._line = []
            self._line_size = 0
            self._field(line, out)
        self._dispatch(out)
        return out

    def _big(self, chunk: bytes, out: list[bytes]) -> None:
        """A read longer than ``max_event_bytes``: line by line, every event measured."""
        if self._raw:
            raw = self._raw
            self._raw = []
            self._lines(b"".join(raw), out)
        rest = self._finish_event(chunk, out)
        if rest:
            self._lines(rest, out)

    def _strip_edge(self, chunk: bytes) -> bytes:
        """Drop a leading BOM, or the "\n" of a "\r\n" split across chunks."""
        if self._bom is not None:
            chunk = self._bom + chunk
            if len(chunk) < 3 and _BOM.startswith(chunk):
                self._bom = chunk
                return b""
            self._bom = None
            if chunk.startswith(_BOM):
                chunk = chunk[3:]
        if self._cr and chunk:
            self._cr = False
            if chunk[:1] == _LF:
                chunk = chunk[1:]
        self._edge = self._cr or self._bom is not None
        return chunk

    def _keep(self, rest: bytes, out: list[bytes]) -> None:
        """Keep the start of the next event: raw if small, else line by line."""
        if len(rest) > self._raw_max:
            self._lines(rest, out)
        else:
            self._raw.append(rest)
            self._raw_size = len(rest)

    def _finish_event(self, chunk: bytes, out: list[bytes]) -> bytes:
        """Inside an event kept line by line: take lines up to its end; return the rest."""
        if self._line:
            end = chunk.find(_LF)
            if end < 0:
                self._add_piece(chunk)
                return b""
            self._add_piece(chunk[:end])
            line = b"".join(self._line)
            self._line = []
            self._line_size = 0
            self._field(line, out)
            chunk = chunk[end + 1 :]
            if not (self._data or self._type):
                return chunk
        if chunk[:1] == _LF:
            self._dispatch(out)
            return chunk[1:]
        end = chunk.find(_LFLF)
        if end < 0:
            self._lines(chunk, out)
            return b""
        for line in chunk[:end].split(_LF):
            self._field(line, out)
        self._dispatch(out)
        return chunk[end + 2 :]

    def _lines(self, text: bytes, out: list[bytes]) -> None:
        """Take the complete lines of ``text``; keep its incomplete last line."""
        lines = text.split(_LF)
        rest = lines.pop()
        for line in lines:
            self._field(line, out)
        if rest:
            self._add_piece(rest)

    def _add_piece(self, piece: bytes) -> None:
        """Keep a piece of the incomplete last line, within the limit."""
        self._line.append(piece)
        self._line_size += len(piece)
        if self._line_size + self._data_size > self._max:
            self._overflow()

    def _overflow(self) -> None:
        """The current event is over the limit: drop what is held of it and say so."""
        sample = b"".join(self._data[:1] or self._line[:1])[:RAW_KEPT]
        self._raw, self._line, self._data = [], [], []
        self._line_size = self._data_size = 0
        self._type = b""
        raise ProtocolError(
            f"a server-sent event is longer than max_event_bytes ({self._max} bytes)", sample
        )

    def _field(self, line: bytes, out: list[bytes]) -> None:
        """Interpret one line: a blank line dispatches, others set a field."""
        if not line:
            self._dispatch(out)
            return
        if line[:1] == b":":
            return
        name, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
            self._data_size += len(value) + 1
            if self._data_size > self._max:
                self._overflow()
        elif name == b"event":
            self._type = value
        elif name == b"id":
            if b"\0" not in value:
                self._id = value
        elif name == b"retry" and value.isdigit():
            self._retry = int(value)

    def _dispatch(self, out: list[bytes]) -> None:
        """End of an event: deliver it if it has data and the default type; reset it."""
        if self._data:
            kind = self._type or _MESSAGE
            if kind == _MESSAGE:
                out.append(b"\n".join(self._data))
            elif kind == _ERROR:
                out.append(ErrorData(b"\n".join(self._data)))
            self._type_seen = kind
            self._data = []
            self._data_size = 0
        self._type = b""
