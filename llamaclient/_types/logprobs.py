"""The model's confidence: token log-probabilities, and a value's confidence made of them.

``ChatRequest(top_logprobs=k)`` asks for them. Each text event (``Reasoning``, ``Content``,
``ToolCallDelta``, ``ArgumentDelta``, ``OutputDelta``) then carries the tokens that wrote it
in its ``logprobs`` field, and ``Completion.logprobs`` has them all, in order. A tool call's
fields get a :class:`Confidence` each (``ToolCall.confidence``, ``ArgumentDelta.confidence``
on the field's last piece, ``OutputDelta.confidence`` for a typed output's strings).

A field's confidence is made of the tokens of every piece of text that wrote part of its
value, quotes included (:func:`field_confidence`). Pure: no I/O.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable

import msgspec

__all__ = [
    "Confidence",
    "TokenLogprob",
    "Tokens",
    "TopLogprob",
    "field_confidence",
    "value_spans",
]


class TopLogprob(msgspec.Struct, frozen=True, gc=False):
    """One of the most likely tokens at a position: its text, natural-log probability,
    UTF-8 bytes and (llama-server) vocabulary id."""

    token: str
    logprob: float
    bytes: tuple[int, ...] | None = None
    id: int | None = None

    @property
    def probability(self) -> float:
        """``exp(logprob)``: the probability, 0 to 1."""
        return math.exp(self.logprob)


class TokenLogprob(msgspec.Struct, frozen=True, gc=False):
    """One generated token: its text, natural-log probability (before sampling: what the
    model gave it), UTF-8 bytes, vocabulary id (llama-server), and the ``top_logprobs``
    most likely tokens at its position (as many as the request's ``top_logprobs``)."""

    token: str
    logprob: float
    bytes: tuple[int, ...] | None = None
    top_logprobs: tuple[TopLogprob, ...] = ()
    id: int | None = None

    @property
    def probability(self) -> float:
        """``exp(logprob)``: the probability, 0 to 1."""
        return math.exp(self.logprob)


class Confidence(msgspec.Struct, frozen=True, gc=False):
    """How sure the model was of a value: the lowest and the mean probability of the
    ``tokens`` tokens that wrote it. A low ``min`` marks one uncertain token (a digit, a
    path's name) even in a long value: ask again, or ask the user."""

    min: float
    mean: float
    tokens: int

    @classmethod
    def of(cls, tokens: Iterable[TokenLogprob]) -> Confidence | None:
        """The confidence of these tokens; None when there are none."""
        probabilities = [math.exp(t.logprob) for t in tokens]
        if not probabilities:
            return None
        count = len(probabilities)
        return cls(min(probabilities), math.fsum(probabilities) / count, count)


Tokens = tuple[TokenLogprob, ...]
"""The tokens that wrote one piece of text, in order."""


_JSON = json.JSONDecoder()
_WS = re.compile(r"[ \t\n\r]*")


def _skip(text: str, i: int) -> int:
    m = _WS.match(text, i)
    return m.end() if m else i


def value_spans(text: str, *, whole: bool = True) -> dict[str, tuple[int, int]]:
    """Where each top-level field's value is in the JSON object ``text``: ``(start, end)``
    offsets, a string's quotes included (a repeated key: its last value, as a decoder reads
    it). Empty when ``text`` is not one JSON object; with ``whole=False`` the text may stop
    anywhere, and the values complete so far are given."""
    spans: dict[str, tuple[int, int]] = {}
    i = _skip(text, 0)
    if text[i : i + 1] != "{":
        return {}
    i = _skip(text, i + 1)
    try:
        while (end := _field(text, i, spans)) >= 0:
            i = _skip(text, end)
            mark = text[i : i + 1]
            if mark == "}":
                return spans if not whole or not text[_skip(text, i + 1) :] else {}
            if mark != ",":
                break
            i = _skip(text, i + 1)
    except (ValueError, RecursionError):
        pass
    return {} if whole else spans


def _field(text: str, i: int, spans: dict[str, tuple[int, int]]) -> int:
    """Read ``"key": value`` at ``i`` into ``spans``; the value's end, or -1 if it is not
    one. Raises ``ValueError`` when the key or value is not JSON (or stops short)."""
    if text[i : i + 1] != '"':
        return -1
    key, i = _JSON.raw_decode(text, i)
    i = _skip(text, i)
    if text[i : i + 1] != ":":
        return -1
    start = _skip(text, i + 1)
    _, end = _JSON.raw_decode(text, start)
    spans[key] = (start, end)
    return end


def field_confidence(
    arguments: str, pieces: list[tuple[int, int, Tokens]], *, whole: bool = True
) -> dict[str, Confidence] | None:
    """Each top-level field's :class:`Confidence` in the tool call ``arguments``, from the
    ``pieces`` that carried tokens: ``(start, end, tokens)``, the piece's offsets in the
    text. A field's tokens are those of every piece that overlaps its value. None when no
    piece carried tokens or the text is not one JSON object (``whole=False``: the fields
    complete so far of a text that may stop anywhere)."""
    if not pieces:
        return None
    found: dict[str, Confidence] = {}
    for key, (start, end) in value_spans(arguments, whole=whole).items():
        confidence = Confidence.of(
            t for a, b, tokens in pieces if a < end and b > start for t in tokens
        )
        if confidence is not None:
            found[key] = confidence
    return found or None
