"""What every phase of a turn shares: the :class:`Context` (the turn's facts, each with one
owner), the :class:`Phase` base (one handler per input), and the phases any other phase may
pass to: a retry's backoff, the wait for a loading model, the closing and the end.

A phase is one named state of the machine. Its ``command`` is what the driver must do now;
each input handler returns the next phase (often itself). Phases never import each other in
a circle: a phase that hands over to a later one gets it as a callable (``then``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NoReturn
from urllib.parse import quote

import msgspec

from .._protocol.affinity import session_value
from .._protocol.assembler import Assembler
from .._protocol.models import model_query
from .._protocol.retry import backoff_seconds
from .._types.completion import Completion
from .._types.config import Config
from .._types.errors import ConnectError, InferError, LoadTimeoutError
from .._types.events import ChatEvent, Proxied, Retrying, Routed, Waiting
from .._types.request import ChatRequest
from .commands import Arm, Call, Close, Command, Done, Free, Leave, Route, Sleep
from .failures import typed_error
from .history import History, explain
from .known import Known
from .secret import hide_key, redact

if TYPE_CHECKING:
    from .plan import Plan, Target

__all__ = [
    "CANCEL_TIMEOUT",
    "Backoff",
    "Closing",
    "Context",
    "HealthWait",
    "Header",
    "Next",
    "Phase",
    "Routing",
    "TurnError",
    "stream_path",
]

CANCEL_TIMEOUT = 2.0  # seconds for the DELETE that cancels an abandoned generation
_LOAD_DELAY = (0.05, 2.0)  # the /health polls of a loading wait: first delay, cap (doubling)

Headers = tuple[tuple[str, str], ...]
Header = Callable[[str], "str | None"]
"""A response's headers: ``header("content-type")`` (any case), None when absent."""
Next = Callable[[], "Phase"]
Stages = Callable[["Context"], "Phase"]


class TurnError(RuntimeError):
    """The driver fed an input the current command does not expect (a driver bug)."""


class Context:
    """The facts of one turn. Each has one owner: the phase that changes it is named.

    ``asm`` (the assembler: the partial), ``offset`` (body bytes received, where a resume
    picks up) and ``budget`` belong to streaming; ``generating`` (a generation may be
    running on the server: the cleanup cancels it) to opening and resuming; ``open``
    (the driver holds a response) to whoever sent or released it; ``joined`` to the slot
    line; ``loading`` (the backoff of the loading wait, kept across waits) and ``armed``
    (the timers started) to the waits. ``affinity`` (the headers a load balancer keeps the
    turn's requests together by) follows the server.
    """

    __slots__ = (
        "admitted",
        "affinity",
        "armed",
        "asm",
        "body",
        "budget",
        "config",
        "events",
        "generating",
        "joined",
        "known",
        "limited",
        "load_delay",
        "load_refused",
        "model",
        "offset",
        "open",
        "optimistic",
        "plan",
        "proxied",
        "request",
        "resumes",
        "server",
        "stages",
        "waited",
    )

    def __init__(self, plan: Plan, target: Target, stages: Stages) -> None:
        self.plan = plan
        self.stages = stages  # the machine's way through a turn, from its first stage
        self.config: Config = target.config
        self.known: Known = target.known
        self.body = target.body
        self.server = target.server  # a pool's turn: the index of the chosen server
        self.request = target.request or plan.request  # as it goes to this server
        self.model: str = self.request.model or self.config.model
        self.affinity = affinity(self.config, self.request, plan.conversation_id)
        self.limited = target.limited  # its client has a shared concurrency limit
        self.admitted = False  # the turn waits for, or holds, a place under it (admission)
        self.asm = Assembler(self.request.top_logprobs)
        self.budget = plan.budget(self.config, self.known.proxy is not None)
        self.offset = plan.offset
        self.events: list[ChatEvent] = []
        self.generating = False
        self.open = False
        # A router's model that was ready: the chat goes first, with ?autoload=false, and
        # only a refusal sends the turn to the look (before.py's ``models``).
        self.optimistic = False
        self.joined: int | None = None
        self.waited = False  # Waiting(slot_busy=False) was shown
        self.load_delay = _LOAD_DELAY[0]
        self.load_refused = 0
        self.armed: set[str] = set()
        self.resumes = 0  # reconnects tried so far (a turn has max(max_retries, 1))
        self.proxied: Proxied | None = None  # this turn found the client behind a proxy

    def aim(self, target: Target) -> None:
        """A pool chose the server: the turn goes on with its config, facts and body."""
        self.config = target.config
        self.known = target.known
        self.body = target.body
        self.server = target.server
        self.request = target.request or self.plan.request
        self.model = self.request.model or self.config.model
        self.affinity = affinity(self.config, self.request, self.plan.conversation_id)
        self.limited = self.limited or target.limited
        self.budget = self.plan.budget(self.config, self.known.proxy is not None)

    # -- what the phases use ---------------------------------------------------------------
    @property
    def capped(self) -> bool:
        budget = self.budget
        return budget is not None and budget.capped

    def emit(self, event: ChatEvent) -> None:
        self.events.append(event)

    def path(self, path: str) -> str:
        """``path`` naming the turn's model for a router (``?model=``)."""
        return model_query(path, self.model)

    def redacted(self, text: str) -> str:
        return redact(text, self.config.api_key)

    def partial(self) -> Completion | None:
        return self.asm.partial(self.capped)

    def fail(self, error: InferError) -> Phase:
        """End the turn with ``error``; it carries the partial (what the events showed)
        and never the API key."""
        if error.partial is None:
            error.partial = self.partial()
        hide_key(error, self.config.api_key)
        if self.server is not None and isinstance(error, ConnectError) and not self.generating:
            return Routing(self, self.server)  # a pool's server could not be reached: another
        return Closing(self, None, error)

    def finish(self, completion: Completion) -> Phase:
        history, session = self.plan.history, self.request.session
        if history is not None and session and completion.cache is not None:
            completion = self._explained(history, session, completion)
        return Closing(self, completion, None)

    def _explained(self, history: History, session: str, completion: Completion) -> Completion:
        """``completion`` with its cache report against the session's previous turn (the
        assembler's knows no previous turn); the history learns this one."""
        report, server = completion.cache, self.config.base_url
        assert report is not None
        past = history.previous(session)
        if past is not None:
            report = explain(past, self.request, server, report.prompt, report.reused)
            completion = msgspec.structs.replace(completion, cache=report)
        history.remember(session, self.request, completion, server)
        return completion

    def backoff(self, attempt: int, retry_after: float | None = None) -> float:
        config = self.config
        base, cap = config.retry_backoff, config.retry_max_backoff
        return backoff_seconds(attempt, base, cap, retry_after, self.plan.jitter)


