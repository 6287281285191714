"""What the turns of one client share: the endpoint, the facts learnt about the server
(``Known``), the lines for pinned slots, and the lookups that overlapping turns make once."""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import anyio

from .._turn.history import History
from .._turn.known import Known
from .._types.totals import UsageTotals
from .cookies import Jar
from .endpoint import Endpoint
from .limiter import Limiter

__all__ = ["Lines", "Shared", "SingleFlight", "Ticket"]

T = TypeVar("T")
_RELEASE_GRACE = 1.5  # the turn's own bound; older releases are not reported


class Ticket:
    """A request's place in a slot's line."""

    __slots__ = ("changed",)

    def __init__(self) -> None:
        self.changed = anyio.Event()


class Lines:
    """FIFO lines, one per slot id, and when this client's last request on each slot ended.
    Requests of one client pinned to the same slot run one at a time, in arrival order."""

    def __init__(self) -> None:
        self._lines: dict[int, deque[Ticket]] = {}
        self._released: dict[int, float] = {}

    def join(self, slot: int) -> Ticket:
        ticket = Ticket()
        self._lines.setdefault(slot, deque()).append(ticket)
        return ticket

    async def moved(self, slot: int, ticket: Ticket, ahead: int) -> int:
        """How many are ahead of ``ticket``, once that is no longer ``ahead``."""
        line = self._lines[slot]
        while True:
            # A fresh event first, then look: a leave() while the caller's code ran is then
            # seen on this look instead of being wiped out.
            ticket.changed = anyio.Event()
            now = line.index(ticket)
            if now != ahead:
                return now
            await ticket.changed.wait()

    def released_ago(self, slot: int) -> float | None:
        """Seconds since this client's last request on ``slot`` ended (None: long ago)."""
        released = self._released.get(slot)
        if released is None:
            return None
        ago = anyio.current_time() - released
        return ago if ago < _RELEASE_GRACE else None

    def leave(self, slot: int, ticket: Ticket) -> None:
        """A request of this client for ``slot`` ended: the next in line may go."""
        self._released[slot] = anyio.current_time()
        line = self._lines.get(slot)
        if line is None or ticket not in line:
            return
        line.remove(ticket)
        if not line:
            del self._lines[slot]
            return
        for other in line:
            other.changed.set()


class _Flight(Generic[T]):
    __slots__ = ("done", "error", "result")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.result: T | None = None
        self.error: BaseException | None = None


class SingleFlight(Generic[T]):
    """Calls with the same key that overlap share the first one's outcome (its result, or
    its exception); a first call that was cancelled leaves the next one to try again."""

    def __init__(self) -> None:
        self._flights: dict[object, _Flight[T]] = {}

    async def run(self, key: object, call: Callable[[], Awaitable[T]]) -> T:
        while True:
            flight = self._flights.get(key)
            if flight is None:
                return await self._lead(key, call)
            await flight.done.wait()
            if flight.error is None:
                return flight.result  # type: ignore[return-value]
            if not isinstance(flight.error, anyio.get_cancelled_exc_class()):
                raise flight.error

    async def _lead(self, key: object, call: Callable[[], Awaitable[T]]) -> T:
        flight: _Flight[T] = _Flight()
        self._flights[key] = flight
        try:
            flight.result = result = await call()
        except BaseException as exc:
            flight.error = exc
            raise
        finally:
            del self._flights[key]
            flight.done.set()
        return result


class Shared:
    """One client's: ``endpoint``, ``known``, ``lines``, ``lookups``, the concurrency
    ``limiter`` it shares with others (None: no limit), and the ``jar`` of its sessions'
    affinity cookies (None: ``Config.affinity_cookie`` is not set)."""

    __slots__ = ("endpoint", "history", "jar", "known", "limiter", "lines", "lookups", "usage")

    def __init__(self, endpoint: Endpoint, limiter: Limiter | None = None) -> None:
        self.endpoint = endpoint
        self.limiter = limiter
        self.known = endpoint.known = Known()
        self.lines = Lines()
        self.lookups: SingleFlight[tuple[int, bytes, bool]] = SingleFlight()
        name = endpoint.config.affinity_cookie
        self.jar = None if name is None else Jar(name)
        self.history = History()  # its sessions' previous turns (the cache report)
        self.usage = UsageTotals()  # what its turns asked of the server, per model
