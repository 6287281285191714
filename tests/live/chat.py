"""Helpers for the live tests that go through our ``Client``: scripted requests and event
bookkeeping.

``script_request(name)`` is the :class:`~llamaclient.ChatRequest` equivalent of
:func:`devtools.scripts.request_body`: the script's ``logit_bias`` as written there, in the
OpenAI form ``{"<token id>": bias}`` (the client sends the ids as integers), its tools as
:class:`~llamaclient.ToolSchema`, thinking on unless the script turns it
off, and ``temperature: 0``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from devtools.scripts import LIST_DIR_TOOL, READ_FILE_TOOL, SCRIPTS, WRITE_FILE_TOOL
from llamaclient import (
    ChatEvent,
    ChatMessage,
    ChatRequest,
    Config,
    Content,
    Progress,
    Reasoning,
    ToolSchema,
    UserMessage,
)
from tests.conftest import drain

__all__ = [
    "ALL_TOOLS",
    "CALL_ID_RE",
    "ID_RE",
    "TRANSPORTS",
    "TransportName",
    "drain",
    "live_config",
    "output",
    "schema",
    "script_request",
    "text_of",
]

TransportName = Literal["asyncio", "httpx"]
TRANSPORTS: tuple[TransportName, ...] = ("asyncio", "httpx")
ID_RE = re.compile(r"^chatcmpl-[0-9A-Za-z]{32}$")
CALL_ID_RE = re.compile(r"^[0-9A-Za-z]{32}$")


def schema(tool: dict[str, Any]) -> ToolSchema:
    """A ``devtools.scripts`` tool dict as a ToolSchema (same JSON once built)."""
    fn = tool["function"]
    return ToolSchema(fn["name"], fn["description"], fn["parameters"])


#: Every scripted tool, in one fixed order (the multi-turn test sends them on every turn).
ALL_TOOLS: tuple[ToolSchema, ...] = tuple(
    schema(t) for t in (LIST_DIR_TOOL, READ_FILE_TOOL, WRITE_FILE_TOOL)
)


def script_request(
    name: str,
    messages: Sequence[ChatMessage] | None = None,
    *,
    tools: Sequence[ToolSchema] | None = None,
    **fields: Any,
) -> ChatRequest:
    """The ChatRequest that selects script ``name``; ``fields`` are more ChatRequest fields."""
    script = SCRIPTS[name].fields
    bias = dict(script.get("logit_bias", {}))  # the OpenAI form: decimal-string token ids
    kwargs = script.get("chat_template_kwargs", {})
    if tools is None:
        tools = [schema(t) for t in script.get("tools", [])]
    request: dict[str, Any] = {
        "tools": tools,
        "thinking": kwargs.get("enable_thinking", True),
        "temperature": 0,
        "logit_bias": bias or None,
    }
    request.update(fields)
    return ChatRequest(list(messages or [UserMessage("hi")]), **request)


def live_config(base_url: str, transport: TransportName = "asyncio", **overrides: Any) -> Config:
    """A Config for a live server that fails fast instead of hanging the suite."""
    fields: dict[str, Any] = {
        "transport": transport,
        "connect_timeout": 5.0,
        "wait_timeout": 30.0,
        "stall_timeout": 30.0,
        "load_timeout": 60.0,
        "retry_backoff": 0.05,
        "retry_max_backoff": 0.2,
        **overrides,
    }
    return Config(base_url, **fields)



def output(events: Sequence[ChatEvent]) -> list[ChatEvent]:
    """The events without prompt ``Progress``."""
    return [e for e in events if not isinstance(e, Progress)]


def text_of(events: Sequence[ChatEvent], kind: type[Reasoning] | type[Content]) -> str:
    """The concatenated text of the ``Reasoning`` or ``Content`` events."""
    return "".join(e.text for e in events if isinstance(e, kind))
