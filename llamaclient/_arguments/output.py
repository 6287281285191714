"""Structured output, decoded live: the answer's JSON text → ``OutputDelta`` events and the
partial value so far.

The same :class:`~llamaclient._arguments.scanner.Scanner` that decodes tool arguments reads the
answer (strict): each string value, at any depth, streams as it is written; numbers, booleans
and null arrive whole. :class:`PartialValue` keeps the value so far as plain dicts and lists,
updated in place, so reading it costs nothing but joining the open string. Pure: no I/O.
"""

from __future__ import annotations

import json
from typing import Any

from .._types.events import ChatEvent, Content, OutputDelta
from .._types.logprobs import Confidence, TokenLogprob, Tokens, field_confidence
from .scanner import Path, ScanError, Scanner

__all__ = ["OutputDecoder", "PartialValue"]


class PartialValue:
    """The value decoded so far, built in place from the scanner's reports."""

    __slots__ = ("_open", "_parts", "root")

    def __init__(self) -> None:
        self.root: dict[str, Any] | None = None
        self._open: Path | None = None  # the string being written, if any
        self._parts: list[str] = []

    def set(self, path: Path, value: Any) -> None:
        """Put ``value`` at ``path`` (an array index one past the end appends). A path that
        does not fit the value (malformed input, which the scanner reports) is ignored."""
        node: Any = self.root
        if node is None:
            node = self.root = {}
        for step in path[:-1]:
            try:
                node = node[step]
            except (KeyError, IndexError, TypeError):
                return
        last = path[-1]
        if isinstance(node, dict):
            node[last] = value
        elif isinstance(node, list) and isinstance(last, int):
            if last == len(node):
                node.append(value)
            elif 0 <= last < len(node):
                node[last] = value

    def begin(self, path: Path) -> None:
        self._open = path
        self._parts = []
        self.set(path, "")

    def piece(self, text: str) -> None:
        self._parts.append(text)

    def end(self, text: str) -> None:
        path = self._open
        if path is not None:
            self._parts.append(text)
            self.set(path, "".join(self._parts))
        self._open = None
        self._parts = []

    def scalar(self, path: Path, raw: str) -> None:
        self.set(path, json.loads(raw))

    def opened(self, path: Path, is_object: bool) -> None:
        self.set(path, {} if is_object else [])

    def snapshot(self) -> Any:
        """The value so far (the open string with its text so far); None before the ``{``.
        It is the live object: copy it to keep it as it is now."""
        path = self._open
        if path is not None and self._parts:
            parts = self._parts
            if len(parts) > 1:
                parts[:] = ["".join(parts)]
            self.set(path, parts[0])
        return self.root


class OutputDecoder:
    """Feed the answer's text with :meth:`feed`; get ``OutputDelta`` events back.

    Malformed JSON never raises here: the decoder stops (``failed``) and the final check of
    the whole text says what was wrong.
    """

    __slots__ = (
        "_deltas",
        "_key",
        "_path",
        "_pieces",
        "_scanner",
        "_size",
        "_string",
        "_text",
        "_tokens",
        "failed",
        "value",
    )

    def __init__(self) -> None:
        self.value = PartialValue()
        self.failed = False
        self._deltas: list[ChatEvent] = []
        self._path: Path = ()
        self._tokens: Tokens | None = None  # those of the piece being fed
        self._string: list[TokenLogprob] | None = None  # those of the open string so far
        self._text: list[str] = []  # the answer so far, and the pieces that had tokens
        self._size = 0
        self._pieces: list[tuple[int, int, Tokens]] = []
        value = self.value
        self._scanner = Scanner(
            lenient=False,
            begin=self._begin,
            piece=self._piece,
            end=self._end,
            value=self._top_value,
            repaired=_ignore,
            scalar=self._scalar,
            opened=value.opened,
        )

    def feed(self, text: str, tokens: Tokens | None = None) -> list[ChatEvent]:
        """The deltas that ``text``, the next piece of the answer, completes or continues;
        ``tokens``: the tokens that wrote it (the deltas carry them)."""
        if self.failed or not text:
            return []
        self._tokens = tokens
        start = self._size
        self._text.append(text)
        self._size += len(text)
        if tokens:
            self._pieces.append((start, self._size, tokens))
            if self._string is not None:
                self._string += tokens
        try:
            self._scanner.feed(text)
        except ScanError:
            self.failed = True
        deltas = self._deltas
        if deltas:
            self._deltas = []
        return deltas

    def finish(self) -> bool:
        """The answer ended: True if it was one whole JSON object."""
        if not self.failed:
            if not self._scanner.started:  # nothing but whitespace
                self.failed = True
            try:
                self._scanner.finish()
            except ScanError:
                self.failed = True
        return not self.failed

    def partial(self) -> Any:
        """The value so far, as plain dicts and lists (see :meth:`PartialValue.snapshot`)."""
        value = self.value
        if value.root is None and self._scanner.started:
            value.root = {}
        return value.snapshot()

    def process(self, events: list[ChatEvent]) -> list[ChatEvent]:
        """``events`` with the ``OutputDelta`` events of each ``Content`` inserted after it."""
        out: list[ChatEvent] | None = None
        for n, event in enumerate(events):
            if type(event) is Content:
                deltas = self.feed(event.text, event.logprobs)
                if deltas:
                    if out is None:
                        out = events[:n]
                    out.append(event)
                    out += deltas
                    continue
            if out is not None:
                out.append(event)
        return events if out is None else out

    # ---- the scanner's callbacks ---------------------------------------------------------

    def _begin(self, path: Path) -> None:
        self._path = path
        self.value.begin(path)
        tokens = self._tokens
        self._string = None if tokens is None else list(tokens)

    def _piece(self, text: str) -> None:
        self.value.piece(text)
        self._deltas.append(OutputDelta(self._path, text, False, self._tokens))

    def _end(self, text: str) -> None:
        self.value.end(text)
        string, self._string = self._string, None
        sure = None if string is None else Confidence.of(string)
        self._deltas.append(OutputDelta(self._path, text, True, self._tokens, sure))

    def _scalar(self, path: Path, raw: str) -> None:
        self.value.scalar(path, raw)
        sure = self._top_confidence(path[0]) if len(path) == 1 and self._pieces else None
        self._deltas.append(OutputDelta(path, raw, True, self._tokens, sure))

    def _top_confidence(self, key: str | int) -> Confidence | None:
        """A top-level value's confidence, from the pieces that wrote its text (as a tool
        call's field gets it)."""
        text = "".join(self._text)
        self._text = [text]
        found = field_confidence(text, self._pieces, whole=False)
        return None if found is None or not isinstance(key, str) else found.get(key)

    def _top_value(self, key: str, value: Any) -> None:
        self.value.set((key,), value)


def _ignore(*_: object) -> None:
    pass