def affinity(config: Config, request: ChatRequest, conversation: str | None) -> Headers:
    """The turn's affinity header (``Config.session_header``): its session, else its
    conversation id; none without either, or without a header name."""
    name = config.session_header
    key = request.session or conversation
    if name is None or not key:
        return ()
    return ((name, session_value(key)),)


class Phase:
    """One state of the turn: ``command`` for the driver, one handler per input. A handler a
    phase does not expect is a driver bug (``TurnError``)."""

    __slots__ = ("command", "ctx")

    name = "phase"
    after: Phase | None = None  # streaming: the phase a read ended it with

    def __init__(self, ctx: Context, command: Command) -> None:
        self.ctx = ctx
        self.command = command

    def opened(self, status: int, header: Header) -> Phase:
        self._unexpected("opened")

    def body(self, data: bytes, truncated: bool) -> Phase:
        self._unexpected("body")

    def answered(self, status: int, data: bytes) -> Phase:
        self._unexpected("answered")

    def failed(self, kind: str, message: str) -> Phase:
        self._unexpected("failed")

    def woke(self) -> Phase:
        self._unexpected("woke")

    def fired(self, timer: str) -> Phase:
        self._unexpected("fired")

    def line(self, ahead: int, released_ago: float | None) -> Phase:
        self._unexpected("line")

    def performed(self) -> Phase:
        self._unexpected("performed")

    def routed(self, target: Target, event: Routed) -> Phase:
        self._unexpected("routed")

    def admitted(self, ahead: int) -> Phase:
        self._unexpected("admitted")

    def data(self, chunk: bytes) -> list[ChatEvent]:
        self._unexpected("data")

    def _unexpected(self, name: str) -> NoReturn:
        raise TurnError(f"{name}() while the turn is {self.name} ({self.command!r})")


class Backoff(Phase):
    """A retry after a failure before any output: ``Retrying`` now, then ``then`` after the
    backoff."""

    __slots__ = ("_then",)
    name = "backing off"

    def __init__(
        self, ctx: Context, attempt: int, error: str, then: Next, retry_after: float | None = None
    ) -> None:
        delay = ctx.backoff(attempt, retry_after)
        super().__init__(ctx, Sleep(delay))
        ctx.emit(Retrying(attempt, int(delay * 1000), ctx.redacted(error)))
        self._then = then

    def woke(self) -> Phase:
        return self._then()


