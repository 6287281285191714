"""Repair of a JSON value cut short by the end of the input (lenient mode's last value).

:func:`recover` completes ``1.`` to 1, ``tru`` to True, ``[1, {"a": "b`` to
``[1, {"a": "b"}]``; see ``docs/arguments.md``. Pure: standard library only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

__all__ = ["recover"]

_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]*)?(?:[eE][+-]?[0-9]*)?")
_STRING_BODY = re.compile(r'(?:[^"\\]|\\u[0-9a-fA-F]{4}|\\[^u])*')
_CUT_ESCAPE = re.compile(r"\\(?:u[0-9a-fA-F]{0,3})?")
_NOT_WS = re.compile(r"[^ \t\n\r]")
_LITERALS: tuple[tuple[str, Any], ...] = (("true", True), ("false", False), ("null", None))

Parsed = tuple[Any, int, bool]
"""A value, the index after it, and whether it was complete."""


class _Cut(Exception):
    """The text ended before a value started."""


def recover(text: str) -> tuple[bool, Any]:
    """``(True, value)`` for the value ``text`` starts, completed where the text stops early;
    ``(False, None)`` if it is not the start of one JSON value."""
    try:
        value, end, _ = _value(text, 0)
    except (_Cut, ValueError, RecursionError):
        return False, None
    if _skip_ws(text, end) != len(text):
        return False, None
    return True, value


def _skip_ws(s: str, i: int) -> int:
    m = _NOT_WS.search(s, i)
    return m.start() if m else len(s)


def _value(s: str, i: int) -> Parsed:
    i = _skip_ws(s, i)
    if i == len(s):
        raise _Cut
    c = s[i]
    if c == "{":
        return _object(s, i + 1)
    if c == "[":
        return _array(s, i + 1)
    if c == '"':
        return _string(s, i)
    return _literal_or_number(s, i)


def _literal_or_number(s: str, i: int) -> Parsed:
    rest = s[i:]
    for word, literal in _LITERALS:
        if rest.startswith(word):
            return literal, i + len(word), True
        if word.startswith(rest):
            return literal, len(s), False
    return _number(s, i)


def _number(s: str, i: int) -> Parsed:
    m = _NUMBER.match(s, i)
    if m is None:
        if s[i:] == "-":
            raise _Cut
        raise ValueError(f"no JSON value at {i}")
    token = m.group()
    try:
        return json.loads(token), m.end(), True
    except ValueError:
        if m.end() != len(s):
            raise
    # Cut inside the fraction or exponent: "1.", "1e", "1e+" read as "1".
    return json.loads(token.rstrip(".eE+-")), len(s), False


def _string(s: str, i: int) -> Parsed:
    n = len(s)
    m = _STRING_BODY.match(s, i + 1)
    j = m.end() if m else i + 1
    whole = j < n and s[j] == '"'
    if not whole and j < n and not _CUT_ESCAPE.fullmatch(s, j):
        raise ValueError(f"invalid escape at {j}")
    value: str = json.loads(f'"{s[i + 1 : j]}"')
    return value, (j + 1 if whole else n), whole


def _array(s: str, i: int) -> Parsed:
    items: list[Any] = []

    def item(i: int) -> tuple[int, bool]:
        value, i, whole = _value(s, i)
        items.append(value)
        return i, whole

    end, whole = _members(s, i, "]", item)
    return items, end, whole


def _object(s: str, i: int) -> Parsed:
    obj: dict[str, Any] = {}

    def member(i: int) -> tuple[int, bool]:
        if s[i] != '"':
            raise ValueError(f"expected a key at {i}")
        key, i, whole = _string(s, i)
        i = _skip_ws(s, i)
        if not whole or i == len(s):
            return len(s), False
        if s[i] != ":":
            raise ValueError(f"expected ':' at {i}")
        value, i, whole = _value(s, i + 1)
        obj[key] = value
        return i, whole

    end, whole = _members(s, i, "}", member)
    return obj, end, whole


def _members(
    s: str, i: int, closer: str, read: Callable[[int], tuple[int, bool]]
) -> tuple[int, bool]:
    """Read comma-separated members up to ``closer`` (a trailing comma is accepted). Returns
    the index after the container and whether it was complete."""
    n = len(s)
    i = _skip_ws(s, i)
    first = True
    while i < n:
        if s[i] == closer:
            return i + 1, True
        if not first:
            if s[i] != ",":
                raise ValueError(f"expected ',' at {i}")
            i = _skip_ws(s, i + 1)
            if i == n:
                break
            if s[i] == closer:
                return i + 1, True
        first = False
        try:
            i, whole = read(i)
        except _Cut:
            break
        if not whole:
            break
        i = _skip_ws(s, i)
    return n, False
