"""Admission: a place under a concurrency limit shared by agents (the ``Limiter``), taken
before the chat is sent and given back when the turn ends. A request that waits shows
``Queued(ahead)`` as its place in the limiter's line changes (higher ``priority`` first,
each priority in arrival order); past the limiter's ``wait_timeout`` it is a
``WaitTimeoutError``, before anything was sent."""

from __future__ import annotations

from .._types.events import Queued
from .commands import Admit
from .failures import typed_error
from .phase import Context, Next, Phase

__all__ = ["admission"]


def admission(ctx: Context, then: Next) -> Phase:
    """Wait for a place under the limit, when the turn's client has one."""
    if not ctx.limited:
        return then()
    return _Admission(ctx, then)


class _Admission(Phase):
    __slots__ = ("_shown", "_then")
    name = "waiting for a place under the limit"

    def __init__(self, ctx: Context, then: Next) -> None:
        super().__init__(ctx, Admit(ctx.request.priority, -1))
        ctx.admitted = True  # in the limiter's line: the cleanup gives the place back
        self._then = then
        self._shown = -1

    def admitted(self, ahead: int) -> Phase:
        ctx = self.ctx
        if ahead == 0:
            return self._then()
        if ahead != self._shown:
            self._shown = ahead
            ctx.emit(Queued(ahead))
        self.command = Admit(ctx.request.priority, ahead)
        return self

    def failed(self, kind: str, message: str) -> Phase:
        return self.ctx.fail(typed_error(kind, message, "admit"))
