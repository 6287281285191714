"""``ChatTurn``: one chat turn as a pure state machine, after h11's ``Connection``.

Inputs go in (a response head, body bytes, a whole body, an exchange's answer, a failure
with its kind, a timer that fired, the slot line moving, the user stopping); decisions come
out: the events to deliver (each input returns them) and one next :attr:`ChatTurn.command`
for the driver (``_turn/commands.py``). The machine does no I/O and reads no clock.

A turn goes through its stages in order (each may be skipped, each may fail the turn)::

    routing (a pool) -> media -> model -> slot line -> admission -> opening -> streaming
                                                                 |  ^          |  ^
                                               backoff, loading -+  |          |  |
                                                    resuming (unanswered) ----+  |
                                                                       resuming -+
    ... -> closing -> done

It owns the SSE decoder, the assembler, the resume offset, the retry and backoff arithmetic,
the thinking budget and the typed-output check; ``partial`` and ``thinking_capped`` are its
own, and every error it ends with carries the partial the events showed.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from .._types.completion import Completion, Usage
from .._types.errors import InferError, ResumeError
from .._types.events import ChatEvent, Content, Reasoning, Routed, ToolCallDelta
from .admission import admission
from .before import media, models, slot_line
from .commands import Command, Done
from .opening import Opening, stream
from .phase import Closing, Context, Header, Phase, Routing
from .plan import Plan, Target
from .preflight import preflight
from .resuming import Resuming

__all__ = ["EMPTY", "ChatTurn"]

_NONE: Sequence[ChatEvent] = ()


def _stages(ctx: Context) -> Phase:
    """The way through a turn, from its first stage (again after a pool's failover). A
    function of the context only: nothing it makes refers back to the turn, so a finished
    turn is freed by reference counting, not left to the cyclic garbage collector."""
    if ctx.plan.reattach:
        return Resuming(
            ctx,
            streamed=lambda: stream(ctx),
            unsupported=lambda: ctx.fail(ResumeError("this server has no resumable streams")),
            gone=lambda why: ctx.fail(ResumeError(why)),
            event=None,
        )

    def send() -> Phase:
        return Opening(ctx)

    def counted() -> Phase:
        return preflight(ctx, lambda: slot_line(ctx, lambda: admission(ctx, send)))

    return media(ctx, lambda: models(ctx, counted))


class ChatTurn:
    """One chat turn. ``command`` is what the driver must do now; feed its result to the
    input method it names, and deliver the events that input returns, in order. Once
    ``command`` is ``Done``, the turn is over."""

    __slots__ = ("_ctx", "_phase", "command")

    def __init__(self, plan: Plan, target: Target) -> None:
        self._ctx = ctx = Context(plan, target, _stages)
        self._phase: Phase = Routing(ctx) if plan.pooled else _stages(ctx)
        self.command: Command = self._phase.command

    # -- inputs ------------------------------------------------------------------------------
    def data(self, chunk: bytes) -> list[ChatEvent]:
        """``Read``: the next piece of the body (``b""``: its end)."""
        phase = self._phase
        events = phase.data(chunk)
        after = phase.after
        if after is not None:
            self._phase = after
            self.command = after.command
        return events

    def opened(self, status: int, header: Header) -> Sequence[ChatEvent]:
        """``Send``: the response head arrived (``header(name)`` reads its headers)."""
        return self._go(self._phase.opened(status, header))

    def body(self, data: bytes, truncated: bool = False) -> Sequence[ChatEvent]:
        """``ReadAll``: the whole body (cut at the limit when ``truncated``)."""
        return self._go(self._phase.body(data, truncated))

    def answered(self, status: int, data: bytes) -> Sequence[ChatEvent]:
        """``Call``: the exchange's status and body."""
        return self._go(self._phase.answered(status, data))

    def failed(self, kind: str, message: str) -> Sequence[ChatEvent]:
        """``Send``, ``Read``, ``ReadAll``, ``Call`` or ``Route``: the transport failed with
        ``kind`` (``TransportError.kind``; ``"timeout"``: the head did not come in time)."""
        return self._go(self._phase.failed(kind, message))

    def woke(self) -> Sequence[ChatEvent]:
        """``Sleep``: the time is up."""
        return self._go(self._phase.woke())

    def fired(self, timer: str) -> Sequence[ChatEvent]:
        """``Call`` or ``Sleep``: the armed timer that bounds it ran out first."""
        return self._go(self._phase.fired(timer))

    def line(self, ahead: int, released_ago: float | None = None) -> Sequence[ChatEvent]:
        """``Line``: ``ahead`` requests are now ahead in the slot's line."""
        return self._go(self._phase.line(ahead, released_ago))

    def routed(self, target: Target, event: Routed) -> Sequence[ChatEvent]:
        """``Route``: the pool chose ``target``."""
        return self._go(self._phase.routed(target, event))

    def admitted(self, ahead: int) -> Sequence[ChatEvent]:
        """``Admit``: ``ahead`` requests are ahead under the limit (0: the turn has its
        place)."""
        return self._go(self._phase.admitted(ahead))

    def performed(self) -> Sequence[ChatEvent]:
        """``Close``, ``Drain``, ``Arm`` or ``Leave``: done."""
        return self._go(self._phase.performed())

    def stop(self) -> None:
        """The user stopped the turn (``aclose()``, a cancel, a dropped stream): what is
        not delivered yet is dropped, and the turn closes."""
        ctx = self._ctx
        ctx.events.clear()
        if not isinstance(self._phase, Closing):
            self._go(Closing(ctx, None, None))

    def _go(self, phase: Phase) -> Sequence[ChatEvent]:
        self._phase = phase
        self.command = phase.command
        events = self._ctx.events
        if not events:
            return _NONE
        self._ctx.events = []
        return events

    # -- what the driver reads -----------------------------------------------------------------
    @property
    def phase(self) -> str:
        """The current phase's name (``"streaming"``, ``"closing"``, ...)."""
        return self._phase.name

    @property
    def done(self) -> bool:
        return isinstance(self.command, Done)

    @property
    def completion(self) -> Completion | None:
        """The Completion, once the turn finished (None before, or if it did not)."""
        command = self.command
        return command.completion if isinstance(command, Done) else None

    @property
    def error(self) -> InferError | None:
        command = self.command
        return command.error if isinstance(command, Done) else None

    @property
    def closing(self) -> bool:
        """The turn is closing or over: no more events will come."""
        return isinstance(self._phase, Closing)

    @property
    def outcome(self) -> Completion | InferError | None:
        """What the turn is closing with: its Completion, its error, or None (stopped)."""
        phase = self._phase
        if isinstance(phase, Closing):
            return phase.completion if phase.error is None else phase.error
        return None

    def partial(self) -> Completion | None:
        """What arrived so far (None before any chunk): exactly what the events showed."""
        return self._ctx.partial()

    def partial_seen(self, unseen: Sequence[ChatEvent]) -> Completion:
        """:meth:`partial` without the events the consumer has not taken yet (``unseen``,
        the rest of the batch it is reading); before any chunk, an empty Completion."""
        partial = self._ctx.partial()
        return EMPTY if partial is None else _without(partial, unseen)

    @property
    def thinking_capped(self) -> bool:
        return self._ctx.capped

    @property
    def offset(self) -> int:
        """Body bytes received (where a resume picks up)."""
        return self._ctx.offset

    @property
    def generating(self) -> bool:
        """The chat was sent and may have started: output may come (never re-sent then)."""
        return self._ctx.generating

    @property
    def server(self) -> int | None:
        """A pool's turn: the index of the server it is on."""
        return self._ctx.server

    @property
    def context(self) -> Context:
        return self._ctx


EMPTY = Completion(
    id="",
    model=None,
    content=None,
    reasoning_content=None,
    tool_calls=(),
    finish_reason=None,
    timings=None,
    usage=Usage(),
)


def _without(partial: Completion, unseen: Sequence[ChatEvent]) -> Completion:
    """``partial`` minus the events the consumer has not received yet (the rest of the
    current batch): they are a suffix of the stream, so their text is a suffix of each field.
    A call whose first piece is unseen is dropped (with the calls after it)."""
    if not unseen:
        return partial
    content, reasoning = partial.content or "", partial.reasoning_content or ""
    calls = list(partial.tool_calls)
    for event in reversed(unseen):
        if isinstance(event, Content):
            content = content[: len(content) - len(event.text)]
        elif isinstance(event, Reasoning):
            reasoning = reasoning[: len(reasoning) - len(event.text)]
        elif isinstance(event, ToolCallDelta) and event.index < len(calls):
            call = calls[event.index]
            arguments = call.arguments[: len(call.arguments) - len(event.arguments)]
            if event.name is not None and not arguments:  # its first piece
                del calls[event.index :]
            else:
                calls[event.index] = msgspec.structs.replace(call, arguments=arguments)
    return msgspec.structs.replace(
        partial,
        content=content or None,
        reasoning_content=reasoning or None,
        tool_calls=tuple(calls),
    )
