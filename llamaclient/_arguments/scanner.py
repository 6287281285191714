"""The incremental scanner of one tool call's argument JSON.

:class:`Scanner` takes raw fragments split anywhere and reports, through callbacks, the decoded
text of each string value (at any depth, with its path) as it arrives, each other top-level
value once it is complete, and each number, boolean or null (at any depth) as soon as it is
whole. The accepted input (strict and lenient) is described in ``docs/arguments.md``.
Pure: standard library only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Final

from .repair import recover

__all__ = ["MAX_DEPTH", "Nested", "Path", "Phase", "ScanError", "Scanner", "State"]

MAX_DEPTH = 256  # the deepest nesting of objects and arrays a value may have

Path = tuple[str | int, ...]
"""Where a value is: the top-level key, then object keys and array indices."""


# The states and phases are plain int constants in a namespace, not IntEnums: looking up an
# IntEnum member costs ~0.23 µs on Python 3.11, a plain class attribute ~0.05 µs (measured).
class State:
    """Where the scanner is in the arguments object."""

    BEFORE_BRACE: Final = 0  # before the opening "{"
    FIRST_KEY: Final = 1  # after "{": a key or "}"
    NEXT_KEY: Final = 2  # after ",": a key (or "}" in lenient mode)
    IN_KEY: Final = 3  # inside a key
    AFTER_KEY: Final = 4  # after a key: ":"
    BEFORE_VALUE: Final = 5  # after ":": a value
    STRING: Final = 6  # inside a top-level string value
    PENDING: Final = 7  # lenient: after an unescaped quote, deciding whether it closed the string
    SCALAR: Final = 8  # inside a number / true / false / null
    NESTED: Final = 9  # inside a nested object or array (see Nested for where)
    AFTER_VALUE: Final = 10  # after a value: "," or "}"
    CLOSED: Final = 11  # after the final "}": only whitespace


class Nested:
    """Inside a nested value: what the scanner is reading between structural tokens."""

    TOKENS: Final = 0  # between tokens: a bracket, ",", ":", a string or a scalar
    KEY: Final = 1  # inside an object key
    SCALAR: Final = 2  # inside a number / true / false / null


class Phase:
    """Lenient: how far the text after a candidate closing quote matches a field boundary."""

    QUOTE: Final = 0  # right after the quote: "," or "}"
    COMMA: Final = 1  # after ",": the next key's opening quote
    KEY: Final = 2  # inside the candidate key
    AFTER_KEY: Final = 3  # after the key: ":" confirms the boundary
    CLOSE: Final = 4  # after "}": only whitespace until the end of input


# Phases in which the end of the input leaves a boundary unconfirmed: it was content.
_PARTIAL_BOUNDARY = frozenset((Phase.COMMA, Phase.KEY, Phase.AFTER_KEY))


_WS = re.compile(r"[ \t\n\r]*")
_STRICT_SPECIAL = re.compile(r'["\\\x00-\x1f]')
_QUOTE_OR_BACKSLASH = re.compile(r'["\\]')
_NOT_WS = re.compile(r"[^ \t\n\r]")
_NESTED_SCALAR_END = re.compile(r"[,}\] \t\n\r]")
_SCALAR_END = re.compile(r"[,} \t\n\r]")
_HEX = re.compile(r"[0-9a-fA-F]{0,4}")
_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
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


class ScanError(ValueError):
    """Malformed arguments; the message says what was wrong and where."""


class Scanner:
    """Feed raw fragments with :meth:`feed`, then call :meth:`finish` once.

    Callbacks: ``begin(path)`` when a string value starts (``path`` is ``(key,)`` at the top
    level, then object keys and array indices), ``piece(text)`` with the text it decoded during
    a :meth:`feed` while still open, ``end(text)`` with its last text when it closes,
    ``value(key, value)`` for each complete top-level non-string value and ``repaired(key,
    value)`` for a value a lenient :meth:`finish` completed. Optional: ``scalar(path, raw)``
    for each number, boolean or null as soon as it is whole, and ``opened(path, is_object)``
    when a nested object or array starts. Malformed input raises :class:`ScanError`; the
    scanner is then unusable.

    Nested values must be well-formed JSON: the text of their strings is reported as it
    arrives (escapes resolved), and the whole value is checked with ``json`` once it closes.
    """

    __slots__ = (
        "_begin",
        "_cap_parts",
        "_cap_start",
        "_carry",
        "_end",
        "_esc_lenient",
        "_held",
        "_key",
        "_kparts",
        "_kstart",
        "_moves",
        "_nested_str",
        "_opened",
        "_out",
        "_pend_start",
        "_phase",
        "_piece",
        "_pkey",
        "_qesc",
        "_repaired",
        "_scalar",
        "_special",
        "_stack",
        "_state",
        "_sub",
        "_value",
        "lenient",
        "truncated",
    )

    def __init__(
        self,
        *,
        lenient: bool,
        begin: Callable[[Path], object],
        piece: Callable[[str], object],
        end: Callable[[str], object],
        value: Callable[[str, Any], object],
        repaired: Callable[[str, Any], object],
        scalar: Callable[[Path, str], object] | None = None,
        opened: Callable[[Path, bool], object] | None = None,
    ) -> None:
        self.lenient = lenient
        self.truncated = False  # a lenient finish() accepted arguments that ended early
        self._begin = begin
        self._piece = piece
        self._end = end
        self._value = value
        self._repaired = repaired
        self._scalar = scalar or _ignore
        self._opened = opened or _ignore
        self._moves = _LENIENT_MOVES if lenient else _STRICT_MOVES
        # How the open string decodes: top-level strings by the mode, nested ones without
        # raising (their value is checked whole when it closes).
        self._special = _QUOTE_OR_BACKSLASH if lenient else _STRICT_SPECIAL
        self._esc_lenient = lenient
        self._nested_str = False  # the open string is inside a nested value
        self._state: int = State.BEFORE_BRACE
        self._key = ""  # the field whose value is being read
        self._out: list[str] = []  # decoded text of the open string, not yet delivered
        self._carry = ""  # an escape cut by the fragment's end, prepended to the next one
        # Raw capture of a key or a non-string value: text[_cap_start:] of the current text
        # plus _cap_parts from earlier fragments; _cap_start < 0 when not capturing.
        self._cap_parts: list[str] = []
        self._cap_start = -1
        self._qesc = False  # a quoted scan ended right after a backslash
        # A nested value: its open containers, each [is_object, key or index, expects a key],
        # what is being read between tokens, and the raw text of a nested key or scalar
        # (text[_kstart:] plus _kparts from earlier fragments; _kstart < 0 when none).
        self._stack: list[list[Any]] = []
        self._sub: int = Nested.TOKENS
        self._kparts: list[str] = []
        self._kstart = -1
        # Lenient candidate close: the raw text since the quote (earlier fragments in _held,
        # the current one from _pend_start; < 0 when no candidate), the phase and the key.
        self._held: list[str] = []
        self._pend_start = -1
        self._phase: int = Phase.QUOTE
        self._pkey = ""

    @property
    def started(self) -> bool:
        """True once anything but whitespace arrived."""
        return self._state != State.BEFORE_BRACE

    def feed(self, fragment: str) -> None:
        """Scan one fragment; the open string's decoded text goes to ``piece``."""
        if self._carry:
            fragment = self._carry + fragment
            self._carry = ""
        if fragment:
            self._process(fragment)
        out = self._out
        if out:
            text = out[0] if len(out) == 1 else "".join(out)
            out.clear()
            self._piece(text)

    def finish(self) -> None:
        """The input ended: accept it (lenient: what arrived) or raise :class:`ScanError`."""
        state = self._state
        if state == State.CLOSED or state == State.BEFORE_BRACE:  # BEFORE_BRACE: no arguments
            return
        nested = self._nested_str
        if not self.lenient:
            raise ScanError(
                "a string value never closed"
                if state == State.STRING and not nested
                else "ended mid-object"
            )
        self.truncated = True
        while self._state == State.PENDING and self._phase in _PARTIAL_BOUNDARY:
            self._reread_boundary()
        state = self._state
        if state == State.PENDING:
            self._end_string()  # the quote did close the string
            self.truncated = self._phase == Phase.QUOTE  # no "}" after it
        elif state == State.STRING and not nested:
            self._finish_string()
        elif state == State.SCALAR or state == State.NESTED or nested:
            ok, value = recover("".join(self._cap_parts) + self._carry)
            if ok:
                self._repaired(self._key, value)

    # ---- the main loop ---------------------------------------------------------------------

    def _process(self, text: str) -> None:
        i = 0
        n = len(text)
        while i < n:
            i = _SCANS[self._state](self, text, i)
            if i < 0:  # a lenient candidate close was content: re-read what followed it
                text, i = self._reread(text)
                n = len(text)
        # The fragment ended: keep what a capture or a candidate close still needs.
        if self._cap_start >= 0:  # an escape carried over is captured with the next fragment
            self._cap_parts.append(text[self._cap_start : n - len(self._carry)])
            self._cap_start = 0
        if self._kstart >= 0:
            self._kparts.append(text[self._kstart :])
            self._kstart = 0
        if self._pend_start >= 0:
            self._held.append(text[self._pend_start :])
            self._pend_start = 0

    # ---- structure: whitespace and one token ------------------------------------------------

    def _scan_token(self, text: str, i: int) -> int:
        m = _WS.match(text, i)
        i = m.end() if m else i
        if i == len(text):
            return i
        c = text[i]
        move = self._moves.get((self._state, c))
        if move is None:
            raise ScanError(_UNEXPECTED[self._state].format(c=c, key=self._key))
        self._state, enter = move
        return enter(self, i)

    def _skip_token(self, i: int) -> int:
        return i + 1

    def _open_key(self, i: int) -> int:
        self._qesc = False
        self._cap_start = i + 1
        return i + 1

    def _open_string(self, i: int) -> int:
        self._special = _QUOTE_OR_BACKSLASH if self.lenient else _STRICT_SPECIAL
        self._esc_lenient = self.lenient
        self._begin((self._key,))
        return i + 1

    def _open_nested(self, i: int) -> int:
        self._stack = []
        self._sub = Nested.TOKENS
        self._cap_start = i
        return i  # the nested scan reads the bracket

    def _open_scalar(self, i: int) -> int:
        self._cap_start = i
        return i  # the scalar scan reads it from its first character

    # ---- keys and non-string values --------------------------------------------------------

    def _scan_key(self, text: str, i: int) -> int:
        j = self._scan_quoted(text, i)
        if j < 0:
            return len(text)
        raw = self._take_capture(text, j)
        self._key = self._loads(f'"{raw}"', f"the field name {raw!r}")
        self._state = State.AFTER_KEY
        return j + 1

    def _scan_scalar(self, text: str, i: int) -> int:
        m = _SCALAR_END.search(text, i)
        if m is None:
            return len(text)
        j = m.start()
        raw = self._take_capture(text, j)
        value = self._loads(raw, f"the value of {self._key!r}")
        self._scalar((self._key,), raw)
        self._value(self._key, value)
        self._state = _AFTER_SCALAR.get(text[j], State.AFTER_VALUE)
        return j + 1

    # ---- nested values: structure tracked for the paths, the whole checked with json ----------

    def _scan_nested(self, text: str, i: int) -> int:
        n = len(text)
        while i < n and self._state == State.NESTED:
            sub = self._sub
            if sub == Nested.KEY:
                i = self._nested_key(text, i)
            elif sub == Nested.SCALAR:
                i = self._nested_scalar(text, i)
            else:
                m = _NOT_WS.search(text, i)
                if m is None:
                    return n
                i = m.start()
                i = _NESTED_STEP.get(text[i], Scanner._nested_scalar_start)(self, text, i)
        return i

    def _path(self) -> Path:
        return (self._key, *[frame[1] for frame in self._stack])

    def _nested_object(self, text: str, i: int) -> int:
        self._push(True)
        self._stack.append([True, "", True])
        return i + 1

    def _nested_array(self, text: str, i: int) -> int:
        self._push(False)
        self._stack.append([False, 0, False])
        return i + 1

    def _push(self, is_object: bool) -> None:
        # A path costs its depth, and each value has one: the depth is bounded, so the work
        # stays in proportion to the input.
        if len(self._stack) >= MAX_DEPTH:
            raise ScanError(f"the value of {self._key!r} is nested deeper than {MAX_DEPTH} levels")
        if self._opened is not _ignore:
            self._opened(self._path(), is_object)

    def _nested_close(self, text: str, i: int) -> int:
        stack = self._stack
        stack.pop()
        if not stack:  # the top-level value is complete: check it whole
            raw = self._take_capture(text, i + 1)
            self._value(self._key, self._loads(raw, f"the value of {self._key!r}"))
            self._state = State.AFTER_VALUE
        return i + 1

    def _nested_comma(self, text: str, i: int) -> int:
        frame = self._stack[-1]
        if frame[0]:
            frame[2] = True
        else:
            frame[1] += 1
        return i + 1

    def _scan_colon(self, text: str, i: int) -> int:
        return i + 1

    def _nested_quote(self, text: str, i: int) -> int:
        frame = self._stack[-1]
        if frame[0] and frame[2]:  # a key
            self._sub = Nested.KEY
            self._qesc = False
            self._kstart = i + 1
            return i + 1
        self._special = _QUOTE_OR_BACKSLASH
        self._esc_lenient = True
        self._nested_str = True
        self._state = State.STRING
        self._begin(self._path())
        return i + 1

    def _nested_scalar_start(self, text: str, i: int) -> int:
        self._sub = Nested.SCALAR
        self._kstart = i
        return i

    def _take_kcapture(self, text: str, end: int) -> str:
        parts = self._kparts
        parts.append(text[self._kstart : end])
        self._kparts = []
        self._kstart = -1
        self._sub = Nested.TOKENS
        return parts[0] if len(parts) == 1 else "".join(parts)

    def _nested_key(self, text: str, i: int) -> int:
        j = self._scan_quoted(text, i)
        if j < 0:
            return len(text)
        raw = self._take_kcapture(text, j)
        frame = self._stack[-1]
        frame[1] = _key_or_none(raw) or raw  # a bad key fails the whole value's check
        frame[2] = False
        return j + 1

    def _nested_scalar(self, text: str, i: int) -> int:
        m = _NESTED_SCALAR_END.search(text, i)
        if m is None:
            return len(text)
        j = m.start()
        raw = self._take_kcapture(text, j)
        if self._scalar is not _ignore and _is_scalar(raw):
            self._scalar(self._path(), raw)
        return j

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
            if j + 1 == len(text):
                self._qesc = True
                return -1
            i = j + 2

    def _loads(self, raw: str, what: str) -> Any:
        """Parse a complete key or non-string value; it must be well-formed JSON."""
        try:
            value = _DECODER.decode(raw)
        except (ValueError, RecursionError) as exc:
            raise ScanError(f"{what} is not valid JSON ({exc})") from None
        if _SURROGATE_ESCAPE.search(raw) and _has_lone_surrogate(value):
            raise ScanError(f"{what} contains an unpaired \\u surrogate")
        return value

    # ---- top-level string values -----------------------------------------------------------

    def _scan_string(self, text: str, i: int) -> int:
        out = self._out
        search = self._special.search
        n = len(text)
        while True:
            m = search(text, i)
            if m is None:
                out.append(text if i == 0 else text[i:])
                return n
            j = m.start()
            if j > i:
                out.append(text[i:j])
            c = text[j]
            if c == "\\":
                i = self._escape(text, j)
                if i == n:
                    return n
            elif c == '"':
                return self._close_quote(j)
            else:
                raise ScanError(
                    f"unescaped control character U+{ord(c):04X} in the value of {self._key!r}"
                )

    def _close_quote(self, j: int) -> int:
        if self._nested_str:
            self._nested_str = False
            self._end_string()
            self._state = State.NESTED
        elif self.lenient:  # a candidate: the text after it decides
            self._state = State.PENDING
            self._phase = Phase.QUOTE
            self._held = []
            self._pend_start = j + 1
        else:
            self._end_string()
            self._state = State.AFTER_VALUE
        return j + 1

    def _end_string(self) -> None:
        out = self._out
        text = "".join(out)
        out.clear()
        self._end(text)

    def _escape(self, text: str, j: int) -> int:
        """Decode the escape at ``text[j] == "\\\\"``; return the index after it. An escape
        cut by the end of ``text`` is carried over to the next fragment."""
        if j + 1 == len(text):
            return self._cut(text, j)
        c = text[j + 1]
        simple = _SIMPLE_ESCAPES.get(c)
        if simple is not None:
            self._out.append(simple)
            return j + 2
        if c == "u":
            return self._unicode_escape(text, j)
        if self._esc_lenient:
            self._out.append("\\")  # a literal backslash; the character is itself
            return j + 1
        raise ScanError(f"invalid escape {text[j : j + 2]!r} in the value of {self._key!r}")

    def _cut(self, text: str, j: int) -> int:
        self._carry = text[j:]
        return len(text)

    def _unicode_escape(self, text: str, j: int) -> int:
        code, k = _hex4(text, j + 2)
        if code < 0:
            return self._broken_unicode(text, j, k)
        if 0xD800 <= code <= 0xDBFF:
            return self._high_surrogate(text, j, code)
        if 0xDC00 <= code <= 0xDFFF:
            return self._unpaired(j + 6)
        self._out.append(chr(code))
        return j + 6

    def _broken_unicode(self, text: str, j: int, digits: int) -> int:
        """``\\u`` followed by ``digits`` < 4 hex digits."""
        end = j + 2 + digits
        if end == len(text):  # the next fragment may complete it
            return self._cut(text, j)
        if self._esc_lenient:
            self._out.append(text[j:end])  # not an escape after all: literal text
            return end
        raise ScanError(f"invalid escape {text[j : end + 1]!r} in the value of {self._key!r}")

    def _high_surrogate(self, text: str, j: int, high: int) -> int:
        """A high surrogate at ``j``: pair it with the ``\\uDC00``-``\\uDFFF`` after it."""
        n = len(text)
        p = j + 6  # where the low half's backslash must be
        if p == n or (p + 1 == n and text[p] == "\\"):
            return self._cut(text, j)
        if text.startswith("\\u", p):
            low, k = _hex4(text, p + 2)
            if low < 0 and p + 2 + k == n:
                return self._cut(text, j)
            if 0xDC00 <= low <= 0xDFFF:
                self._out.append(chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)))
                return p + 6
        return self._unpaired(p)  # whatever follows is read afresh

    def _unpaired(self, end: int) -> int:
        if self._esc_lenient:
            self._out.append("\ufffd")
            return end
        raise ScanError(f"unpaired \\u surrogate in the value of {self._key!r}")

    def _finish_string(self) -> None:
        """Lenient: the input ended inside a string; a cut escape is kept literally."""
        carry = self._carry
        if carry:
            self._carry = ""
            # A cut low half after a high surrogate: the high one is unpaired.
            self._out.append("\ufffd" + carry[6:] if len(carry) >= 6 else carry)
        self._end_string()

    # ---- lenient: is this quote the end of the string? -------------------------------------

    def _scan_pending(self, text: str, i: int) -> int:
        """Match the text after a candidate closing quote against a field boundary; -1 when
        it does not match (the quote was content)."""
        while 0 <= i < len(text) and self._state == State.PENDING:
            if self._phase == Phase.KEY:
                i = self._scan_candidate_key(text, i)
            else:
                i = self._boundary_token(text, i)
        return i

    def _scan_candidate_key(self, text: str, i: int) -> int:
        j = self._scan_quoted(text, i)
        if j < 0:
            return len(text)
        key = _key_or_none(self._take_capture(text, j))
        if key is None:
            return -1
        self._pkey = key
        self._phase = Phase.AFTER_KEY
        return j + 1

    def _boundary_token(self, text: str, i: int) -> int:
        m = _WS.match(text, i)
        i = m.end() if m else i
        if i == len(text):
            return i
        step = _BOUNDARY.get((self._phase, text[i]))
        return -1 if step is None else step(self, i)

    def _after_quote_comma(self, i: int) -> int:
        self._phase = Phase.COMMA
        return i + 1

    def _after_quote_brace(self, i: int) -> int:
        self._phase = Phase.CLOSE
        return i + 1

    def _candidate_key(self, i: int) -> int:
        self._phase = Phase.KEY
        return self._open_key(i)

    def _confirm(self, i: int) -> int:
        """The quote closed the string; the next field begins."""
        self._end_string()
        self._held = []
        self._pend_start = -1
        self._key = self._pkey
        self._state = State.BEFORE_VALUE
        return i + 1

    def _reread(self, text: str) -> tuple[str, int]:
        """The candidate quote was content: emit it and return what to scan again."""
        self._out.append('"')
        self._state = State.STRING
        self._cap_start = -1
        self._cap_parts = []
        self._qesc = False
        held = self._held
        start = self._pend_start
        self._held = []
        self._pend_start = -1
        if held:  # the quote came in an earlier fragment
            return "".join(held) + text, 0
        return text, start

    def _reread_boundary(self) -> None:
        """The input ended inside a boundary: it is content. Scan it again as such (it may
        end in a new candidate quote)."""
        held = "".join(self._held)
        self._held = []
        self._pend_start = -1
        self._reread("")
        self._process(held)


