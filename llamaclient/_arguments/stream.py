"""Live, field-by-field decoding of one streamed tool call's JSON arguments.

llama-server streams a tool call's ``arguments`` as raw JSON text in fragments that may split
anywhere: inside a key, inside an escape such as ``\\n`` or ``\\u00e9``, or between the two
halves of a surrogate pair ``\\uD83D\\uDE00``. :class:`ArgumentStream` parses those fragments
incrementally and hands each top-level field to whoever wants it:

- :meth:`ArgumentStream.field` returns a :class:`FieldHandle`. Its :meth:`~FieldHandle.delta`
  gives the field's *decoded* text piece by piece as it arrives (escapes resolved, so code can
  be typed into an editor as the model writes it); :meth:`~FieldHandle.wait` gives the complete
  value: the string for string fields, the parsed value for the others.
- Fields nobody took a handle for land in :attr:`ArgumentStream.fields`, each one as soon as
  its value is complete.
- :meth:`ArgumentStream.feed` and :meth:`ArgumentStream.finish` also return the decoded text of
  every top-level string field that became available, as ``(field, text, done)`` tuples, so a
  synchronous loop can turn them into events without awaiting anything.

Where the fragments split never changes any output.

Strict mode (:meth:`ArgumentStream.strict`) requires well-formed JSON. A bad escape, an
unpaired surrogate, a raw control character in a string, a string or object that never closes,
a trailing comma, or text after the closing ``}`` raises :class:`ProtocolError`, whose message
(and ``raw`` attribute) carries the raw text received.

Lenient mode (:meth:`ArgumentStream.lenient`) tolerates models that are sloppy with escaping,
in every top-level string *value*:

- An unescaped ``"`` closes the string only if what follows it (whitespace optional
  everywhere) is ``, "<key>":`` (the next field; the key is a full, well-formed JSON string),
  or ``}`` and then nothing up to the end of input, or the end of input itself. Any other
  ``"`` is literal content. The one unavoidable misfire: content that literally contains
  ``", "somekey":`` reads as a field boundary.
- A raw control character (such as a real newline) is itself; a ``\\`` before a character that
  does not start a JSON escape is a literal backslash (a valid escape still decodes: ``C:\\temp``
  gives a tab); a broken ``\\u`` escape is kept as literal text; an unpaired surrogate becomes
  U+FFFD. Content is never dropped.
- If the input stops early (inside a string, before the closing ``}``, inside a partial escape
  or a partial boundary), :meth:`~ArgumentStream.finish` accepts what arrived: an open string
  ends there, a dangling partial escape is kept literally, a partial boundary is content, and
  a repair pass completes a truncated trailing non-string value (``1``, ``tru``, ``[1, {"a": 2``)
  and fills it in if that field was not already parsed. A trailing comma before ``}`` is
  accepted.

Keys, numbers, booleans, null and nested objects/arrays must be well-formed JSON in both modes;
nested values are parsed whole with :func:`json.loads` once complete (only top-level strings
stream). An empty or all-whitespace argument text is a valid call of a tool without
parameters: ``{}``. With duplicate keys, the last one wins in :attr:`~ArgumentStream.fields`; a
handle keeps the first complete value it received.

Every failure (malformed input, a field that never arrived, feeding after :meth:`finish` or
after an error) raises :class:`ProtocolError`.

The work is proportional to the input: each fragment is scanned with compiled regular
expressions that jump over runs of ordinary characters, and nothing is re-parsed. Handles wake
their awaiting consumers through an ``asyncio.Event`` created lazily, so everything can be built
outside a running loop; feeding must happen on the loop's thread.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from .._types.errors import ProtocolError

__all__ = ["ArgumentStream", "FieldHandle", "FieldText"]


class FieldText(NamedTuple):
    """Decoded text of the top-level string field ``field`` that became available.

    ``done`` marks the field's last piece; ``text`` may then be ``""``.
    """

    field: str
    text: str
    done: bool


# Parser states.
_STR = 0  # inside a top-level string value
_PENDING = 1  # lenient: after an unescaped quote, deciding whether it closed the string
_SCALAR = 2  # inside a number / true / false / null
_NESTED = 3  # inside a nested object or array
_BEFORE_BRACE = 4
_FIRST_KEY = 5  # after "{": a key or "}"
_NEXT_KEY = 6  # after ",": a key (or "}" in lenient mode)
_IN_KEY = 7
_AFTER_KEY = 8  # expecting ":"
_BEFORE_VALUE = 9
_AFTER_VALUE = 10  # expecting "," or "}"
_CLOSED = 11  # after the final "}": only whitespace
_DONE = 12  # finish() succeeded
_FAILED = 13  # an error was raised

# Phases of the lenient continuation match after a candidate closing quote.
_P_QUOTE = 0  # right after the quote: "," or "}"
_P_COMMA = 1  # after ",": the next key's opening quote
_P_KEY = 2  # inside the candidate key
_P_AFTER_KEY = 3  # after the key: ":" confirms the boundary
_P_CLOSE = 4  # after "}": only whitespace until the end of input

# Where the string value being decoded goes.
_TO_FIELDS = 0
_TO_HANDLE = 1
_TO_NOWHERE = 2  # a duplicate key whose handle already completed

_WS = re.compile(r"[ \t\n\r]*")
_STRICT_SPECIAL = re.compile(r'["\\\x00-\x1f]')
_QUOTE_OR_BACKSLASH = re.compile(r'["\\]')
_NESTED_SPECIAL = re.compile(r'[{}\[\]"]')
_SCALAR_END = re.compile(r"[,} \t\n\r]")
_HEX = re.compile(r"[0-9a-fA-F]{0,4}")
_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SCALAR_START = frozenset("-0123456789tfn")
_SIMPLE_ESCAPES = {
    '"': '"',
    "\\": "\\",
    "/": "/",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
}

_UNSET: Any = object()


class FieldHandle:
    """The consumer side of one top-level argument field, from :meth:`ArgumentStream.field`.

    Consume it live with :meth:`delta` (or :meth:`take` from synchronous code), or all at once
    with :meth:`wait` (or :attr:`value` once :attr:`done`). Both work for any field.
    """

    __slots__ = ("_done", "_error", "_name", "_parts", "_read", "_value", "_waiter")

    def __init__(self, name: str) -> None:
        self._name = name
        self._parts: list[str] = []  # decoded text so far (string fields)
        self._read = 0  # how many of _parts delta()/take() handed out
        self._done = False
        self._value: Any = _UNSET
        self._error: ProtocolError | None = None
        self._waiter: asyncio.Event | None = None

    def __repr__(self) -> str:
        state = "failed" if self._error else "done" if self._done else "streaming"
        return f"<FieldHandle {self._name!r} {state}>"

    @property
    def name(self) -> str:
        """The field's name."""
        return self._name

    @property
    def done(self) -> bool:
        """True once nothing more will arrive: the value is complete, or the field failed
        (the call ended without it, or the stream raised)."""
        return self._done

    @property
    def value(self) -> Any:
        """The complete value (decoded string, or parsed JSON for other fields).

        Raises :class:`ProtocolError` if the field never arrived or the stream failed first,
        and :class:`asyncio.InvalidStateError` if it is not :attr:`done` yet.
        """
        if not self._done:
            raise asyncio.InvalidStateError(f"field {self._name!r} is not complete yet")
        if self._error is not None:
            raise self._error
        if self._value is _UNSET:
            self._value = "".join(self._parts)
        return self._value

    def take(self) -> str:
        """Decoded text that arrived since the last :meth:`take`/:meth:`delta`, without
        waiting (``""`` if none). Non-string fields never have text."""
        parts = self._parts
        start = self._read
        if start == len(parts):
            return ""
        self._read = len(parts)
        return parts[start] if len(parts) - start == 1 else "".join(parts[start:])

    async def delta(self) -> str | None:
        """The next piece of decoded text; ``None`` once the field is complete.

        Waits while nothing new has arrived. Raises :class:`ProtocolError` (after any text
        already received) if the field never arrives or the stream fails.
        """
        while True:
            if self._read < len(self._parts):
                return self.take()
            if self._done:
                if self._error is not None:
                    raise self._error
                return None
            await self._changed()

    async def wait(self) -> Any:
        """The complete value: the decoded string for string fields, the parsed value for
        others. Raises :class:`ProtocolError` if the field never arrives or the stream fails."""
        while not self._done:
            await self._changed()
        return self.value

    async def _changed(self) -> None:
        waiter = self._waiter
        if waiter is None:
            waiter = self._waiter = asyncio.Event()
        waiter.clear()
        await waiter.wait()

    def _notify(self) -> None:
        if self._waiter is not None:
            self._waiter.set()

    def _complete(self, value: Any = _UNSET) -> None:
        self._done = True
        self._value = value
        self._notify()

    def _close(self, error: ProtocolError) -> None:
        if not self._done:
            self._done = True
            self._error = error
            self._notify()


