"""Logging: what a turn did, on the standard ``logging`` logger ``llamaclient``.

- ``llamaclient.http`` (DEBUG): each request a turn made and how it came out (method, path,
  status, or the kind of transport failure).
- ``llamaclient.turn`` (DEBUG): each decision the turn showed as an event (a retry, a
  resume, a wait, the slot line or the shared limit, a model loading, a pool's route, the
  thinking budget), and each turn the stream gives the loop for fairness.
- ``llamaclient.turn`` (INFO): one line per finished turn: the model, the tokens in (and
  cached) and out, the times (queued, first token, prefill, decode), retries and resumes,
  why the prompt cache missed, and the outcome.
- ``llamaclient.turn`` (WARNING): every error that escapes to the caller, and a proxy
  found between the client and the server (``Proxied``: once per client).

Never the API key (no header is logged, and errors are logged as the caller sees them, the
key already hidden), and never the prompt or the answer. A turn asks the loggers' levels
once, when it is made: with the default configuration (WARNING) nothing watches it, and
only an error that escapes is logged (by the stream, ``escaped``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from .._turn.commands import Admit, Call, Command, Line, Send
from .._turn.machine import ChatTurn
from .._turn.plan import Plan, Target
from .._types.completion import Completion
from .._types.events import (
    CacheMiss,
    ChatEvent,
    Content,
    ModelLoading,
    Proxied,
    Queued,
    Reasoning,
    Resuming,
    Retrying,
    Routed,
    ThinkingCapped,
    ToolCallDelta,
    Waiting,
)
from .observe import Observer, Outcome

__all__ = ["HTTP", "LOG", "TURN", "TurnLog", "escaped", "fairness", "log_turns", "proxied"]

LOG = logging.getLogger("llamaclient")
LOG.addHandler(logging.NullHandler())  # a library: the application decides where logs go
HTTP = logging.getLogger("llamaclient.http")
TURN = logging.getLogger("llamaclient.turn")

_DEBUG, _INFO = logging.DEBUG, logging.INFO
_OUTPUT = (Content, Reasoning, ToolCallDelta)


def log_turns(plan: Plan, target: Target) -> Observer | None:
    """The logging instrument of every client: a turn's :class:`TurnLog`, or None when
    neither INFO on ``llamaclient.turn`` nor DEBUG on ``llamaclient.http`` is on."""
    if not (TURN.isEnabledFor(_INFO) or HTTP.isEnabledFor(_DEBUG)):
        return None
    model = plan.request.model or target.config.model
    return TurnLog(model)


def escaped(error: BaseException, model: str) -> None:
    """``error`` ends a turn of ``model`` and goes to the caller (the key already hidden)."""
    TURN.warning("chat %s failed: %s: %s", model or "-", type(error).__name__, error)


def proxied(event: Proxied) -> None:
    """A client found its server behind a proxy (once per client)."""
    TURN.warning("through %s, which passes on no %s", event.proxy, ", ".join(event.lost))


def fairness(events: int) -> None:
    """The stream gave the loop's other tasks a turn after ``events`` buffered events."""
    if TURN.isEnabledFor(_DEBUG):
        TURN.debug("gave the loop a turn after %d events taken without a wait", events)


class TurnLog(Observer):
    """Logs one turn (see the module's text)."""

    __slots__ = ("_first", "_http", "_info", "_queued", "_start", "model")

    def __init__(self, model: str) -> None:
        self.model = model
        self._http = HTTP.isEnabledFor(_DEBUG)
        self._info = TURN.isEnabledFor(_INFO)
        self.watches_events = self._info
        self._start = 0.0
        self._first: float | None = None  # when the first output came
        self._queued = 0.0  # seconds waiting for the slot line or the shared limit

    def started(self, turn: ChatTurn) -> None:
        self._start = time.monotonic()

    def performed(self, command: Command, outcome: Outcome) -> None:
        if self._http and isinstance(command, Send | Call):
            HTTP.debug("%s %s -> %s", command.method, command.path, outcome)
        elif self._info and isinstance(command, Line | Admit):
            self._queued = time.monotonic() - self._start

    def events(self, events: Sequence[ChatEvent]) -> None:
        if not self._info:
            return
        for event in events:
            if self._first is None and isinstance(event, _OUTPUT):
                self._first = time.monotonic()
            elif type(event) in _DECISIONS and TURN.isEnabledFor(_DEBUG):
                TURN.debug("%s: %s", self.model or "chat", _DECISIONS[type(event)](event))

    def ended(self, turn: ChatTurn, stopped: bool) -> None:
        if not self._info:
            return
        error = turn.error
        outcome = "stopped" if stopped else "ok" if error is None else type(error).__name__
        completion = turn.completion or turn.partial()
        TURN.info("chat %s %s: %s", self.model or "-", outcome, self._summary(turn, completion))

    def _summary(self, turn: ChatTurn, completion: Completion | None) -> str:
        now = time.monotonic()
        parts = [f"{(now - self._start) * 1000:.0f} ms"]
        if self._queued >= 0.001:
            parts.append(f"queued {self._queued * 1000:.0f} ms")
        if self._first is not None:
            parts.append(f"first token {(self._first - self._start) * 1000:.0f} ms")
        ctx = turn.context
        if ctx.resumes:
            parts.append(f"{ctx.resumes} resume(s)")
        timings = completion.timings if completion is not None else None
        if timings is not None:
            parts.append(
                f"{timings.prompt_n + timings.cache_n} prompt tokens ({timings.cache_n} "
                f"cached), {timings.predicted_n} generated"
            )
            parts.append(f"prefill {timings.prompt_ms or 0:.0f} ms")
            parts.append(f"decode {timings.predicted_ms or 0:.0f} ms")
        if completion is not None and completion.reasoning_tokens:
            parts.append(f"{completion.reasoning_tokens} reasoning tokens")
        report = completion.cache if completion is not None else None
        if report is not None and report.reason is not None:
            parts.append(f"cache missed {report.shortfall} tokens: {report.reason}")
        return ", ".join(parts)


def _retrying(e: Retrying) -> str:
    return f"retry {e.attempt} in {e.after_ms} ms ({e.error})"


def _resuming(e: Resuming) -> str:
    return f"resume {e.attempt} from byte {e.offset} ({e.error})"


def _waiting(e: Waiting) -> str:
    return "waiting: the pinned slot is busy" if e.slot_busy else "waiting: the server is busy"


def _queued(e: Queued) -> str:
    return f"queued: {e.ahead} ahead"


def _loading(e: ModelLoading) -> str:
    return f"model {e.model} is {e.status}"


def _routed(e: Routed) -> str:
    slot = "" if e.slot is None else f" slot {e.slot}"
    return f"routed to {e.server}{slot} ({e.reason})"


def _capped(e: ThinkingCapped) -> str:
    return f"thinking capped at {e.tokens} tokens"


def _missed(e: CacheMiss) -> str:
    return f"prompt cache reused {e.reused} of {e.expected} tokens: {e.reason}"


_DECISIONS: dict[type, Callable[[Any], str]] = {
    Retrying: _retrying,
    Resuming: _resuming,
    Waiting: _waiting,
    Queued: _queued,
    ModelLoading: _loading,
    Routed: _routed,
    ThinkingCapped: _capped,
    CacheMiss: _missed,
}
