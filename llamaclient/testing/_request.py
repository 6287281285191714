"""What FakeLlama received (:class:`FakeCall`, :class:`FakeRequest`, decoded) and what it is
given to answer with (:class:`Reply`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from .._types.messages import AssistantMessage, ChatMessage, ToolCall, ToolSchema
from .._types.openai import from_openai

__all__ = ["FakeCall", "FakeRequest", "Reply", "ReplyFunction", "decode", "parse", "tool_call"]


@dataclass(frozen=True)
class FakeCall:
    """One HTTP request the fake server received: ``query`` its URL's query (one value a
    name), ``body`` its JSON body decoded (None without one), ``headers`` its headers
    (lower-case names; not compared: ``FakeCall("GET", "/slots", {}, None) in fake.calls``)."""

    method: str
    path: str
    query: dict[str, str]
    body: Any
    headers: dict[str, str] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class FakeRequest:
    """One chat request as the fake server received it, decoded.

    ``messages`` are the library's message types (a message it cannot decode stays a dict),
    ``tools`` the :class:`ToolSchema` list, ``settings`` every other body field (``max_tokens``,
    ``id_slot``, ``chat_template_kwargs``, ...), ``body`` the whole JSON body, ``headers``
    the request headers (lower-case names) and ``query`` the URL's query
    (``{"autoload": "false"}``)."""

    messages: list[ChatMessage | dict[str, Any]]
    tools: list[ToolSchema]
    settings: dict[str, Any]
    body: dict[str, Any]
    headers: dict[str, str]
    query: dict[str, str] = field(default_factory=dict)

    @property
    def last(self) -> ChatMessage | dict[str, Any]:
        """The last message (the user's turn, or a tool result)."""
        return self.messages[-1]


@dataclass(frozen=True)
class Reply:
    """One scripted answer: what :meth:`FakeLlama.reply` takes, and what a reply function
    returns. ``pace`` is the seconds between the answer's HTTP chunks (each token, then
    the finish chunk): one number for every chunk, or one per chunk in order (0 past the
    end of the list). ``confidence`` is each token's probability, for a request that asks
    for log-probabilities: one number for every token, or one per token in order (1.0 past
    the end)."""

    content: str | None = None
    reasoning: str | None = None
    tool_calls: Sequence[ToolCall | Mapping[str, Any]] = ()
    chunk: int | None = None
    finish: str | None = None
    pace: float | Sequence[float] = 0.0
    confidence: float | Sequence[float] = 1.0

    def __post_init__(self) -> None:
        if self.chunk is not None and self.chunk < 1:
            raise ValueError(f"chunk must be >= 1, not {self.chunk}")
        if not _every(self.pace, lambda p: not p < 0):
            raise ValueError(f"pace must be seconds >= 0, not {self.pace!r}")
        if not _every(self.confidence, lambda p: 0 < p <= 1):
            raise ValueError(f"confidence must be probabilities in (0, 1], not {self.confidence!r}")


def _every(value: float | Sequence[float], ok: Callable[[float], bool]) -> bool:
    """One number, or one each in order: each is a number that ``ok`` takes."""
    items = [value] if isinstance(value, (int, float)) else list(value)
    return all(isinstance(p, (int, float)) and ok(p) for p in items)


def per_item(value: float | Sequence[float]) -> float | tuple[float, ...]:
    """One number for every chunk or token, or one each in order (frozen, as an answer
    keeps it)."""
    return value if isinstance(value, (int, float)) else tuple(value)


ReplyFunction = Callable[[FakeRequest], Reply | str | None]
"""A reply computed from the request: a :class:`Reply`, a ``str`` (the content), or None."""


def tool_call(call: ToolCall | Mapping[str, Any], fallback_id: str) -> ToolCall:
    """A scripted tool call as a :class:`ToolCall` (a mapping's ``arguments`` JSON-encoded
    unless a ``str``; ``fallback_id`` when it has no ``id``)."""
    if isinstance(call, ToolCall):
        return call
    arguments = call.get("arguments", {})
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return ToolCall(str(call.get("id") or fallback_id), str(call["name"]), arguments)


def parse(body: bytes | None) -> Any:
    try:
        return json.loads(body) if body else None
    except ValueError:
        return None


def decode(body: dict[str, Any], headers: dict[str, str], query: dict[str, str]) -> FakeRequest:
    messages = [_message(m) for m in body.get("messages", [])]
    tools = [
        ToolSchema(f["name"], f.get("description", ""), f.get("parameters", {}))
        for t in body.get("tools") or []
        if isinstance(f := t.get("function"), dict)
    ]
    settings = {k: v for k, v in body.items() if k not in ("messages", "tools")}
    return FakeRequest(messages, tools, settings, body, dict(headers), query)


def _message(m: Any) -> ChatMessage | dict[str, Any]:
    """A message of the body as the library's type (read as ``from_openai`` reads it, so
    every field the request builder writes comes back); a dict when it is none of them."""
    if not isinstance(m, dict):
        return {"raw": m}
    try:
        (message,) = from_openai([m])
    except ValueError:
        return m
    if isinstance(message, AssistantMessage) and message.content == "":
        # the request body sends an assistant content of None as "": read it back as None
        return msgspec.structs.replace(message, content=None)
    return message