# ---- the tables ----------------------------------------------------------------------------

Scan = Callable[[Scanner, str, int], int]
Enter = Callable[[Scanner, int], int]

# The scan of each state: reads from an index, returns where to continue (-1: see _reread).
_SCAN_OF: dict[int, Scan] = {
    State.STRING: Scanner._scan_string,
    State.PENDING: Scanner._scan_pending,
    State.SCALAR: Scanner._scan_scalar,
    State.NESTED: Scanner._scan_nested,
    State.IN_KEY: Scanner._scan_key,
    **{
        state: Scanner._scan_token
        for state in (
            State.BEFORE_BRACE,
            State.FIRST_KEY,
            State.NEXT_KEY,
            State.AFTER_KEY,
            State.BEFORE_VALUE,
            State.AFTER_VALUE,
            State.CLOSED,
        )
    },
}
_SCANS = tuple(_SCAN_OF[state] for state in range(len(_SCAN_OF)))  # indexed by the state

# (state, token) -> (next state, what entering it does; returns where scanning continues).
_STRICT_MOVES: dict[tuple[int, str], tuple[int, Enter]] = {
    (State.BEFORE_BRACE, "{"): (State.FIRST_KEY, Scanner._skip_token),
    (State.FIRST_KEY, '"'): (State.IN_KEY, Scanner._open_key),
    (State.FIRST_KEY, "}"): (State.CLOSED, Scanner._skip_token),
    (State.NEXT_KEY, '"'): (State.IN_KEY, Scanner._open_key),
    (State.AFTER_KEY, ":"): (State.BEFORE_VALUE, Scanner._skip_token),
    (State.BEFORE_VALUE, '"'): (State.STRING, Scanner._open_string),
    (State.BEFORE_VALUE, "{"): (State.NESTED, Scanner._open_nested),
    (State.BEFORE_VALUE, "["): (State.NESTED, Scanner._open_nested),
    **{(State.BEFORE_VALUE, c): (State.SCALAR, Scanner._open_scalar) for c in "-0123456789tfn"},
    (State.AFTER_VALUE, ","): (State.NEXT_KEY, Scanner._skip_token),
    (State.AFTER_VALUE, "}"): (State.CLOSED, Scanner._skip_token),
}
_LENIENT_MOVES = {
    **_STRICT_MOVES,
    (State.NEXT_KEY, "}"): (State.CLOSED, Scanner._skip_token),  # a trailing comma
}

