"""Hibernating a pool's idle sessions (``Pool(hibernate_after=seconds)``, llama-server's
``--slot-save-path``).

A session with a slot of its own that has been idle ``after`` seconds has its slot's prompt
cache saved to a file on its server and the slot erased, and gives the slot up: another
session can have it. Its next turn goes to the same server, takes a free slot of its own
again, and has the file restored into it before the chat, so the prompt cache is whole
again. Every failure (no ``--slot-save-path``, a file gone, no free slot) falls back to a
plain re-prefill, never an error. This runs when the pool routes a turn: idle sessions are
put to sleep just before a route is chosen, so a new session finds their slots free.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Protocol

from .._turn.balancer import Balancer
from .._types.errors import InferError

__all__ = ["Hibernation", "SlotFiles"]


class SlotFiles(Protocol):
    """What hibernation asks of a server's client."""

    async def save_slot(self, slot: int, filename: str) -> Any: ...

    async def erase_slot(self, slot: int) -> Any: ...

    async def restore_slot(self, slot: int, filename: str) -> Any: ...


def filename(session: str) -> str:
    """A session's file on its server: a plain name llama-server accepts, whatever the
    session is called."""
    return "llamaclient-" + hashlib.sha256(session.encode()).hexdigest()[:32] + ".bin"


class Hibernation:
    """The pool's hibernated sessions (``after``: the idle seconds before sleeping)."""

    __slots__ = ("after", "asleep", "restored", "saved")

    def __init__(self, after: float) -> None:
        if not after > 0:
            raise ValueError(f"Pool.hibernate_after must be > 0 seconds, not {after!r}")
        self.after = after
        self.asleep: dict[str, str] = {}  # session -> its file on its server
        self.saved = 0  # sessions put to sleep, and woken with their cache, so far
        self.restored = 0

    async def sleep_idle(
        self, balancer: Balancer, clients: Sequence[SlotFiles], now: float
    ) -> None:
        """Save and free the slot of every session idle long enough (best effort)."""
        for session, server, slot in balancer.idle(now, self.after):
            name = filename(session)
            try:
                await clients[server].save_slot(slot, name)
                await clients[server].erase_slot(slot)
            except InferError:
                continue  # it keeps its slot, as without hibernation
            balancer.sleep(session)
            self.asleep[session] = name
            self.saved += 1

    async def restore(self, client: SlotFiles, session: str, slot: int) -> None:
        """Put ``session``'s saved prompt back into ``slot`` (its own again) before its
        chat; a failure leaves the chat to evaluate its prompt (best effort)."""
        name = self.asleep.pop(session, None)
        if name is None:
            return
        try:
            await client.restore_slot(slot, name)
        except InferError:
            return
        self.restored += 1
