"""The stall watchdog: cancels the reading task when a read waits longer than allowed.

One timer per stream, re-armed lazily. The reading loop writes ``since`` (when the current read
started waiting; None between reads) and ``task`` (the task that reads) itself, so the
per-read cost is ``loop.time()``, ``current_task()`` and three attribute writes, not a timer
reschedule.
"""

from __future__ import annotations

import asyncio

__all__ = ["Watchdog"]


class Watchdog:
    __slots__ = ("_handle", "_loop", "_seconds", "fired", "since", "task")

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._loop = asyncio.get_running_loop()
        self.task: asyncio.Task[object] | None = None
        self.since: float | None = None
        self.fired = False
        self._handle: asyncio.TimerHandle | None = self._loop.call_later(seconds, self._check)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _check(self) -> None:
        since = self.since
        if since is None:  # not reading now: look again one period from now
            self._handle = self._loop.call_later(self._seconds, self._check)
            return
        due = since + self._seconds
        if self._loop.time() < due:
            self._handle = self._loop.call_at(due, self._check)
            return
        self._handle = None
        self.fired = True
        if self.task is not None:
            self.task.cancel()
