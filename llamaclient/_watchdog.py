"""The stall watchdog: cancels the reading task when a read waits longer than allowed.

One timer per stream, re-armed lazily: a read only records when it started waiting, so the
per-event cost is two attribute writes, not a timer reschedule.
"""

from __future__ import annotations

import asyncio

__all__ = ["Watchdog"]


class Watchdog:
    __slots__ = ("_handle", "_loop", "_seconds", "_since", "_task", "fired")

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._loop = asyncio.get_running_loop()
        self._task: asyncio.Task[object] | None = None
        self._since: float | None = None
        self._handle: asyncio.TimerHandle | None = None
        self.fired = False

    def waiting(self) -> None:
        """A read starts waiting now."""
        self._since = self._loop.time()
        self._task = asyncio.current_task()  # reads may come from different tasks
        if self._handle is None:
            self._handle = self._loop.call_at(self._since + self._seconds, self._check)

    def idle(self) -> None:
        """The read returned."""
        self._since = None

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _check(self) -> None:
        since = self._since
        if since is None:  # not reading now: look again one period from now
            self._handle = self._loop.call_later(self._seconds, self._check)
            return
        due = since + self._seconds
        if self._loop.time() < due:
            self._handle = self._loop.call_at(due, self._check)
            return
        self._handle = None
        self.fired = True
        if self._task is not None:
            self._task.cancel()
