"""Per-slot ordering inside one client: requests pinned to the same slot run one at a time,
in arrival order. Each waiting request learns how many are ahead of it as that changes."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator

__all__ = ["SlotQueue"]


class _Ticket:
    __slots__ = ("changed",)

    def __init__(self) -> None:
        self.changed = asyncio.Event()


class SlotQueue:
    """FIFO lines, one per slot id."""

    def __init__(self) -> None:
        self._lines: dict[int, deque[_Ticket]] = {}

    async def wait_turn(self, slot: int, ticket: object) -> AsyncIterator[int]:
        """Yield the number ahead of ``ticket`` each time it changes, until it is 0 (not
        yielded). The caller must call :meth:`leave` when done, also on error."""
        assert isinstance(ticket, _Ticket)
        line = self._lines[slot]
        last = -1
        while True:
            # Clear first, then look: a leave() during the yield below (the caller's code
            # runs there) is then seen on the next look instead of being wiped out.
            ticket.changed.clear()
            ahead = line.index(ticket)
            if ahead == 0:
                return
            if ahead != last:
                last = ahead
                yield ahead
                continue
            await ticket.changed.wait()

    def join(self, slot: int) -> _Ticket:
        ticket = _Ticket()
        self._lines.setdefault(slot, deque()).append(ticket)
        return ticket

    def leave(self, slot: int, ticket: object) -> None:
        line = self._lines.get(slot)
        if line is None or not isinstance(ticket, _Ticket) or ticket not in line:
            return
        line.remove(ticket)
        if not line:
            del self._lines[slot]
            return
        for other in line:
            other.changed.set()
