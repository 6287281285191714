"""The one cookie a balancer that pins by cookie sets (``Config.affinity_cookie``), kept per
session for one client (a turn without a session keeps its own), and sent back."""

from __future__ import annotations

from collections import OrderedDict

from .._protocol.affinity import cookie_value

__all__ = ["MAX_KEPT", "Jar", "TurnCookie"]

MAX_KEPT = 1 << 16  # sessions whose cookie is kept; the least recently used goes first


class Jar:
    """One client's affinity cookie ``name``, by session."""

    __slots__ = ("_values", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._values: OrderedDict[str, str] = OrderedDict()

    def get(self, session: str) -> str | None:
        value = self._values.get(session)
        if value is not None:
            self._values.move_to_end(session)
        return value

    def put(self, session: str, value: str) -> None:
        """Keep ``value`` for ``session`` (``""``: the balancer cleared it)."""
        if not value:
            self._values.pop(session, None)
            return
        self._values[session] = value
        self._values.move_to_end(session)
        if len(self._values) > MAX_KEPT:
            self._values.popitem(last=False)


class TurnCookie:
    """One turn's view of a jar: its ``session``'s cookie, or (no session) its own."""

    __slots__ = ("_own", "session")

    def __init__(self, session: str | None) -> None:
        self.session = session
        self._own: str | None = None

    def header(self, jar: Jar) -> str | None:
        """The ``Cookie`` header to send (None: no cookie yet)."""
        value = self._own if self.session is None else jar.get(self.session)
        return None if value is None else f"{jar.name}={value}"

    def heard(self, jar: Jar, set_cookie: str | None) -> None:
        """A response's ``Set-Cookie`` (None: none)."""
        value = cookie_value(set_cookie, jar.name)
        if value is None:
            return
        if self.session is None:
            self._own = value or None
        else:
            jar.put(self.session, value)