class ArgumentStream:
    """Incremental decoder for one tool call's streamed argument text.

    Take :meth:`field` handles for the fields you want to consume, push raw fragments with
    :meth:`feed`, and call :meth:`finish` when the call's arguments are complete. Fields
    without a handle land parsed in :attr:`fields`. ::

        args = ArgumentStream.strict()
        content = args.field("content")
        args.feed('{"path": "a.py", "content": "line1\\\\')   # split mid-escape
        args.fields["path"]                                 # 'a.py', already
        args.feed('nline2"}')
        args.finish()
        await content.wait()                                # 'line1\\nline2'
    """

    def __init__(self, *, lenient: bool = False) -> None:
        self._lenient = lenient
        self._special = _QUOTE_OR_BACKSLASH if lenient else _STRICT_SPECIAL
        self._state = _BEFORE_BRACE
        self._raw: list[str] = []
        self._error: ProtocolError | None = None
        self._truncated = False
        self._fields: dict[str, Any] = {}
        self._handles: dict[str, FieldHandle] = {}
        self._events: list[FieldText] = []
        self._key = ""  # the field whose value is being read
        # String value being decoded.
        self._out: list[str] = []  # decoded this fragment, not yet delivered
        self._sink: list[str] = []  # decoded so far (a handle's parts when routed to it)
        self._sink_mode = _TO_FIELDS
        self._sink_handle: FieldHandle | None = None
        self._carry = ""  # an escape cut by the fragment's end, prepended to the next one
        # Raw capture of a key or a non-string value: text[_cap_start:] of the current text
        # plus _cap_parts from earlier fragments; _cap_start < 0 when not capturing.
        self._cap_parts: list[str] = []
        self._cap_start = -1
        self._qesc = False  # a quoted scan ended right after a backslash
        self._depth = 0  # open brackets of a nested value
        self._in_str = False  # inside a string of a nested value
        # Lenient candidate close: raw text held since the quote (earlier fragments in
        # _held, the current one from _pend_start), the phase and the candidate key.
        self._held: list[str] = []
        self._pend_start = 0
        self._phase = _P_QUOTE
        self._pkey = ""

    @classmethod
    def strict(cls) -> ArgumentStream:
        """A stream that requires well-formed JSON and raises on anything else."""
        return cls(lenient=False)

    @classmethod
    def lenient(cls) -> ArgumentStream:
        """A stream that tolerates sloppy escaping in top-level string values and accepts
        arguments that stop early (see the module documentation for the exact rules)."""
        return cls(lenient=True)

    # ---- public API ----------------------------------------------------------------------

    @property
    def is_lenient(self) -> bool:
        """True for a stream made by :meth:`lenient`."""
        return self._lenient

    @property
    def fields(self) -> Mapping[str, Any]:
        """Handle-less fields parsed so far (read-only), each present as soon as its value
        completes. Fields routed to a handle are not repeated here."""
        return MappingProxyType(self._fields)

    @property
    def raw(self) -> str:
        """All the argument text fed so far, verbatim."""
        if len(self._raw) > 1:
            self._raw = ["".join(self._raw)]
        return self._raw[0] if self._raw else ""

    @property
    def finished(self) -> bool:
        """True after :meth:`finish` succeeded."""
        return self._state == _DONE

    @property
    def truncated(self) -> bool:
        """True if a lenient :meth:`finish` accepted arguments that ended early (an open
        string, a missing ``}``, or a repaired trailing value)."""
        return self._truncated

    def field(self, name: str) -> FieldHandle:
        """The handle for field ``name``; asking again returns the same handle.

        Take it before or after feeding: a field that already completed is delivered whole, a
        string field that is streaming right now continues into the handle (the text so far
        is its first piece), and after :meth:`finish` a field that never arrived makes the
        handle raise.
        """
        handle = self._handles.get(name)
        if handle is not None:
            return handle
        handle = self._handles[name] = FieldHandle(name)
        if self._state in (_STR, _PENDING) and self._key == name and self._sink_mode == _TO_FIELDS:
            handle._parts = self._sink
            self._sink_mode = _TO_HANDLE
            self._sink_handle = handle
        elif name in self._fields:
            value = self._fields[name]
            if isinstance(value, str) and value:
                handle._parts.append(value)
            handle._complete(value)
        elif self._error is not None:
            handle._close(self._error)
        elif self._state == _DONE:
            handle._close(self._missing(name))
        return handle

    def feed(self, fragment: str) -> list[FieldText]:
        """Push one raw fragment of the argument text.

        Returns the decoded text of top-level string fields that became available, as
        ``(field, text, done)`` tuples in wire order (at most one per field occurrence).
        Raises :class:`ProtocolError` on malformed input (the stream is then dead), after
        :meth:`finish`, or after an earlier error.
        """
        if self._state >= _DONE:
            raise self._dead(fragment)
        self._raw.append(fragment)
        if self._carry:
            fragment = self._carry + fragment
            self._carry = ""
        if fragment:
            self._process(fragment)
        if self._out:
            self._flush_open_string()
        events = self._events
        if events:
            self._events = []
        return events

    def finish(self) -> list[FieldText]:
        """The arguments are complete: resolve what was held back against the true end,
        validate, and close every handle (a handle for a field that never arrived then
        raises). Returns the last ``(field, text, done)`` tuples. Raises
        :class:`ProtocolError` if the arguments are malformed or incomplete (strict), or when
        called twice or after an error.
        """
        if self._state >= _DONE:
            raise self._dead()
        self._finish_parse()
        self._state = _DONE
        for name, handle in self._handles.items():
            if not handle._done:
                handle._close(self._missing(name))
        events = self._events
        self._events = []
        return events

    def abort(self, reason: str) -> None:
        """The chat stream ended before this call was complete: close every open handle with a
        :class:`ProtocolError` saying ``reason``, so nobody waits forever. No-op once done."""
        if self._state >= _DONE:
            return
        error = ProtocolError(f"tool call arguments incomplete: {reason}", self.raw)
        self._error = error
        self._state = _FAILED
        for handle in self._handles.values():
            handle._close(error)

    # ---- errors ----------------------------------------------------------------------------

    def _fail(self, what: str) -> ProtocolError:
        """Kill the stream, close every open handle with the error, and return it to raise."""
        error = ProtocolError(f"malformed tool call arguments: {what}", self.raw)
        self._error = error
        self._state = _FAILED
        for handle in self._handles.values():
            handle._close(error)
        return error

    def _dead(self, fragment: str = "") -> ProtocolError:
        """The error for using a finished or failed stream; the raw text includes the
        rejected ``fragment``."""
        if self._state == _DONE:
            return ProtocolError("tool call arguments already finished", self.raw + fragment)
        return ProtocolError("tool call arguments already failed", self.raw + fragment)

    def _missing(self, name: str) -> ProtocolError:
        return ProtocolError(f"tool call arguments ended without the field {name!r}", self.raw)

    # ---- routing -------------------------------------------------------------------------

    def _begin_string(self) -> None:
        handle = self._handles.get(self._key)
        self._sink_handle = None
        if handle is None:
            self._sink_mode = _TO_FIELDS
            self._sink = []
        elif not handle._done:
            self._sink_mode = _TO_HANDLE
            self._sink = handle._parts
            self._sink_handle = handle
        else:
            self._sink_mode = _TO_NOWHERE
            self._sink = []

    def _flush_open_string(self) -> None:
        """Deliver what this fragment decoded of the string still open."""
        out = self._out
        text = out[0] if len(out) == 1 else "".join(out)
        out.clear()
        if not text:
            return
        self._sink.append(text)
        self._events.append(FieldText(self._key, text, False))
        if self._sink_handle is not None:
            self._sink_handle._notify()

    def _end_string(self) -> None:
        out = self._out
        text = "".join(out)
        out.clear()
        if text:
            self._sink.append(text)
        self._events.append(FieldText(self._key, text, True))
        if self._sink_mode == _TO_HANDLE and self._sink_handle is not None:
            self._sink_handle._complete()
        elif self._sink_mode == _TO_FIELDS:
            self._fields[self._key] = "".join(self._sink)
        self._sink = []
        self._sink_handle = None

    def _complete_value(self, value: Any) -> None:
        handle = self._handles.get(self._key)
        if handle is None:
            self._fields[self._key] = value
        elif not handle._done:
            handle._complete(value)

    # ---- raw captures ----------------------------------------------------------------------

    def _take_capture(self, text: str, end: int) -> str:
        parts = self._cap_parts
        parts.append(text[self._cap_start : end])
        self._cap_parts = []
        self._cap_start = -1
        return parts[0] if len(parts) == 1 else "".join(parts)

    def _scan_quoted(self, text: str, i: int) -> int:
        """Index of the unescaped ``"`` ending a quoted run at or after ``i``, or -1."""
        if self._qesc:
            self._qesc = False
            i += 1
        search = _QUOTE_OR_BACKSLASH.search
        while True:
            m = search(text, i)
            if m is None:
                return -1
            j = m.start()
            if text[j] == '"':
                return j
            if j + 1 >= len(text):
                self._qesc = True
                return -1
            i = j + 2

    def _loads(self, raw: str, what: str) -> Any:
        """Parse a complete key or non-string value; it must be well-formed JSON."""
        try:
            value = json.loads(raw, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as exc:
            raise self._fail(f"{what} is not valid JSON ({exc})") from None
        if _SURROGATE_ESCAPE.search(raw) and _has_lone_surrogate(value):
            raise self._fail(f"{what} contains an unpaired \\u surrogate")
        return value

    # ---- the scanner -----------------------------------------------------------------------

    def _process(self, text: str) -> None:
        i = 0
        n = len(text)
        while i < n:
            state = self._state
            if state == _STR:
                i = self._scan_string(text, i)
            elif state == _PENDING:
                text, i = self._scan_pending(text, i)
                n = len(text)
            elif state == _NESTED:
                i = self._scan_nested(text, i)
            else:
                i = self._scan_structure(text, i)
        # The fragment ended: keep what a capture or a candidate close still needs.
        if self._cap_start >= 0:
            self._cap_parts.append(text[self._cap_start :])
            self._cap_start = 0
        if self._state == _PENDING:
            self._held.append(text[self._pend_start :])
            self._pend_start = 0

    def _scan_string(self, text: str, i: int) -> int:
        out = self._out
        search = self._special.search
        n = len(text)
        while True:
            m = search(text, i)
            if m is None:
                if i == 0:
                    out.append(text)
                elif i < n:
                    out.append(text[i:])
                return n
            j = m.start()
            if j > i:
                out.append(text[i:j])
            c = text[j]
            if c == "\\":
                i = self._escape(text, j)
                if i >= n:
                    return n
            elif c == '"':
                if self._lenient:
                    self._state = _PENDING
                    self._phase = _P_QUOTE
                    self._held = []
                    self._pend_start = j + 1
                else:
                    self._end_string()
                    self._state = _AFTER_VALUE
                return j + 1
            else:
                raise self._fail(
                    f"unescaped control character U+{ord(c):04X} in the value of {self._key!r}"
                )

    def _escape(self, text: str, j: int) -> int:
        """Decode the escape at ``text[j] == "\\\\"``; return the index after it. An escape
        cut by the end of ``text`` is carried over to the next fragment."""
        n = len(text)
        out = self._out
        if j + 1 >= n:
            self._carry = text[j:]
            return n
        c = text[j + 1]
        simple = _SIMPLE_ESCAPES.get(c)
        if simple is not None:
            out.append(simple)
            return j + 2
        if c != "u":
            if self._lenient:
                out.append("\\")  # a literal backslash; the character is itself
                return j + 1
            raise self._fail(f"invalid escape {text[j : j + 2]!r} in the value of {self._key!r}")
        code, k = _hex4(text, j + 2)
        if code < 0:
            if j + 2 + k >= n:
                self._carry = text[j:]
                return n
            if self._lenient:
                out.append(text[j : j + 2 + k])  # not an escape after all: literal text
                return j + 2 + k
            raise self._fail(
                f"invalid escape {text[j : j + 3 + k]!r} in the value of {self._key!r}"
            )
        if 0xD800 <= code <= 0xDBFF:
            p = j + 6  # where the low half's backslash must be
            if p + 1 >= n:
                if p == n or text[p] == "\\":
                    self._carry = text[j:]
                    return n
            elif text[p] == "\\" and text[p + 1] == "u":
                low, k = _hex4(text, p + 2)
                if low < 0 and p + 2 + k >= n:
                    self._carry = text[j:]
                    return n
                if 0xDC00 <= low <= 0xDFFF:
                    out.append(chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)))
                    return p + 6
            if self._lenient:
                out.append("\ufffd")  # unpaired; whatever follows is read afresh
                return p
            raise self._fail(f"unpaired \\u surrogate in the value of {self._key!r}")
        if 0xDC00 <= code <= 0xDFFF:
            if self._lenient:
                out.append("\ufffd")
                return j + 6
            raise self._fail(f"unpaired \\u surrogate in the value of {self._key!r}")
        out.append(chr(code))
        return j + 6

    def _scan_pending(self, text: str, i: int) -> tuple[str, int]:
        """Lenient: match the continuation after a candidate closing quote. Returns the text
        to continue with (it grows when held text from earlier fragments is re-read)."""
        n = len(text)
        while i < n:
            phase = self._phase
            if phase == _P_KEY:
                j = self._scan_quoted(text, i)
                if j < 0:
                    return text, n
                key = _key_or_none(self._take_capture(text, j))
                if key is None:
                    return self._deviate(text)
                self._pkey = key
                self._phase = _P_AFTER_KEY
                i = j + 1
                continue
            m = _WS.match(text, i)
            i = m.end() if m else i
            if i >= n:
                return text, n
            c = text[i]
            if phase == _P_QUOTE:
                if c == ",":
                    self._phase = _P_COMMA
                    i += 1
                    continue
                if c == "}":
                    self._phase = _P_CLOSE
                    i += 1
                    continue
            elif phase == _P_COMMA:
                if c == '"':
                    self._phase = _P_KEY
                    self._qesc = False
                    self._cap_start = i + 1
                    i += 1
                    continue
            elif phase == _P_AFTER_KEY and c == ":":
                # Boundary confirmed: the quote closed the string; the next field begins.
                self._end_string()
                self._held = []
                self._key = self._pkey
                self._state = _BEFORE_VALUE
                return text, i + 1
            return self._deviate(text)
        return text, n

    def _deviate(self, text: str) -> tuple[str, int]:
        """The candidate quote was content: emit it and re-read what followed it."""
        self._out.append('"')
        self._state = _STR
        self._cap_start = -1
        self._cap_parts = []
        self._qesc = False
        held = self._held
        self._held = []
        if held:  # the quote came in an earlier fragment
            return "".join(held) + text, 0
        return text, self._pend_start

    def _scan_nested(self, text: str, i: int) -> int:
        n = len(text)
        search = _NESTED_SPECIAL.search
        while i < n:
            if self._in_str:
                j = self._scan_quoted(text, i)
                if j < 0:
                    return n
                self._in_str = False
                i = j + 1
                continue
            m = search(text, i)
            if m is None:
                return n
            j = m.start()
            c = text[j]
            i = j + 1
            if c == '"':
                self._in_str = True
                self._qesc = False
            elif c == "{" or c == "[":
                self._depth += 1
            else:
                self._depth -= 1
                if self._depth == 0:
                    raw = self._take_capture(text, i)
                    self._complete_value(self._loads(raw, f"the value of {self._key!r}"))
                    self._state = _AFTER_VALUE
                    return i
        return n

    def _scan_structure(self, text: str, i: int) -> int:
        state = self._state
        n = len(text)
        if state == _SCALAR:
            m = _SCALAR_END.search(text, i)
            if m is None:
                return n
            j = m.start()
            raw = self._take_capture(text, j)
            self._complete_value(self._loads(raw, f"the value of {self._key!r}"))
            c = text[j]
            self._state = _NEXT_KEY if c == "," else _CLOSED if c == "}" else _AFTER_VALUE
            return j + 1
        if state == _IN_KEY:
            j = self._scan_quoted(text, i)
            if j < 0:
                return n
            raw = self._take_capture(text, j)
            self._key = self._loads(f'"{raw}"', f"the field name {raw!r}")
            self._state = _AFTER_KEY
            return j + 1
        m = _WS.match(text, i)
        i = m.end() if m else i
        if i >= n:
            return n
        c = text[i]
        if state == _BEFORE_VALUE:
            if c == '"':
                self._begin_string()
                self._state = _STR
                return i + 1
            if c == "{" or c == "[":
                self._state = _NESTED
                self._depth = 1
                self._in_str = False
                self._cap_start = i
                return i + 1
            if c in _SCALAR_START:
                self._state = _SCALAR
                self._cap_start = i
                return i
            raise self._fail(f"expected the value of {self._key!r}, got {c!r}")
        if state == _AFTER_VALUE:
            if c == ",":
                self._state = _NEXT_KEY
            elif c == "}":
                self._state = _CLOSED
            else:
                raise self._fail(f"expected ',' or '}}' after the value of {self._key!r}")
            return i + 1
        if state in (_FIRST_KEY, _NEXT_KEY):
            if c == '"':
                self._state = _IN_KEY
                self._qesc = False
                self._cap_start = i + 1
                return i + 1
            if c == "}" and (state == _FIRST_KEY or self._lenient):
                self._state = _CLOSED
                return i + 1
            raise self._fail(f"expected a field name, got {c!r}")
        if state == _AFTER_KEY:
            if c == ":":
                self._state = _BEFORE_VALUE
                return i + 1
            raise self._fail(f"expected ':' after the field name {self._key!r}, got {c!r}")
        if state == _BEFORE_BRACE:
            if c == "{":
                self._state = _FIRST_KEY
                return i + 1
            raise self._fail(f"the arguments must be a JSON object, got {c!r}")
        raise self._fail(f"unexpected {c!r} after the closing '}}'")

    # ---- the end ---------------------------------------------------------------------------

    def _finish_parse(self) -> None:
        while True:
            state = self._state
            if state in (_CLOSED, _BEFORE_BRACE):  # _BEFORE_BRACE: no arguments
                return
            if not self._lenient:
                what = "a string value never closed" if state == _STR else "ended mid-object"
                raise self._fail(what)
            if state == _STR:
                # The model stopped inside the string: keep everything, a cut escape literally.
                carry = self._carry
                if carry:
                    self._carry = ""
                    self._out.append("\ufffd" + carry[6:] if len(carry) >= 6 else carry)
                self._end_string()
                self._truncated = True
                return
            if state == _PENDING:
                if self._phase == _P_QUOTE or self._phase == _P_CLOSE:
                    self._end_string()  # the quote did close the string
                    self._truncated = self._phase == _P_QUOTE
                    return
                # A partial boundary at the end never confirmed: it is content. Re-read it
                # (it may end in a new candidate quote) and decide again.
                held = "".join(self._held)
                self._held = []
                self._deviate("")
                self._process(held)
                continue
            self._truncated = True
            if state in (_SCALAR, _NESTED):
                ok, value = _recover("".join(self._cap_parts))
                if ok and self._key not in self._fields:
                    self._complete_value(value)
            return


