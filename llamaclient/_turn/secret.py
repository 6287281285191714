"""Keeping the API key out of what we show: errors and events can quote server text, and
server text can quote the request (a proxy echoing the headers into an error page)."""

from __future__ import annotations

__all__ = ["hide_key", "redact"]

_SHOWN_KEY = 12  # a start of the API key this long or longer is hidden too (clipped text)


def redact(text: str, key: str | None) -> str:
    """``text`` without the API key: the whole key, or a start of it cut off by clipping
    (at least 12 characters, or the whole key when it is shorter), becomes ``***``. Server
    text can quote the request (a proxy echoing the headers into an error page)."""
    if not key or key[: min(len(key), _SHOWN_KEY)] not in text:
        return text
    for end in range(len(key), min(len(key), _SHOWN_KEY) - 1, -1):
        text = text.replace(key[:end], "***")
    return text


def hide_key(error: BaseException, key: str | None) -> None:
    """Take the API key out of ``error``: its message and text fields (``body``, ``message``,
    ``raw``, ``type``), and those of every exception in its cause/context chain. Failure path
    only."""
    if not key:
        return
    seen: set[int] = set()
    stack: list[BaseException] = [error]
    while stack:
        exc = stack.pop()
        if id(exc) in seen:
            continue
        seen.add(id(exc))
        exc.args = tuple(redact(a, key) if isinstance(a, str) else a for a in exc.args)
        for name in ("body", "message", "raw", "type"):
            value = getattr(exc, name, None)
            if isinstance(value, str):
                setattr(exc, name, redact(value, key))
        stack += [e for e in (exc.__cause__, exc.__context__) if e is not None]
