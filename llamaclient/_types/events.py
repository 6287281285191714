"""The events a chat stream yields, in the order they happen.

``ChatEvent`` is their union; ``match`` on the classes::

    match event:
        case Content(text):        ...  # answer text, append it
        case Reasoning(text):      ...  # thinking text
        case ToolCallDelta():      ...  # a raw piece of a tool call (id/name on the first piece)
        case ToolCallDone(i, call):...  # tool call i is complete: run it now
        case ArgumentDelta():      ...  # decoded text of one argument field, as it streams
        case OutputDelta(path, text, done): ...  # typed output (chat(..., output=T)), live
        case Progress(total, cache, processed): ...  # prompt processing
        case CacheMiss(expected, reused, reason, detail): ...  # the prompt cache fell short
        case Queued(ahead):        ...  # waiting behind `ahead` requests of this client
        case Waiting(slot_busy):   ...  # model loading (False) or pinned slot busy (True)
        case Retrying(attempt, after_ms, error): ...  # a safe retry, before any output
        case ThinkingCapped(tokens): ...  # the thinking budget ended the reasoning
        case Resuming(attempt, offset, error): ...  # reconnecting after a cut: nothing lost
        case ModelLoading(model, status): ...  # a router is loading the model
        case Routed(server, slot, reason): ...  # a Pool chose this server (first event)
        case Proxied(proxy, lost): ...  # a proxy is in the way: what it loses (once per client)

Events are frozen: never filled in later.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from .cache import CacheReason
from .logprobs import Confidence, Tokens
from .messages import ToolCall

__all__ = [
    "ArgumentDelta",
    "CacheMiss",
    "ChatEvent",
    "Content",
    "ModelLoading",
    "OutputDelta",
    "Progress",
    "Proxied",
    "Queued",
    "Reasoning",
    "Resuming",
    "Retrying",
    "Routed",
    "RoutedReason",
    "ThinkingCapped",
    "ToolCallDelta",
    "ToolCallDone",
    "Waiting",
]


class Queued(msgspec.Struct, frozen=True, gc=False):
    """This client holds ``ahead`` earlier requests for the same slot; we wait our turn."""

    ahead: int


class Waiting(msgspec.Struct, frozen=True, gc=False):
    """The server cannot start us yet: the pinned slot is busy (``slot_busy=True``, another
    client uses it) or the model is loading (``slot_busy=False``)."""

    slot_busy: bool


class Progress(msgspec.Struct, frozen=True, gc=False):
    """Prompt processing: ``processed`` of ``total`` prompt tokens are in the slot, ``cache``
    of them reused from the prompt cache. ``processed == total`` means generation starts."""

    total: int
    cache: int
    processed: int
    time_ms: float | None = None


class CacheMiss(msgspec.Struct, frozen=True, gc=False):
    """Right after the first ``Progress``: the prompt cache reused ``reused`` tokens where
    exact echo of this session's previous turn reuses ``expected`` (its whole prompt), more
    than a sliding-window model's 5 tokens short. ``reason`` says why (see
    :data:`~llamaclient.CacheReason`), ``detail`` in words: the first message and field
    that differ from the previous turn's, say. Only for a request with a ``session``."""

    expected: int
    reused: int
    reason: CacheReason
    detail: str


class Reasoning(msgspec.Struct, frozen=True, gc=False, repr_omit_defaults=True):
    """A piece of the model's thinking (``reasoning_content``); ``logprobs``: the tokens
    that wrote it, with ``top_logprobs`` asked for."""

    text: str
    logprobs: Tokens | None = None


class Content(msgspec.Struct, frozen=True, gc=False, repr_omit_defaults=True):
    """A piece of the answer text; ``logprobs``: the tokens that wrote it, with
    ``top_logprobs`` asked for."""

    text: str
    logprobs: Tokens | None = None


class ToolCallDelta(msgspec.Struct, frozen=True, gc=False, repr_omit_defaults=True):
    """A raw piece of tool call ``index``: ``id``/``name`` as that piece carried them (None on
    later pieces) and that piece's ``arguments`` text (``""`` if none); ``logprobs``: the
    tokens that wrote it, with ``top_logprobs`` asked for."""

    index: int
    id: str | None
    name: str | None
    arguments: str
    logprobs: Tokens | None = None


class ToolCallDone(msgspec.Struct, frozen=True):
    """Tool call ``index`` is complete and final: the server has moved on to the next call, or
    the finish reason arrived. An agent can start running it while the model writes the next."""

    index: int
    call: ToolCall