class HealthWait(Phase):
    """503 ``Loading model``: ``Waiting(slot_busy=False)`` once per turn, then ``/health`` is
    polled with backoff until it answers 200 (then ``then``), bounded by ``load_timeout``.
    A server that refuses connections meanwhile has died: past ``max_retries`` refusals in
    a row, ``ConnectError``."""

    __slots__ = ("_then",)
    name = "waiting for the model to load"

    def __init__(self, ctx: Context, then: Next) -> None:
        if not ctx.waited:
            ctx.waited = True
            ctx.emit(Waiting(slot_busy=False))
        command: Command = Sleep(ctx.load_delay, "load")
        if "load" not in ctx.armed:
            ctx.armed.add("load")
            command = Arm("load", ctx.config.load_timeout)
        super().__init__(ctx, command)
        self._then = then

    def performed(self) -> Phase:  # the timer is armed: the first sleep
        self.command = Sleep(self.ctx.load_delay, "load")
        return self

    def woke(self) -> Phase:
        ctx = self.ctx
        ctx.load_delay = min(ctx.load_delay * 2, _LOAD_DELAY[1])
        limit = ctx.config.max_body_bytes
        self.command = Call(
            "GET", ctx.path("/health"), headers=ctx.affinity, bound="load", limit=limit
        )
        return self

    def answered(self, status: int, data: bytes) -> Phase:
        self.ctx.load_refused = 0
        return self._then() if status == 200 else self._sleep()

    def failed(self, kind: str, message: str) -> Phase:
        ctx = self.ctx
        if kind == "timeout":  # a slow /health is no answer yet
            return self._sleep()
        ctx.load_refused += 1
        if ctx.load_refused > ctx.config.max_retries:
            return ctx.fail(typed_error(kind, message, "health"))
        return self._sleep()

    def fired(self, timer: str) -> Phase:
        limit = self.ctx.config.load_timeout
        return self.ctx.fail(LoadTimeoutError(f"the model was still loading after {limit} s"))

    def _sleep(self) -> Phase:
        self.command = Sleep(self.ctx.load_delay, "load")
        return self


class Closing(Phase):
    """Release everything the turn held, whatever happened: the response, the server's
    generation (``DELETE /v1/stream`` when it may still run: with resume on, closing the
    connection no longer stops it), the slot line. Then ``Done``."""

    __slots__ = ("_left", "completion", "error")
    name = "closing"

    def __init__(self, ctx: Context, completion: Completion | None, error: InferError | None):
        self.completion = completion
        self.error = error
        steps: list[Command] = []
        if ctx.open:
            ctx.open = False
            steps.append(Close())
        conversation = ctx.plan.conversation_id
        if conversation and ctx.generating and completion is None and ctx.known.resume is not False:
            path = stream_path(conversation)
            steps.append(Call("DELETE", path, headers=ctx.affinity, quiet=CANCEL_TIMEOUT))
        if ctx.joined is not None:
            steps.append(Leave(ctx.joined))
            ctx.joined = None
        if ctx.admitted:
            ctx.admitted = False
            steps.append(Free())
        steps.append(Done(completion, error))
        self._left: Sequence[Command] = steps[1:]
        super().__init__(ctx, steps[0])

    def performed(self) -> Phase:
        return self._step()

    def answered(self, status: int, data: bytes) -> Phase:
        if status in (404, 405, 501):  # llama-server always answers 204: no such route here
            self.ctx.known.resume = False
        return self._step()

    def failed(self, kind: str, message: str) -> Phase:
        return self._step()  # best effort, inside the cleanup

    def _step(self) -> Phase:
        if not self._left:
            self._unexpected("an input after Done")
        self.command, *rest = self._left
        self._left = rest
        return self


class Routing(Phase):
    """A pool's turn chooses its server (again, after ``failed`` could not be reached: what
    it held there is released first): ``Routed`` is shown, and the turn starts over there."""

    __slots__ = ("_left",)
    name = "routing"

    def __init__(self, ctx: Context, failed: int | None = None) -> None:
        steps: list[Command] = []
        if ctx.open:
            ctx.open = False
            steps.append(Close())
        if ctx.joined is not None:
            steps.append(Leave(ctx.joined))
            ctx.joined = None
        steps.append(Route(failed))
        self._left = steps[1:]
        super().__init__(ctx, steps[0])

    def performed(self) -> Phase:  # released: the next step
        self.command, *self._left = self._left
        return self

    def routed(self, target: Target, event: Routed) -> Phase:
        ctx = self.ctx
        ctx.aim(target)
        ctx.emit(event)
        return ctx.stages(ctx)

    def failed(self, kind: str, message: str) -> Phase:
        return Closing(self.ctx, None, typed_error(kind, message, "route"))  # none left


def stream_path(conversation_id: str) -> str:
    return f"/v1/stream?conv_id={quote(conversation_id)}"
