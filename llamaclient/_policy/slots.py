"""The slot line and the busy-slot check.

Requests of one client pinned to the same slot run one at a time, in arrival order; each
waiting request learns how many are ahead of it as that changes (``Queued``). Before a pinned
request goes out, ``GET /slots`` tells whether another client holds the slot (``Waiting`` or,
with ``wait=False``, ``BusyError``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncGenerator
from contextlib import aclosing

import anyio

from .._types.errors import (
    BusyError,
    ConnectError,
    HTTPStatusError,
    ProtocolError,
    WaitTimeoutError,
)
from .._types.events import ChatEvent, Queued, Waiting
from .endpoint import Endpoint

__all__ = ["SlotGate", "SlotQueue", "Ticket"]

_RELEASE_GRACE = 1.5  # seconds: llama-server notices a cut connection within ~1 s


class Ticket:
    """A request's place in a slot's line."""

    __slots__ = ("changed",)

    def __init__(self) -> None:
        self.changed = anyio.Event()


class SlotQueue:
    """FIFO lines, one per slot id."""

    def __init__(self) -> None:
        self._lines: dict[int, deque[Ticket]] = {}

    async def wait_turn(self, slot: int, ticket: Ticket) -> AsyncGenerator[int, None]:
        """Yield the number ahead of ``ticket`` each time it changes, until it is 0 (not
        yielded). The caller must call :meth:`leave` when done, also on error."""
        line = self._lines[slot]
        last = -1
        while True:
            # A fresh event first, then look: a leave() during the yield below (the caller's
            # code runs there) is then seen on the next look instead of being wiped out.
            ticket.changed = anyio.Event()
            ahead = line.index(ticket)
            if ahead == 0:
                return
            if ahead != last:
                last = ahead
                yield ahead
                continue
            await ticket.changed.wait()

    def join(self, slot: int) -> Ticket:
        ticket = Ticket()
        self._lines.setdefault(slot, deque()).append(ticket)
        return ticket

    def leave(self, slot: int, ticket: Ticket) -> None:
        line = self._lines.get(slot)
        if line is None or ticket not in line:
            return
        line.remove(ticket)
        if not line:
            del self._lines[slot]
            return
        for other in line:
            other.changed.set()


class SlotGate:
    """The line for each pinned slot, and the look at ``/slots`` before going out."""

    def __init__(self, endpoint: Endpoint) -> None:
        self._endpoint = endpoint
        self._queue = SlotQueue()
        self._released: dict[int, float] = {}  # slot -> when our last request on it ended

    def join(self, slot: int) -> Ticket:
        return self._queue.join(slot)

    def leave(self, slot: int, ticket: Ticket) -> None:
        """A request of this client for ``slot`` ended: the next in line may go."""
        self._released[slot] = anyio.current_time()
        self._queue.leave(slot, ticket)

    async def enter(
        self, slot: int, ticket: Ticket, *, wait: bool
    ) -> AsyncGenerator[ChatEvent, None]:
        """Wait for our turn (yielding ``Queued``), then check the server's slot (yielding
        ``Waiting(slot_busy=True)``, or raising ``BusyError`` when ``wait`` is False)."""
        async with aclosing(self._queue.wait_turn(slot, ticket)) as turn:
            async for ahead in turn:
                yield Queued(ahead)
        busy = await self.busy(slot)
        if busy and not wait:
            if await self._still_busy_after_us(slot):
                raise BusyError(f"slot {slot} is busy")
            return
        if busy:
            yield Waiting(slot_busy=True)

    async def busy(self, slot: int) -> bool:
        """Whether ``GET /slots`` says the slot is processing; False when it cannot tell."""
        try:
            slots = await self._endpoint.get_json("/slots")
        except (HTTPStatusError, ConnectError, WaitTimeoutError, ProtocolError):
            return False  # /slots disabled, unreachable or slow: let the server queue us
        if not isinstance(slots, list) or not slots:
            return False
        entry = slots[slot % len(slots)]  # llama-server wraps id_slot the same way
        return isinstance(entry, dict) and bool(entry.get("is_processing"))

    async def _still_busy_after_us(self, slot: int) -> bool:
        """The server frees a slot about one token step after our own request on it ended
        (or ~1 s after a cut connection): within that window, look again before calling the
        slot busy elsewhere."""
        released = self._released.get(slot)
        while released is not None and anyio.current_time() - released < _RELEASE_GRACE:
            await anyio.sleep(0.05)
            if not await self.busy(slot):
                return False
        return True
