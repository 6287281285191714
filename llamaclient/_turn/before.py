"""The stages before the chat is sent: the inputs the server can take (``/props``), a
router's model made ready (``/models``), and the pinned slot's line and busy check
(``/slots``). Each stage ends by calling ``then`` (the next stage), or fails the turn.

Every request made for a chat gets the chat's own policies: a refused connection or a
retryable status is retried with backoff (``Retrying``), a loading server is waited out
(``Waiting``), the whole wait for a model bounded by ``load_timeout``.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from .._protocol.info import props_from
from .._protocol.models import decode_models, router_error
from .._protocol.retry import RETRYABLE_STATUS
from .._protocol.status import is_loading, status_error
from .._protocol.wire import ANY_DECODER
from .._types.errors import (
    BusyError,
    InferError,
    LoadTimeoutError,
    ModelLoadError,
    UnsupportedInputError,
)
from .._types.events import ModelLoading, Queued, Waiting
from .._types.models import ModelInfo
from .commands import Arm, Call, Line, Sleep
from .failures import typed_error
from .phase import Backoff, Context, HealthWait, Next, Phase

__all__ = [
    "POLL",
    "RELEASE_GRACE",
    "Verdict",
    "find",
    "look",
    "media",
    "models",
    "slot_line",
    "watch_step",
]

POLL = 0.1  # seconds between looks at a loading model (the router itself polls every 0.2 s)
# llama-server frees a slot about one token step after our own request on it ended (~1 s
# after a cut connection): within this window a busy slot may still be ours.
RELEASE_GRACE = 1.5
_SLOT_POLL = 0.05
_NAMES = {"vision": "image", "audio": "audio", "video": "video"}


def _call(ctx: Context, method: str, path: str, **fields: Any) -> Call:
    """A call of the turn's (with its affinity), or of its client's (``shared=True``)."""
    headers = () if fields.get("shared") else ctx.affinity
    return Call(method, path, headers=headers, limit=ctx.config.max_body_bytes, **fields)


# -- the inputs the server can take -------------------------------------------------------
def media(ctx: Context, then: Next) -> Phase:
    """``UnsupportedInputError`` when the request holds images or audio the server cannot
    take, or asks for a ``reasoning_effort`` its chat template cannot render: its
    ``/props`` (asked once per client) say so before the request is sent."""
    if not ctx.plan.media and ctx.request.reasoning_effort is None:
        return then()
    if ctx.known.media_known:
        return _judge(ctx, then)
    return _Props(ctx, then)


def _judge(ctx: Context, then: Next) -> Phase:
    effort = ctx.request.reasoning_effort
    if effort is not None and ctx.known.reasoning_effort is False:
        return ctx.fail(
            UnsupportedInputError(
                "reasoning_effort",
                f"reasoning_effort {effort!r} is not supported by this server's chat template "
                "(its /props chat_template_caps say supports_reasoning_effort is false)",
            )
        )
    modalities = ctx.known.modalities
    if modalities is not None:
        for kind in sorted(ctx.plan.media):
            if not getattr(modalities, kind, True):
                return ctx.fail(
                    UnsupportedInputError(
                        kind,
                        f"{_NAMES[kind]} input is not supported by this server: its /props "
                        f"modalities say {kind} is false (start llama-server with a --mmproj "
                        "projector that takes it)",
                    )
                )
    return then()


class _Asking(Phase):
    """A look a chat needs first (``GET /props``, ``GET /models``), shared by the client's
    turns that overlap, with the chat's own policies: a refused connection or a retryable
    status is retried with backoff, a loading server is waited out; a look that still fails
    fails the turn as the chat would have."""

    __slots__ = ("_attempt", "_then")
    path = ""
    of_the_model = False  # asked of the turn's model, on a router (?model=)

    def __init__(self, ctx: Context, then: Next, attempt: int = 0) -> None:
        path = ctx.path(self.path) if self.of_the_model else self.path
        super().__init__(ctx, _call(ctx, "GET", path, shared=True))
        self._then = then
        self._attempt = attempt

    def _policy(self, status: int, data: bytes) -> Phase | None:
        """The wait or the retry an answer calls for (None: it is the answer)."""
        ctx, then, attempt = self.ctx, self._then, self._attempt
        if is_loading(status, data):
            return HealthWait(ctx, lambda: type(self)(ctx, then, attempt))
        if status in RETRYABLE_STATUS and attempt < ctx.config.max_retries:
            return self._retry(f"HTTP {status}")
        return None

    def failed(self, kind: str, message: str) -> Phase:
        ctx, what = self.ctx, f"GET {self.path}"
        if kind == "connect" and self._attempt < ctx.config.max_retries:
            return self._retry(f"{what}: {message}")
        timeout = ctx.config.wait_timeout
        return ctx.fail(typed_error(kind, message, "call", timeout=timeout, what=what))

    def _retry(self, error: str) -> Phase:
        ctx, then, attempt = self.ctx, self._then, self._attempt + 1
        return Backoff(ctx, attempt, error, lambda: type(self)(ctx, then, attempt))


class _Props(_Asking):
    """``GET /props`` for the modalities. A server that answers without them (or without
    ``/props``: another server) is not judged, and not asked again: the request goes, and
    its own refusal is mapped."""

    __slots__ = ()
    name = "asking the server's inputs"
    path = "/props"
    of_the_model = True

    def answered(self, status: int, data: bytes) -> Phase:
        waiting = self._policy(status, data)
        if waiting is not None:
            return waiting
        known = self.ctx.known
        known.modalities = None
        if status < 400:
            try:
                props = props_from(ANY_DECODER.decode(data))
            except (msgspec.DecodeError, RecursionError, InferError):
                props = None
            if props is not None and "modalities" in props.raw:
                known.modalities = props.modalities
            if props is not None:
                known.reasoning_effort = props.chat_template_caps.supports_reasoning_effort
        known.media_known = status < 500  # a server error: ask again next turn
        return _judge(self.ctx, self._then)

    def failed(self, kind: str, message: str) -> Phase:
        """A refused connection is retried (then the turn fails, as the chat would); any
        other failure leaves the request unjudged this time: it goes, and its own refusal
        is mapped."""
        if kind == "connect":
            return super().failed(kind, message)
        return self._then()


# -- a router's model ---------------------------------------------------------------------
def models(ctx: Context, then: Next) -> Phase:
    """Before a chat for a router's model: nothing on a plain server or a ready model; else
    load it (unless ``autoload`` is off: the router answers for itself) and show
    ``ModelLoading`` as its status changes, until it is ready.

    Once the client knows the server is a router, the look is not made before every chat:
    the chat goes first with ``?autoload=false`` (``optimistic``), which a router proxies at
    once to a model that is running, and refuses (400 ``model is not loaded``, or the
    loading child's 503) for one that is not. Only then does the turn look (``look``), load
    and watch, with the same ``ModelLoading`` events, and send the chat again: nothing was
    generated. So a turn on a ready model costs no ``GET /models``."""
    if not ctx.model or ctx.known.router is False:
        return then()
    if ctx.known.router:  # with autoload off, the chat's own answer is the answer
        ctx.optimistic = ctx.request.autoload
        return then()
    return _Look(ctx, then)


def look(ctx: Context, then: Next) -> Phase:
    """The router refused an optimistic chat: look at its models (then load, watch), then
    ``then``."""
    ctx.optimistic = False
    return _Look(ctx, then)


def find(data: bytes, name: str) -> tuple[ModelInfo | None, bool]:
    """The model called ``name`` (or with that alias) in a ``GET /models`` answer, and
    whether a router sent it. Raises ``msgspec`` errors on other bytes."""
    infos, router = decode_models(data)
    for info in infos:
        if name == info.id or name in info.aliases:
            return info, router
    return None, router


class _Look(_Asking):
    """``GET /models``; whether the server is a router is learnt from the same answer."""

    __slots__ = ()
    name = "looking at the router's models"
    path = "/models"

    def answered(self, status: int, data: bytes) -> Phase:
        waiting = self._policy(status, data)
        if waiting is not None:
            return waiting
        ctx = self.ctx
        try:
            info, router = find(data, ctx.model) if status < 400 else (None, False)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            info, router = None, False
        ctx.known.router = router  # no /models here: a plain server, or an old one
        if not router or info is None or info.ready or not ctx.request.autoload:
            return self._then()  # an unknown model: the chat's own answer names it
        ctx.emit(ModelLoading(ctx.model, info.status))
        if info.status in ("loading", "downloading"):
            return _Watch(ctx, self._then, info.status)
        return _Load(ctx, self._then, info.status)


class _Load(Phase):
    """``POST /models/load``; a model already running is watched all the same."""

    __slots__ = ("_looked", "_then")
    name = "loading the model"

    def __init__(self, ctx: Context, then: Next, looked: str) -> None:
        body = msgspec.json.encode({"model": ctx.model})
        super().__init__(ctx, _call(ctx, "POST", "/models/load", body=body))
        self._then = then
        self._looked = looked  # the status the look showed

    def answered(self, status: int, data: bytes) -> Phase:
        ctx = self.ctx
        if status < 300:
            ctx.emit(ModelLoading(ctx.model, "loading"))  # the router marks it loading first
            return _Watch(ctx, self._then, "loading")
        if status == 400 and b"already running" in data:
            return _Watch(ctx, self._then, self._looked)
        return ctx.fail(router_error(status_error(status, data), ctx.model, model_route=True))

    def failed(self, kind: str, message: str) -> Phase:
        ctx = self.ctx
        timeout = ctx.config.wait_timeout
        what = "POST /models/load"
        return ctx.fail(typed_error(kind, message, "call", timeout=timeout, what=what))


Verdict = Literal["ready", "wait", "gone", "failed"]


def watch_step(last: str | None, info: ModelInfo | None) -> tuple[str | None, Verdict]:
    """One look at a loading model: the new status to show (None: unchanged), and whether
    it is ``ready``, still loading (``wait``), ``gone`` from the list, or ``failed`` (back
    at ``unloaded``: its load failed)."""
    if info is None:
        return None, "gone"
    shown = info.status if info.status != last else None
    if info.ready:
        return shown, "ready"
    return shown, "failed" if info.status == "unloaded" else "wait"


class _Watch(Phase):
    """A look at ``/models`` every ``POLL`` s until the model is ready, each new status shown
    as ``ModelLoading``; bounded by ``load_timeout``."""

    __slots__ = ("_last", "_then")
    name = "watching the model load"

    def __init__(self, ctx: Context, then: Next, last: str | None) -> None:
        super().__init__(ctx, Arm("load", ctx.config.load_timeout))
        ctx.armed.add("load")
        self._then = then
        self._last = last

    def performed(self) -> Phase:  # armed: the first look
        self.command = _call(self.ctx, "GET", "/models", bound="load")
        return self

    def answered(self, status: int, data: bytes) -> Phase:
        ctx = self.ctx
        if status >= 400:
            return ctx.fail(status_error(status, data))
        try:
            info, _ = find(data, ctx.model)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            info = None
        shown, verdict = watch_step(self._last, info)
        if shown is not None:
            self._last = shown
            ctx.emit(ModelLoading(ctx.model, shown))
        if verdict == "ready":
            return self._then()
        if verdict != "wait":
            return ctx.fail(ModelLoadError(ctx.model, info.exit_code if info else None))
        self.command = Sleep(POLL, "load")
        return self

    def woke(self) -> Phase:
        return self.performed()

    def failed(self, kind: str, message: str) -> Phase:
        ctx = self.ctx
        timeout = ctx.config.wait_timeout
        return ctx.fail(typed_error(kind, message, "call", timeout=timeout, what="GET /models"))

    def fired(self, timer: str) -> Phase:
        limit = self.ctx.config.load_timeout
        why = f"model {self.ctx.model!r} was still loading after {limit} s"
        return self.ctx.fail(LoadTimeoutError(why))


# -- the pinned slot ----------------------------------------------------------------------
def slot_line(ctx: Context, then: Next) -> Phase:
    """A pinned request waits its turn in this client's line for the slot (``Queued``),
    then looks whether another client holds the slot (``Waiting``, or ``BusyError`` with
    ``wait=False``)."""
    slot = ctx.request.slot
    if slot is None:
        return then()
    return _Line(ctx, slot, then)


class _Line(Phase):
    __slots__ = ("_shown", "_slot", "_then")
    name = "waiting in the slot's line"

    def __init__(self, ctx: Context, slot: int, then: Next) -> None:
        super().__init__(ctx, Line(slot, -1))
        ctx.joined = slot
        self._slot = slot
        self._then = then
        self._shown = -1

    def line(self, ahead: int, released_ago: float | None) -> Phase:
        if ahead == 0:
            return _SlotCheck(self.ctx, self._slot, released_ago, self._then)
        if ahead != self._shown:
            self._shown = ahead
            self.ctx.emit(Queued(ahead))
        self.command = Line(self._slot, ahead)
        return self


class _SlotCheck(Phase):
    """``GET /slots``: is the pinned slot processing? A busy slot is reported and the
    request goes anyway (llama-server defers it); with ``wait=False`` it is a
    ``BusyError``, unless the slot is still finishing our own last request on it."""

    __slots__ = ("_since", "_slot", "_then")
    name = "looking at the slot"

    def __init__(self, ctx: Context, slot: int, released_ago: float | None, then: Next):
        super().__init__(ctx, self._look(ctx))
        self._slot = slot
        self._since = released_ago  # seconds since our own last request on it ended
        self._then = then

    @staticmethod
    def _look(ctx: Context) -> Call:
        return _call(ctx, "GET", ctx.path("/slots"))

    def answered(self, status: int, data: bytes) -> Phase:
        ctx = self.ctx
        if not _busy(status, data, self._slot):
            return self._then()
        if ctx.request.wait:
            ctx.emit(Waiting(slot_busy=True))
            return self._then()
        since = self._since
        if since is None or since >= RELEASE_GRACE:
            return ctx.fail(BusyError(f"slot {self._slot} is busy"))
        self._since = since + _SLOT_POLL
        self.command = Sleep(_SLOT_POLL)
        return self

    def woke(self) -> Phase:
        self.command = self._look(self.ctx)
        return self

    def failed(self, kind: str, message: str) -> Phase:
        return self._then()  # /slots disabled, unreachable or slow: let the server queue us


def _busy(status: int, data: bytes, slot: int) -> bool:
    """Whether ``GET /slots`` says the slot is processing; False when it cannot tell."""
    if status >= 400:
        return False
    try:
        slots = ANY_DECODER.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return False
    if not isinstance(slots, list) or not slots:
        return False
    entry = slots[slot % len(slots)]  # llama-server wraps id_slot the same way
    return isinstance(entry, dict) and bool(entry.get("is_processing"))