# ---- helpers -----------------------------------------------------------------------------


def _hex4(text: str, p: int) -> tuple[int, int]:
    """``(code, 4)`` for four hex digits at ``p``, else ``(-1, number of hex digits)``."""
    m = _HEX.match(text, p)
    k = m.end() - p if m else 0
    if k == 4:
        return int(text[p : p + 4], 16), 4
    return -1, k


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _has_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _key_or_none(raw: str) -> str | None:
    """The decoded candidate key of a lenient boundary, or None if it is not a valid one."""
    try:
        key = json.loads(f'"{raw}"')
    except ValueError:
        return None
    if not isinstance(key, str) or _SURROGATE.search(key):
        return None
    return key


# ---- the lenient repair pass for a truncated trailing value --------------------------------

_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]*)?(?:[eE][+-]?[0-9]*)?")
_STRING_BODY = re.compile(r'(?:[^"\\]|\\u[0-9a-fA-F]{4}|\\[^u])*')
_CUT_ESCAPE = re.compile(r"\\(?:u[0-9a-fA-F]{0,3})?")
_LITERALS: tuple[tuple[str, Any], ...] = (("true", True), ("false", False), ("null", None))


class _Cut(Exception):
    """The text ended before a value started."""


def _recover(text: str) -> tuple[bool, Any]:
    """Complete a value the input cut short: ``1.`` gives 1, ``tru`` True, ``[1, {"a": "b``
    ``[1, {"a": "b"}]``. Returns ``(False, None)`` if nothing sensible can be recovered."""
    try:
        value, end, _ = _partial(text, 0)
    except (_Cut, ValueError, RecursionError):
        return False, None
    m = _WS.match(text, end)
    if m is None or m.end() != len(text):
        return False, None
    return True, value


