"""Range checks for settings, run when a ``Config`` or a ``ChatRequest`` is made: a bad value
is a ``ValueError`` that names the field, before anything is sent (not a failure deep inside a
transport, or a server's refusal after a round trip)."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "at_least",
    "check_sampling",
    "check_url",
    "fraction",
    "header_name",
    "positive",
    "printable_ascii",
]


def at_least(owner: str, name: str, value: Any, low: float, *, optional: bool = True) -> None:
    """``value`` is None (when ``optional``) or a number ``>= low``."""
    if value is None and optional:
        return
    if not _number(value) or value < low:
        raise ValueError(f"{owner}.{name} must be a number >= {low:g}, not {value!r}")


def positive(owner: str, name: str, value: Any, *, optional: bool = False) -> None:
    """``value`` is None (when ``optional``) or a number ``> 0``."""
    if value is None and optional:
        return
    if not _number(value) or value <= 0:
        raise ValueError(f"{owner}.{name} must be a number > 0, not {value!r}")


def fraction(owner: str, name: str, value: Any) -> None:
    """``value`` is None or a number from 0 to 1."""
    if value is not None and (not _number(value) or not 0 <= value <= 1):
        raise ValueError(f"{owner}.{name} must be a number from 0 to 1, not {value!r}")


def check_url(owner: str, name: str, url: Any) -> None:
    """An ``http://`` or ``https://`` URL with a host (and, if given, a port that is a
    number from 1 to 65535)."""
    if not isinstance(url, str):
        raise ValueError(f"{owner}.{name} must be a str, not {type(url).__name__}")
    scheme, sep, _ = url.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        raise ValueError(
            f"{owner}.{name} must start with http:// or https://, not {url!r} "
            f"(for example 'http://{url}')"
        )
    try:
        parts = urlsplit(url)
        port = parts.port  # raises on a port that is not a number in range
    except ValueError as exc:
        raise ValueError(f"{owner}.{name} is not a URL: {url!r} ({exc})") from None
    if not parts.hostname:
        raise ValueError(f"{owner}.{name} has no host: {url!r}")
    if port == 0:
        raise ValueError(f"{owner}.{name} has port 0: {url!r}")


def check_sampling(owner: str, settings: Any) -> None:
    """The sampling settings a ``Config`` and a ``ChatRequest`` share: ``max_tokens`` (-1:
    no limit), ``temperature``, ``top_p``, ``top_k`` (0 or -1: off)."""
    max_tokens = settings.max_tokens
    if max_tokens is not None and (type(max_tokens) is not int or max_tokens < -1):
        raise ValueError(f"{owner}.max_tokens must be an int >= -1, not {max_tokens!r}")
    at_least(owner, "temperature", settings.temperature, 0)
    fraction(owner, "top_p", settings.top_p)
    top_k = settings.top_k
    if top_k is not None and (type(top_k) is not int or top_k < -1):
        raise ValueError(f"{owner}.top_k must be an int >= -1, not {top_k!r}")


_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # an HTTP field name (RFC 9110 token)


def header_name(owner: str, name: str, value: Any) -> None:
    """``value`` is None or a name an HTTP header (or a cookie) can have."""
    if value is not None and (type(value) is not str or _TOKEN.fullmatch(value) is None):
        raise ValueError(
            f"{owner}.{name} must be None or an HTTP token (letters, digits, '-', ...), "
            f"not {value!r}"
        )


def printable_ascii(text: str) -> bool:
    return text.isascii() and text.isprintable()


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value
