"""The commands of a turn that wait rather than exchange: ``Sleep`` and the armed timers
that bound it (``Arm``), this client's line for a slot (``Line``/``Leave``) and a shared
limit's place (``Admit``/``Free``). Part of the turn's I/O (``perform.py``), kept here so
that each file stays one reading."""

from __future__ import annotations

from collections.abc import Sequence

import anyio

from .._turn.commands import Admit, Arm, Free, Leave, Line, Sleep
from .._turn.machine import ChatTurn
from .._types.events import ChatEvent
from .limiter import Place
from .observe import Outcome
from .shared import Shared, Ticket

__all__ = ["Waits"]


class Waits:
    """The waiting half of a turn's :class:`~llamaclient._driver.perform.Performer` (its
    slots are the performer's)."""

    __slots__ = ("_deadlines", "_outcome", "_place", "_ticket")
    shared: Shared

    def __init__(self) -> None:
        self._outcome: Outcome = None  # how the last command came out (for an observer)
        self._place: Place | None = None  # in the limiter's line, or holding a place
        self._ticket: Ticket | None = None  # in a slot's line
        self._deadlines: dict[str, float] = {}  # armed timers: when each fires

    async def _sleep(self, turn: ChatTurn, command: Sleep) -> Sequence[ChatEvent]:
        with anyio.move_on_after(self._left(command.bound)) as scope:
            await anyio.sleep(command.seconds)
        if scope.cancelled_caught:
            assert command.bound is not None
            return turn.fired(command.bound)
        return turn.woke()

    async def _arm(self, turn: ChatTurn, command: Arm) -> Sequence[ChatEvent]:
        self._deadlines[command.timer] = anyio.current_time() + command.seconds
        return turn.performed()

    def _left(self, timer: str | None) -> float:
        """Seconds until the armed ``timer`` fires (inf: none)."""
        deadline = self._deadlines.get(timer) if timer is not None else None
        return float("inf") if deadline is None else deadline - anyio.current_time()

    async def _line(self, turn: ChatTurn, command: Line) -> Sequence[ChatEvent]:
        lines = self.shared.lines
        ticket = self._ticket
        if ticket is None:
            ticket = self._ticket = lines.join(command.slot)
        ahead = await lines.moved(command.slot, ticket, command.ahead)
        released = lines.released_ago(command.slot) if ahead == 0 else None
        return turn.line(ahead, released)

    async def _leave(self, turn: ChatTurn, command: Leave) -> Sequence[ChatEvent]:
        self.leave(command.slot)
        return turn.performed()

    def leave(self, slot: int) -> None:
        ticket, self._ticket = self._ticket, None
        if ticket is not None:
            self.shared.lines.leave(slot, ticket)

    async def _admit(self, turn: ChatTurn, command: Admit) -> Sequence[ChatEvent]:
        limiter = self.shared.limiter
        assert limiter is not None
        place = self._place
        if place is None:
            place = self._place = limiter.join(command.priority)
        try:
            ahead = await limiter.moved(place, command.ahead)
        except TimeoutError:
            self._outcome = "timeout"
            return turn.failed("timeout", f"no place within {limiter.wait_timeout} s")
        return turn.admitted(ahead)

    async def _free(self, turn: ChatTurn, command: Free) -> Sequence[ChatEvent]:
        self.free()
        return turn.performed()

    def free(self) -> None:
        place, self._place = self._place, None
        if place is not None and self.shared.limiter is not None:
            self.shared.limiter.free(place)