def _partial(s: str, i: int) -> tuple[Any, int, bool]:
    """Parse a JSON value at ``s[i:]`` that may be cut off by the end of ``s``. Returns the
    value, the index after it, and whether it was complete."""
    n = len(s)
    m = _WS.match(s, i)
    i = m.end() if m else i
    if i >= n:
        raise _Cut
    c = s[i]
    if c == "{" or c == "[":
        return _partial_container(s, i)
    if c == '"':
        return _partial_string(s, i)
    for word, literal in _LITERALS:
        if s.startswith(word, i):
            return literal, i + len(word), True
        if word.startswith(s[i:]):
            return literal, n, False
    m = _NUMBER.match(s, i)
    if m is None:
        if s[i:] == "-":
            raise _Cut
        raise ValueError(f"no JSON value at {i}")
    token = m.group()
    try:
        return json.loads(token), m.end(), True
    except ValueError:
        if m.end() != n:
            raise
    token = token.rstrip(".eE+-")
    if token in ("", "-"):
        raise _Cut from None
    return json.loads(token), n, False


def _partial_container(s: str, i: int) -> tuple[Any, int, bool]:
    n = len(s)
    is_object = s[i] == "{"
    closer = "}" if is_object else "]"
    obj: dict[str, Any] = {}
    arr: list[Any] = []
    result: Any = obj if is_object else arr
    i += 1
    first = True
    while True:
        m = _WS.match(s, i)
        i = m.end() if m else i
        if i >= n:
            return result, n, False
        if s[i] == closer:
            return result, i + 1, True
        if not first:
            if s[i] != ",":
                raise ValueError(f"expected ',' at {i}")
            m = _WS.match(s, i + 1)
            i = m.end() if m else i + 1
            if i >= n:
                return result, n, False
            if s[i] == closer:  # a trailing comma
                return result, i + 1, True
        first = False
        key = ""
        if is_object:
            if s[i] != '"':
                raise ValueError(f"expected a key at {i}")
            key, i, whole = _partial_string(s, i)
            m = _WS.match(s, i)
            i = m.end() if m else i
            if not whole or i >= n:
                return result, n, False
            if s[i] != ":":
                raise ValueError(f"expected ':' at {i}")
            i += 1
        try:
            value, i, whole = _partial(s, i)
        except _Cut:
            return result, n, False
        if is_object:
            obj[key] = value
        else:
            arr.append(value)
        if not whole:
            return result, n, False


def _partial_string(s: str, i: int) -> tuple[str, int, bool]:
    n = len(s)
    m = _STRING_BODY.match(s, i + 1)
    j = m.end() if m else i + 1
    whole = j < n and s[j] == '"'
    if not whole and j < n and not _CUT_ESCAPE.fullmatch(s, j):
        raise ValueError(f"invalid escape at {j}")
    value = json.loads(f'"{s[i + 1 : j]}"')
    if not isinstance(value, str):  # pragma: no cover - a quoted body decodes to a str
        raise ValueError("not a string")
    return value, (j + 1 if whole else n), whole
