"""Closing what a dropped stream held: a ``ChatStream`` that nobody references any more
(a ``break`` without ``async with``) is finalised at once, by a task of the running event
loop (asyncio's, or a trio system task), not at the next garbage collection."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable

from .._turn.machine import ChatTurn
from .perform import Performer

__all__ = ["close_turn", "schedule"]

_RUNNING: set[asyncio.Task[None]] = set()  # the loop keeps only weak references to tasks


def schedule(cleanup: Callable[[], Awaitable[None]]) -> None:
    """Run ``cleanup()`` soon in the current thread's event loop; without one (the object
    was collected elsewhere, or at exit), there is nothing to await it with."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        trio = sys.modules.get("trio")
        if trio is not None:
            with contextlib.suppress(RuntimeError):  # not inside trio either
                trio.lowlevel.spawn_system_task(_quietly, cleanup)
        return
    task = loop.create_task(_quietly(cleanup))
    _RUNNING.add(task)
    task.add_done_callback(_RUNNING.discard)


async def _quietly(cleanup: Callable[[], Awaitable[None]]) -> None:
    with contextlib.suppress(Exception):  # best effort: a finaliser has no caller to tell
        await cleanup()


async def close_turn(turn: ChatTurn, io: Performer) -> None:
    """Stop ``turn`` and perform its closing (release, cancel, leave the line): the user
    stopped it (a cancel, ``aclose()``, a dropped stream)."""
    turn.stop()
    while not turn.done:
        await io.perform(turn, turn.command)
    if io.observer is not None:
        io.observer.ended(turn, stopped=True)
    await io.ended(turn)
