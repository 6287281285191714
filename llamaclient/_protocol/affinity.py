"""Affinity a load balancer can use: the session header's value, and the one cookie a
balancer that pins by cookie sets (``Config.session_header``, ``Config.affinity_cookie``).

Pure: values in, values out.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["MAX_SESSION_CHARS", "cookie_value", "session_value"]

MAX_SESSION_CHARS = 128  # a longer session is sent as its hash
_SAFE = re.compile(r"[!-~]+(?: [!-~]+)*")  # visible ASCII, single inner spaces
_COOKIES = re.compile(r",\s*(?=[^;,=\s]+=)")  # where the next of several Set-Cookie starts
_OCTETS = re.compile(r"[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*")  # RFC 6265 cookie-octets
_MAX_AGE = re.compile(r"(?:^|;)\s*max-age\s*=\s*(-?\d+)", re.IGNORECASE)


def session_value(session: str) -> str:
    """The header value that stands for ``session``: the session itself when it is short
    visible ASCII, else ``sha256:`` and the first 32 hex digits of its UTF-8 hash (the same
    session always gives the same value, and no session can break the request's head)."""
    if len(session) <= MAX_SESSION_CHARS and _SAFE.fullmatch(session) is not None:
        return session
    digest = hashlib.sha256(session.encode("utf-8", "surrogatepass")).hexdigest()
    return f"sha256:{digest[:32]}"


def cookie_value(set_cookie: str | None, name: str) -> str | None:
    """The value the ``Set-Cookie`` header(s) give the cookie ``name`` (the last one wins):
    None when they do not set it, ``""`` when they clear it (an empty value, ``Max-Age=0``
    or below). A value with bytes a cookie cannot hold is not taken. Several
    ``Set-Cookie`` headers arrive joined by ``", "`` (a cookie's value holds no comma; an
    ``Expires`` date does, but is never followed by ``name=``)."""
    if not set_cookie:
        return None
    found: str | None = None
    for cookie in _COOKIES.split(set_cookie):
        pair, _, attributes = cookie.partition(";")
        key, equals, value = pair.partition("=")
        value = value.strip().strip('"')
        if equals and key.strip() == name and _OCTETS.fullmatch(value) is not None:
            found = "" if _expired(attributes) else value
    return found


def _expired(attributes: str) -> bool:
    age = _MAX_AGE.search(attributes)
    return age is not None and int(age.group(1)) <= 0
