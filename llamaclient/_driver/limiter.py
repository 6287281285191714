"""``Limiter``: a concurrency limit shared by any number of ``Client``s and ``Pool``s.

At most ``max_in_flight`` turns hold a place at once (from just before the chat is sent to
the turn's end); the others wait in one line, a higher ``ChatRequest.priority`` first and
each priority in arrival order, and see ``Queued(ahead)`` (each step within 8 of the front,
every 8th step farther back). A request cancelled while it
waits takes no place; one that waits longer than ``wait_timeout`` fails with
``WaitTimeoutError`` before anything was sent. So a hundred tasks on a four-slot server open
four connections, and nothing piles up in llama-server's deferred queue.
"""

from __future__ import annotations

import bisect
import itertools
from typing import Any, Protocol

import anyio

__all__ = ["Limiter", "Place"]


class _Asks(Protocol):
    """What ``from_server`` reads a server's slot count from (a ``Client``)."""

    async def slots(self) -> list[Any]: ...

    async def props(self) -> Any: ...


class Place:
    """One turn's place: in the line, then holding a place under the limit."""

    __slots__ = ("changed", "deadline", "holding", "key")

    def __init__(self, key: tuple[int, int], deadline: float) -> None:
        self.key = key  # (-priority, arrival): the line's order
        self.deadline = deadline
        self.holding = False
        self.changed = anyio.Event()


class Limiter:
    """At most ``max_in_flight`` turns at once, over every client and pool it is given to
    (``Client(config, limiter=...)``, ``Pool(configs, limiter=...)``). ``name`` names it
    (in logs and traces); ``wait_timeout`` (seconds, None: forever) bounds a request's wait
    for a place."""

    def __init__(
        self, max_in_flight: int, *, name: str = "", wait_timeout: float | None = None
    ) -> None:
        if type(max_in_flight) is not int or max_in_flight < 1:
            raise ValueError(f"Limiter.max_in_flight must be an int >= 1, not {max_in_flight!r}")
        if wait_timeout is not None and not wait_timeout > 0:
            raise ValueError(f"Limiter.wait_timeout must be > 0 or None, not {wait_timeout!r}")
        self.max_in_flight = max_in_flight
        self.name = name
        self.wait_timeout = wait_timeout
        self.in_flight = 0
        self._line: list[Place] = []
        self._arrivals = itertools.count()

    def __repr__(self) -> str:
        shown = f"{self.name!r}, " if self.name else ""
        return (
            f"Limiter({shown}{self.in_flight}/{self.max_in_flight} in flight, "
            f"{len(self._line)} waiting)"
        )

    @property
    def waiting(self) -> int:
        """Requests waiting for a place."""
        return len(self._line)

    @classmethod
    async def from_server(cls, client: _Asks, *, name: str = "", **options: Any) -> Limiter:
        """A limiter sized to the server's total slots (``/slots``, else ``/props``
        ``total_slots``): a client never has more requests at the server than it serves."""
        try:
            total = len(await client.slots())
        except Exception:  # /slots disabled (501) or not reachable: /props says it too
            total = 0
        if total < 1:
            props = await client.props()
            total = props.total_slots or 1
        return cls(total, name=name, **options)

    # -- what the driver does with it (a turn's Admit and Free) ------------------------------
    def join(self, priority: int) -> Place:
        wait = self.wait_timeout
        deadline = float("inf") if wait is None else anyio.current_time() + wait
        place = Place((-priority, next(self._arrivals)), deadline)
        line = self._line
        at = bisect.bisect_right(line, place.key, key=_key)
        line.insert(at, place)
        behind = {id(other) for other in line[at + 1 :]}  # a higher priority moved them back
        self._admit()
        if behind:
            for index, other in enumerate(line):
                if id(other) in behind and _shown(index + 1):
                    other.changed.set()
        return place

    async def moved(self, place: Place, ahead: int) -> int:
        """How many go before ``place`` (0: it holds a place), once that is no longer
        ``ahead``; raises ``TimeoutError`` past its deadline."""
        if place.deadline == float("inf"):  # no wait_timeout: no cancel scope to pay for
            return await self._moved(place, ahead)
        with anyio.fail_after(max(place.deadline - anyio.current_time(), 0)):
            return await self._moved(place, ahead)

    async def _moved(self, place: Place, ahead: int) -> int:
        while True:
            place.changed = anyio.Event()  # a fresh event first, then look
            now = 0 if place.holding else self._line.index(place) + 1
            if now != ahead:
                return now
            await place.changed.wait()

    def free(self, place: Place) -> None:
        """The turn ended (or left the line): its place goes to the next in line. Of the
        others, each moves up one, and only those at a position worth showing are woken
        (``_shown``): waking all of them on every turn's end cost 2.4 ms of CPU a turn with
        96 waiting (``bench/limiter_live.py``), a turn's whole budget."""
        if place.holding:
            place.holding = False
            self.in_flight -= 1
        elif place in self._line:
            self._line.remove(place)
        self._admit()
        for index, other in enumerate(self._line):
            if _shown(index + 1):
                other.changed.set()

    def _admit(self) -> None:
        line = self._line
        while line and self.in_flight < self.max_in_flight:
            place = line.pop(0)
            place.holding = True
            self.in_flight += 1
            place.changed.set()


def _key(place: Place) -> tuple[int, int]:
    return place.key


def _shown(ahead: int) -> bool:
    """Whether a place that moved up to ``ahead`` is told (``Queued(ahead)``): near the
    front every step, farther back every 8th, so a long line costs a few wake-ups per turn
    that ends, not one per waiting request."""
    return ahead <= 8 or ahead % 8 == 0
