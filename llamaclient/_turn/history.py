"""What a session's previous turn was, and why this turn's prompt cache fell short of it.

Exact echo (each turn sends back the previous messages and ``Completion.message()``) makes
the previous turn's whole prompt a prefix of the next one's, so the server reuses at least
that much (measured: exactly that on the scripted model, whose template renders a past
answer differently from how it was generated; on Gemma past its sliding window, the prompt
and the answer but one token). A turn that gets less has a reason, looked for in this
order: another server or pinned slot, the first message or setting that differs from the
previous turn's, a sliding-window model's checkpoint (at most ``WINDOW_MARGIN`` tokens
short, by design, when nothing differs), else the server no longer had it. A change is named
before the window: when both could explain a few tokens, the change is the one to fix.

Only requests with a ``session`` are remembered (a client cannot tell which earlier turn a
request without one continues). Pure: the turn machine reads and writes it like ``Known``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from .._types.cache import CacheReason, CacheReport
from .._types.completion import Completion
from .._types.events import CacheMiss, ChatEvent, Progress
from .._types.messages import AssistantMessage, ChatMessage
from .._types.request import ChatRequest

__all__ = ["MAX_SESSIONS", "WINDOW_MARGIN", "CacheWatch", "History", "Past", "explain", "miss"]

WINDOW_MARGIN = 5  # tokens a sliding-window model re-processes (docs/agent-loop.md)
MAX_SESSIONS = 4096  # sessions remembered; the least recently used is forgotten first


class Past:
    """A session's previous turn: its messages, its answer, its prompt's size, where it ran
    (server URL, pinned slot) and what else shapes the prompt (tools, template settings)."""

    __slots__ = ("answer", "messages", "prompt", "server", "settings", "slot", "tools")

    def __init__(
        self, request: ChatRequest, answer: AssistantMessage, prompt: int, server: str
    ) -> None:
        self.messages: tuple[Any, ...] = tuple(request.messages)
        self.answer = answer
        self.prompt = prompt
        self.server = server
        self.slot = request.slot
        self.tools = tuple(request.tools)
        self.settings = _settings(request)


def _settings(request: ChatRequest) -> tuple[bool, Any]:
    return request.thinking, request.extra.get("chat_template_kwargs")


class History:
    """The previous turn of each session of one client (or pool)."""

    __slots__ = ("_max", "_sessions")

    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        self._sessions: OrderedDict[str, Past] = OrderedDict()
        self._max = max_sessions

    def previous(self, session: str) -> Past | None:
        return self._sessions.get(session)

    def remember(
        self, session: str, request: ChatRequest, completion: Completion, server: str
    ) -> None:
        """A turn of ``session`` finished with ``completion``, whose cache report (from its
        timings) says how long its prompt was."""
        assert completion.cache is not None
        prompt = completion.cache.prompt
        sessions = self._sessions
        sessions[session] = Past(request, completion.message(), prompt, server)
        sessions.move_to_end(session)
        if len(sessions) > self._max:
            sessions.popitem(last=False)


def explain(
    past: Past | None, request: ChatRequest, server: str, prompt: int, reused: int
) -> CacheReport:
    """This turn's cache report: ``prompt`` tokens, ``reused`` from the cache, against the
    session's previous turn ``past`` (None: not known)."""
    if past is None:
        return CacheReport(prompt, reused)
    expected = past.prompt
    if reused >= expected:
        return CacheReport(prompt, reused, expected)
    reason, detail = _why(past, request, server, expected - reused)
    return CacheReport(prompt, reused, expected, reason, detail)


def miss(report: CacheReport) -> CacheMiss | None:
    """The event for ``report``: more than ``WINDOW_MARGIN`` tokens short (None: not)."""
    if report.reason is None or report.shortfall <= WINDOW_MARGIN:
        return None
    assert report.expected is not None
    return CacheMiss(report.expected, report.reused, report.reason, report.detail)


def _why(past: Past, request: ChatRequest, server: str, short: int) -> tuple[CacheReason, str]:
    if server != past.server:
        return "server", f"the previous turn ran on {past.server}, this one on {server}"
    slot = request.slot
    if past.slot is not None and slot is not None and past.slot != slot:
        return "slot", f"the previous turn ran on slot {past.slot}, this one on slot {slot}"
    found = _first_change(past, request)
    if found is not None:
        return found
    if short <= WINDOW_MARGIN:
        tokens = "token" if short == 1 else "tokens"
        return "window", (
            f"{short} {tokens} short: a sliding-window model re-processes the end of the "
            "previous prompt (its checkpoint), by design"
        )
    return "evicted", (
        "the messages and settings are the previous turn's, so the server no longer had "
        "them: its slot served another prompt since, or another backend took the turn"
    )


