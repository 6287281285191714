"""What a turn tells the instruments that watch it (tracing, logging, usage totals).

An :class:`Observer` is told, in order: that the turn starts; each command the driver
performed and how it came out (an HTTP status, a transport failure's kind, or nothing);
each batch of events delivered; and how the turn ended. It may add request headers (the
W3C ``traceparent``). The stream holds at most one (several are composed by
:class:`Observers`), and None when nothing watches, so an unwatched turn pays one ``is
None`` check per read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from .._turn.commands import Command
from .._turn.machine import ChatTurn
from .._turn.plan import Plan, Target
from .._types.events import ChatEvent

__all__ = ["Instrument", "Observer", "Observers", "Outcome", "observer_for"]

Outcome = int | str | None
"""How a command came out: the HTTP status of a ``Send`` or ``Call``, the ``kind`` of a
transport failure (``"connect"``, ``"timeout"``, ...), or None (nothing to say)."""


class Observer:
    """Watches one turn; every method does nothing here (override what you need).
    ``watches_events``: False when :meth:`events` does nothing (the stream then skips the
    call on every read)."""

    watches_events = True

    def started(self, turn: ChatTurn) -> None:
        """The turn starts: its first command is about to be performed."""

    def headers(self) -> Mapping[str, str]:
        """Headers to add to the turn's requests (asked for each ``Send``)."""
        return {}

    def performed(self, command: Command, outcome: Outcome) -> None:
        """The driver performed ``command`` (anything but ``Read`` and ``Done``)."""

    def events(self, events: Sequence[ChatEvent]) -> None:
        """A batch of events was handed to the consumer (a read's, or a command's)."""

    def ended(self, turn: ChatTurn, stopped: bool) -> None:
        """The turn is over: ``turn.completion`` or ``turn.error`` says how, or neither when
        the user ``stopped`` it."""


class Observers(Observer):
    """Several observers as one, told in order."""

    __slots__ = ("_all", "watches_events")

    def __init__(self, observers: Sequence[Observer]) -> None:
        self._all = tuple(observers)
        self.watches_events = any(o.watches_events for o in self._all)

    def started(self, turn: ChatTurn) -> None:
        for observer in self._all:
            observer.started(turn)

    def headers(self) -> Mapping[str, str]:
        merged: dict[str, str] = {}
        for observer in self._all:
            merged.update(observer.headers())
        return merged

    def performed(self, command: Command, outcome: Outcome) -> None:
        for observer in self._all:
            observer.performed(command, outcome)

    def events(self, events: Sequence[ChatEvent]) -> None:
        for observer in self._all:
            observer.events(events)

    def ended(self, turn: ChatTurn, stopped: bool) -> None:
        for observer in self._all:
            observer.ended(turn, stopped)


Instrument = Callable[[Plan, Target], Observer | None]
"""What watches a client's turns (tracing, logging, usage): asked once per turn, when it is
made, for its observer (None: not this one)."""


def observer_for(instruments: Sequence[Instrument], plan: Plan, target: Target) -> Observer | None:
    """The one observer of a turn: None when no instrument watches it."""
    found = [o for o in (make(plan, target) for make in instruments) if o is not None]
    if not found:
        return None
    return found[0] if len(found) == 1 else Observers(found)
