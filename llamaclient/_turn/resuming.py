"""Picking a stream up on the server's session (``GET /v1/stream?conv_id=<id>&from=<n>``).

llama-server tees a stream that carries ``X-Conversation-Id`` into a session buffer and
replays its raw body bytes from any offset, so the body bytes received are all the
bookkeeping needed: the SSE decoder and the assembler go on as if the bytes had never stopped.
A server without the feature answers the route 404 (the same body as an expired session:
``POST /v1/streams/lookup`` with no ids tells them apart, once per client), 405 or 501.

Three callers: a stream that broke (the events go on where they were), a chat that got no
answer at all (with the session it went on from its first byte; without one it is sent
again), and ``Client.reattach`` (another process picks a turn up).
"""

from __future__ import annotations

from collections.abc import Callable

from .._types.events import Resuming as ResumingEvent
from .commands import Call, Close, Command, ReadAll, Send, Sleep
from .failures import typed_error
from .phase import Context, Next, Phase, stream_path

__all__ = ["LOOKUP_PATH", "Resuming", "resumable"]

LOOKUP_PATH = "/v1/streams/lookup"
_EMPTY_LOOKUP = b'{"conversation_ids":[]}'
_UNSUPPORTED = (405, 501)  # a proxy, an older build, another server: no resume here


def allowed(ctx: Context) -> int:
    """Reconnects allowed per turn: ``max_retries``, at least one."""
    return max(ctx.config.max_retries, 1)


def resumable(ctx: Context, kind: str) -> bool:
    """Whether a break of ``kind`` should be picked up: resume is on, the server may have
    it, the reconnects are not used up, and the answer is not already whole (silence after
    the finish reason is the end of the answer, not a break)."""
    if ctx.plan.conversation_id is None or ctx.known.resume is False or kind == "connect":
        return False
    if ctx.asm.is_finished and kind == "stall":
        return False
    return ctx.resumes < allowed(ctx)


class Resuming(Phase):
    """Reconnecting from ``ctx.offset``. ``streamed``: the phase that reads the new response;
    ``unsupported``: what a server without resume means here; ``gone``: what a server whose
    session is gone means (given the reason). ``event``: the ``Resuming`` to show (None:
    none), before the reconnect when ``early``, else once it worked: so a server that cannot
    resume reports the break exactly as it would without resume."""

    __slots__ = ("_event", "_gone", "_status", "_streamed", "_unsupported")
    name = "resuming"

    def __init__(
        self,
        ctx: Context,
        *,
        streamed: Next,
        unsupported: Next,
        gone: Callable[[str], Phase],
        event: ResumingEvent | None,
        early: bool = False,
    ) -> None:
        self._streamed = streamed
        self._unsupported = unsupported
        self._gone = gone
        self._event = event
        self._status = 0
        if event is not None and early:
            ctx.emit(event)
            self._event = None
        first: Command = self._next_try(ctx)
        if ctx.open:
            ctx.open = False
            first = Close()  # the broken response goes first
        super().__init__(ctx, first)

    def _next_try(self, ctx: Context) -> Command:
        ctx.resumes += 1
        if ctx.resumes > 1:  # the first reconnect goes at once: the session is there
            return Sleep(ctx.backoff(ctx.resumes))
        return self._send(ctx)

    @staticmethod
    def _send(ctx: Context) -> Send:
        conversation = ctx.plan.conversation_id or ""
        path = f"{stream_path(conversation)}&from={ctx.offset}"
        config = ctx.config
        return Send("GET", path, None, ctx.affinity, config.wait_timeout, config.stall_timeout)

    def performed(self) -> Phase:  # the broken response is closed
        if self.ctx.resumes == 1:
            self.command = self._send(self.ctx)
            return self
        self.command = Sleep(self.ctx.backoff(self.ctx.resumes))
        return self

    def woke(self) -> Phase:
        self.command = self._send(self.ctx)
        return self

    def opened(self, status: int, header: object) -> Phase:
        ctx = self.ctx
        ctx.open = True
        if status < 300:
            ctx.known.resume = True
            ctx.generating = True
            if self._event is not None:
                ctx.emit(self._event)
            return self._streamed()
        self._status = status
        self.command = ReadAll(ctx.config.max_error_body_bytes)
        return self

    def body(self, data: bytes, truncated: bool) -> Phase:
        ctx = self.ctx
        status = self._status
        if not status:
            self._unexpected("body")
        ctx.open = False
        if status in _UNSUPPORTED:
            ctx.known.resume = False
            return self._unsupported()
        why = (
            f"the stream could not be resumed at byte {ctx.offset}: HTTP {status} "
            f"{data[:200].decode('utf-8', 'replace')}"
        )
        if status == 404 and ctx.known.resume is None:
            return _Lookup(ctx, self._unsupported, lambda: self._gone(why))
        return self._gone(why)

    def failed(self, kind: str, message: str) -> Phase:
        ctx = self.ctx
        if ctx.open:  # the error body could not be read: judge the status alone
            return self.body(b"", False)
        if ctx.resumes >= allowed(ctx):
            return ctx.fail(typed_error(kind, message, "reconnect"))
        self.command = self._next_try(ctx)
        return self


class _Lookup(Phase):
    """A 404 from the resume route: the same body for a missing route and an expired
    session, so ask once whether the routes exist (200 where they do)."""

    __slots__ = ("_gone", "_unsupported")
    name = "asking whether the server resumes"

    def __init__(self, ctx: Context, unsupported: Next, gone: Next) -> None:
        limit = ctx.config.max_body_bytes
        super().__init__(ctx, Call("POST", LOOKUP_PATH, _EMPTY_LOOKUP, ctx.affinity, limit=limit))
        self._unsupported = unsupported
        self._gone = gone

    def answered(self, status: int, data: bytes) -> Phase:
        self.ctx.known.resume = status == 200
        return self._gone() if status == 200 else self._unsupported()

    def failed(self, kind: str, message: str) -> Phase:
        return self._unsupported()  # cannot tell now; ask again next time