class ArgumentDelta(msgspec.Struct, frozen=True, gc=False, repr_omit_defaults=True):
    """Decoded text of the string field ``field`` of tool call ``index`` (tool ``name``) as it
    streams: escapes resolved. ``done`` marks the field's last piece (``text`` may be "").

    For a string inside the field (an object or array value), ``path`` says where: the field's
    name, then object keys and array indices (``("edits", 0, "text")``); it is ``()`` for the
    field's own string value.

    With ``top_logprobs`` asked for, ``logprobs`` are the tokens of the tool-call piece that
    wrote this text, and the last piece (``done``) has the string's ``confidence``: the
    tokens of every piece that wrote part of it, its quotes included."""

    index: int
    name: str
    field: str
    text: str
    done: bool = False
    path: tuple[str | int, ...] = ()
    logprobs: Tokens | None = None
    confidence: Confidence | None = None


class OutputDelta(msgspec.Struct, frozen=True, gc=False, repr_omit_defaults=True):
    """Typed output (``client.chat(request, output=T)``) as it streams: decoded ``text`` of
    the string value at ``path`` (object keys and array indices from the root), escapes
    resolved. ``done`` marks the value's last piece (``text`` may then be ""). A number,
    boolean or null arrives whole, as its JSON text, with ``done=True``.

    With ``top_logprobs`` asked for, ``logprobs`` are the tokens of the answer piece that
    wrote this text, and a value's last piece (``done``) has its ``confidence``: the tokens
    of every piece that wrote part of it, a string's quotes included (a number, boolean or
    null inside an object or array of the output has none)."""

    path: tuple[str | int, ...]
    text: str
    done: bool = False
    logprobs: Tokens | None = None
    confidence: Confidence | None = None


class ThinkingCapped(msgspec.Struct, frozen=True, gc=False):
    """The thinking budget ran out after ``tokens`` reasoning tokens, and the reasoning was
    ended: the server accepted the client's call, or its own budget (the body's
    ``reasoning_budget_tokens``) ended it. The answer follows."""

    tokens: int


class Retrying(msgspec.Struct, frozen=True, gc=False):
    """Attempt ``attempt`` failed before any output (``error``); retrying in ``after_ms``."""

    attempt: int
    after_ms: int
    error: str


class Resuming(msgspec.Struct, frozen=True, gc=False):
    """The connection broke mid-stream (``error``); reconnect ``attempt`` picks the stream up
    at body byte ``offset``. Nothing is lost or repeated: the events go on where they were."""

    attempt: int
    offset: int
    error: str


class ModelLoading(msgspec.Struct, frozen=True, gc=False):
    """A router is getting ``model`` ready; ``status`` is its new state (``unloaded``,
    ``downloading``, ``loading``, ...). Yielded each time the status changes."""

    model: str
    status: str


RoutedReason = Literal["new session", "sticky", "failover", "slot busy"]


class Routed(msgspec.Struct, frozen=True, gc=False):
    """The first event of every stream of a ``Pool``: it went to ``server`` (a base URL),
    pinned to ``slot`` (None: the server picks). ``reason``: ``"new session"`` (a session's
    first request, or no session: the server with the most free slots), ``"sticky"`` (the
    session's server and slot), ``"failover"`` (the session's server is down: it moved, and
    its prompt cache was lost) or ``"slot busy"`` (the session's slot was busy while another
    server had a free one: it moved, and its prompt cache was lost). ``cache_lost`` says
    whether the server has this session's earlier turns in its cache."""

    server: str
    slot: int | None
    reason: RoutedReason

    @property
    def cache_lost(self) -> bool:
        return self.reason in ("failover", "slot busy")


class Proxied(msgspec.Struct, frozen=True, gc=False):
    """The server is reached through ``proxy`` (its name and version, as its answer said:
    ``"LiteLLM 1.108.7"``), which passes the chat on but not llama-server's own routes or
    headers. ``lost`` names what this client cannot do through it: ``"resume"`` (a broken
    stream ends the turn at once, with its partial), ``"slots"`` (``slots()``, ``props()``,
    ``metrics()``, a ``Pool``'s looks) and ``"token counts"`` (``count_tokens()``,
    ``tokenize()``, the pre-flight). The thinking budget is kept: the server applies it
    from the body. Yielded once per client, in the first stream whose answer shows the
    proxy, before any output; logged once as a WARNING on ``llamaclient.turn``."""

    proxy: str
    lost: tuple[str, ...]


ChatEvent = (
    Queued
    | Waiting
    | Progress
    | CacheMiss
    | Reasoning
    | Content
    | ToolCallDelta
    | ToolCallDone
    | ArgumentDelta
    | OutputDelta
    | ThinkingCapped
    | Retrying
    | Resuming
    | ModelLoading
    | Routed
    | Proxied
)