# What a state expected, for the error when another token came.
_UNEXPECTED: dict[int, str] = {
    State.BEFORE_BRACE: "the arguments must be a JSON object, got {c!r}",
    State.FIRST_KEY: "expected a field name, got {c!r}",
    State.NEXT_KEY: "expected a field name, got {c!r}",
    State.AFTER_KEY: "expected ':' after the field name {key!r}, got {c!r}",
    State.BEFORE_VALUE: "expected the value of {key!r}, got {c!r}",
    State.AFTER_VALUE: "expected ',' or '}}' after the value of {key!r}",
    State.CLOSED: "unexpected {c!r} after the closing '}}'",
}

# Between the tokens of a nested value: what each character starts (anything else: a scalar).
_NESTED_STEP: dict[str, Scan] = {
    "{": Scanner._nested_object,
    "[": Scanner._nested_array,
    "}": Scanner._nested_close,
    "]": Scanner._nested_close,
    ",": Scanner._nested_comma,
    ":": Scanner._scan_colon,
    '"': Scanner._nested_quote,
}

# The state after the character that ended a scalar.
_AFTER_SCALAR: dict[str, int] = {",": State.NEXT_KEY, "}": State.CLOSED}

# Lenient: (phase, token) -> the step of the boundary match it makes.
_BOUNDARY: dict[tuple[int, str], Enter] = {
    (Phase.QUOTE, ","): Scanner._after_quote_comma,
    (Phase.QUOTE, "}"): Scanner._after_quote_brace,
    (Phase.COMMA, '"'): Scanner._candidate_key,
    (Phase.AFTER_KEY, ":"): Scanner._confirm,
}


# ---- helpers -------------------------------------------------------------------------------


def _ignore(*_: object) -> None:
    pass


def _is_scalar(raw: str) -> bool:
    """A whole JSON number, ``true``, ``false`` or ``null`` (a nested value's leaf)."""
    try:
        value = _DECODER.decode(raw)
    except ValueError:
        return False
    return not isinstance(value, (str, list, dict))


def _hex4(text: str, p: int) -> tuple[int, int]:
    """``(code, 4)`` for four hex digits at ``p``, else ``(-1, number of hex digits)``."""
    m = _HEX.match(text, p)
    k = m.end() - p if m else 0
    if k == 4:
        return int(text[p : p + 4], 16), 4
    return -1, k


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# json.loads(raw, parse_constant=...) builds a decoder per call (~5 µs, measured); this is
# the same decoder, built once.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


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
        key: str = json.loads(f'"{raw}"')
    except ValueError:
        return None
    return None if _SURROGATE.search(key) else key
