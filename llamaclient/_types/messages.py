"""Chat messages, tool calls and tool schemas: what goes into a request.

``ChatMessage`` is the union of the four message kinds. An assistant turn is sent back exactly
as it arrived (use :meth:`Completion.message`), so the server's prompt cache hits.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

__all__ = [
    "AssistantMessage",
    "ChatMessage",
    "SystemMessage",
    "ToolCall",
    "ToolMessage",
    "ToolSchema",
    "UserMessage",
]


class ToolCall(msgspec.Struct, frozen=True):
    """One tool call the model made.

    ``arguments`` is the raw JSON text exactly as the server streamed it; it is never parsed
    and re-serialised. ``extra`` holds fields a server added to the call beyond
    ``id``/``type``/``function`` (extensions it wants back on the next request).
    """

    id: str
    name: str
    arguments: str
    extra: Mapping[str, Any] = msgspec.field(default_factory=dict)


class ToolSchema(msgspec.Struct, frozen=True):
    """A tool the model may call. ``parameters`` is a JSON Schema of type ``object``."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = msgspec.field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )


class SystemMessage(msgspec.Struct, frozen=True):
    content: str


class UserMessage(msgspec.Struct, frozen=True):
    content: str


class AssistantMessage(msgspec.Struct, frozen=True):
    """An assistant turn. ``content`` None is sent as ``""``; ``reasoning_content`` None is
    left out; ``tool_calls`` empty is left out."""

    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()


class ToolMessage(msgspec.Struct, frozen=True):
    """The result of the tool call ``tool_call_id``."""

    tool_call_id: str
    content: str


ChatMessage = SystemMessage | UserMessage | AssistantMessage | ToolMessage