def _first_change(past: Past, request: ChatRequest) -> tuple[CacheReason, str] | None:
    detail = _message_change(past, request.messages)
    if detail is not None:
        return "messages", detail
    tools = tuple(request.tools)
    if tools != past.tools:
        return "tools", _tools_change(past.tools, tools)
    thinking, kwargs = _settings(request)
    if thinking != past.settings[0]:
        was, now = ("on", "off") if past.settings[0] else ("off", "on")
        return "settings", f"thinking was {was} in the previous turn, {now} in this one"
    if kwargs != past.settings[1]:
        return "settings", "chat_template_kwargs differ from the previous turn's"
    return None


def _message_change(past: Past, messages: Sequence[ChatMessage]) -> str | None:
    """The first message that is not the previous turn's (its messages, then its answer)."""
    expected = (*past.messages, past.answer)
    for i, want in enumerate(expected):
        if i >= len(messages):
            return (
                f"the request has {len(messages)} messages where the previous turn's and its "
                f"answer were {len(expected)}: messages[{i}:] were dropped or compacted"
            )
        got = messages[i]
        if got != want and _sent(got) != _sent(want):
            return _differs(i, want, got, answer=i == len(past.messages))
    return None


def _sent(message: Any) -> Any:
    """The message as the server sees it: its fields, whatever its class, without its tool
    calls' confidence (never sent)."""
    sent: dict[str, Any] = msgspec.to_builtins(message)  # a message struct: a dict
    for call in sent.get("tool_calls") or ():
        call.pop("confidence", None)
    return sent


def _differs(i: int, want: Any, got: Any, *, answer: bool) -> str:
    role, had = _role(got), _role(want)
    if role != had:
        return f"messages[{i}] is {_a(role)} message where the previous turn had {_a(had)} one"
    field = next(
        (f for f in want.__struct_fields__ if getattr(want, f) != getattr(got, f)), "content"
    )
    if answer:
        return (
            f"messages[{i}] is not the previous answer as it came: its {field} differs "
            "(send completion.message() back)"
        )
    hint = _HINTS.get(role, "")
    return f"messages[{i}] ({role}): its {field} differs from the previous turn's{hint}"


_HINTS = {
    "system": " (an edited system prompt)",
    "assistant": " (an answer not sent back as it came: keep completion.message())",
}


def _a(word: str) -> str:
    return f"an {word}" if word[:1] in "aeio" else f"a {word}"  # an assistant, a user


def _role(message: Any) -> str:
    tag = getattr(getattr(message, "__struct_config__", None), "tag", None)
    return tag if isinstance(tag, str) else type(message).__name__


def _tools_change(before: tuple[Any, ...], now: tuple[Any, ...]) -> str:
    names_before = [t.name for t in before]
    names_now = [t.name for t in now]
    if sorted(names_before) == sorted(names_now):
        if names_before != names_now:
            return f"the same tools in another order: {names_now} (was {names_before})"
        changed = [t.name for t, u in zip(before, now, strict=True) if t != u]
        return f"tool {changed[0]!r} changed (its description or parameters)"
    added = sorted(set(names_now) - set(names_before))
    removed = sorted(set(names_before) - set(names_now))
    parts = [f"added {added}" if added else "", f"removed {removed}" if removed else ""]
    return "the tool list changed: " + ", ".join(p for p in parts if p)


class CacheWatch:
    """A processor of the stream's events (see ``Plan.processors``): right after the first
    ``Progress`` (its ``cache`` is what the server reused), the ``CacheMiss`` when the turn
    falls short of ``past``. ``now()`` gives the request as it went and its server's URL."""

    __slots__ = ("_now", "_past", "done")

    def __init__(self, past: Past, now: Callable[[], tuple[ChatRequest, str]]) -> None:
        self._past = past
        self._now = now
        self.done = False

    def __call__(self, events: list[ChatEvent]) -> list[ChatEvent]:
        if self.done:
            return events
        for i, event in enumerate(events):
            if type(event) is Progress:
                self.done = True
                request, server = self._now()
                report = explain(self._past, request, server, event.total, event.cache)
                found = miss(report)
                if found is not None:
                    return [*events[: i + 1], found, *events[i + 1 :]]
                return events
        return events
