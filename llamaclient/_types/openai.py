"""Messages in the OpenAI chat format, both ways: what every other tool speaks.

``to_openai(messages)`` gives the ``messages`` list of an OpenAI chat request (plain dicts);
``from_openai(dicts)`` reads one back. The round trip is exact for our messages, and the dicts
are the ones llama-server gets, except that an assistant ``content`` of None stays ``null``
here (the request body sends ``""``, which the chat templates need).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from .messages import (
    AssistantMessage,
    AudioPart,
    ChatMessage,
    ContentPart,
    ImagePart,
    ReasoningField,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
)

__all__ = ["from_openai", "message_to_openai", "to_openai", "tool_call_to_openai"]


def to_openai(messages: Iterable[ChatMessage]) -> list[dict[str, Any]]:
    """The messages as OpenAI chat-format dicts (``{"role": ..., "content": ...}``).

    Content parts become ``text``, ``image_url`` (a ``data:`` URL for image bytes) and
    ``input_audio`` parts; tool calls become ``{"id", "type": "function", "function":
    {"name", "arguments"}}`` plus their ``extra`` fields; ``reasoning_content`` (the field
    llama-server, vLLM and DeepSeek use for thinking; ``reasoning`` when the thinking arrived
    under that name, see ``AssistantMessage.reasoning_field``) and ``name`` are included when
    set.
    """
    return [message_to_openai(message) for message in messages]


def message_to_openai(message: ChatMessage) -> dict[str, Any]:
    """One message as an OpenAI chat-format dict (see :func:`to_openai`)."""
    out: dict[str, Any]
    if isinstance(message, UserMessage):
        content = message.content
        parts = content if isinstance(content, str) else [_part_out(p) for p in content]
        out = {"role": "user", "content": parts}
    elif isinstance(message, AssistantMessage):
        out = {"role": "assistant", "content": message.content}
        if message.reasoning_content is not None:
            out[message.reasoning_field] = message.reasoning_content
        if message.tool_calls:
            out["tool_calls"] = [tool_call_to_openai(call) for call in message.tool_calls]
    elif isinstance(message, ToolMessage):
        out = {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    elif isinstance(message, SystemMessage):
        out = {"role": "system", "content": message.content}
    else:
        raise TypeError(f"not a chat message: {type(message).__name__}")
    if message.name is not None:
        out["name"] = message.name
    return out


def tool_call_to_openai(call: ToolCall) -> dict[str, Any]:
    """``{"id", "type": "function", "function": {"name", "arguments"}}`` plus ``extra``."""
    wire = {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }
    return {**wire, **call.extra} if call.extra else wire


def _part_out(part: ContentPart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ImagePart):
        return {"type": "image_url", "image_url": {"url": part.wire_url()}}
    data = base64.b64encode(part.data).decode("ascii")
    return {"type": "input_audio", "input_audio": {"data": data, "format": part.format}}


def from_openai(messages: Iterable[Mapping[str, Any]]) -> list[ChatMessage]:
    """Read OpenAI chat-format message dicts into our messages; ``ValueError`` names the
    first one that is not valid.

    ``developer`` is read as a system message. A ``data:image/...;base64`` image URL becomes
    ``ImagePart(data=..., mime=...)``, any other URL ``ImagePart(url=...)``; an image's
    ``detail`` is dropped (llama-server ignores it). Text-only content part lists of system,
    assistant and tool messages are joined into one string. Tool call ``arguments`` given as
    a JSON object are kept as its JSON text. Fields we do not model (``refusal``,
    ``annotations``, ...) are ignored.
    """
    return [_message_in(message, position) for position, message in enumerate(messages)]


def _message_in(message: Mapping[str, Any], position: int) -> ChatMessage:
    if not isinstance(message, Mapping):
        raise ValueError(f"messages[{position}] is a {type(message).__name__}, not a dict")
    role = message.get("role")
    name = _optional_str(message, "name", position)
    if role in ("system", "developer"):
        return SystemMessage(_text(message.get("content"), position), name=name)
    if role == "user":
        return UserMessage(_user_content(message.get("content"), position), name=name)
    if role == "assistant":
        return _assistant_in(message, position, name)
    if role == "tool":
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str):
            raise ValueError(f"messages[{position}]: a tool message needs a str tool_call_id")
        return ToolMessage(call_id, _text(message.get("content"), position), name=name)
    raise ValueError(
        f"messages[{position}] has role {role!r}, not system, developer, user, assistant or tool"
    )


def _assistant_in(message: Mapping[str, Any], position: int, name: str | None) -> ChatMessage:
    content = message.get("content")
    calls = message.get("tool_calls") or ()
    if not isinstance(calls, (list, tuple)):
        raise ValueError(f"messages[{position}].tool_calls must be a list")
    thought = _optional_str(message, "reasoning_content", position)
    field: ReasoningField = "reasoning_content"
    if thought is None:
        thought = _optional_str(message, "reasoning", position)
        field = "reasoning" if thought is not None else field
    return AssistantMessage(
        content=None if content is None else _text(content, position),
        reasoning_content=thought,
        tool_calls=tuple(_tool_call_in(call, position) for call in calls),
        name=name,
        reasoning_field=field,
    )


def _tool_call_in(call: object, position: int) -> ToolCall:
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(call, Mapping) or not isinstance(function, Mapping):
        raise ValueError(f"messages[{position}]: a tool call needs a 'function' object")
    name, arguments = function.get("name"), function.get("arguments", "")
    if not isinstance(name, str):
        raise ValueError(f"messages[{position}]: a tool call's function needs a str name")
    if not isinstance(arguments, str):
        arguments = msgspec.json.encode(arguments).decode()
    call_id = call.get("id")
    extra = {k: v for k, v in call.items() if k not in ("id", "type", "function", "index")}
    return ToolCall(call_id if isinstance(call_id, str) else "", name, arguments, extra)


def _user_content(content: object, position: int) -> str | tuple[ContentPart, ...]:
    if isinstance(content, str):
        return content
    if not isinstance(content, (list, tuple)):
        raise ValueError(f"messages[{position}].content must be a str or a list of parts")
    return tuple(_part_in(part, position) for part in content)


def _part_in(part: object, position: int) -> ContentPart:
    found = _known_part(part, position) if isinstance(part, Mapping) else None
    if found is not None:
        return found
    raise ValueError(
        f"messages[{position}]: content part {part!r:.80} is not a text, image_url or "
        "input_audio part"
    )


def _known_part(part: Mapping[str, Any], position: int) -> ContentPart | None:
    kind = part.get("type")
    if kind == "text" and isinstance(part.get("text"), str):
        return TextPart(part["text"])
    if kind == "image_url":
        url = _nested_str(part, "image_url", "url")
        return None if url is None else _image_in(url)
    if kind == "input_audio":
        data = _nested_str(part, "input_audio", "data")
        fmt = _nested_str(part, "input_audio", "format")
        if data is not None and fmt is not None:
            return AudioPart(_b64decode(data, position), fmt)
    return None


def _image_in(url: str) -> ImagePart:
    """Bytes for a base64 image data URL that re-encodes to the same text, else the URL."""
    head, comma, payload = url.partition(",")
    if comma and head.startswith("data:image/") and head.endswith(";base64"):
        try:
            data = base64.b64decode(payload, validate=True)
        except binascii.Error:
            return ImagePart(url=url)
        if base64.b64encode(data).decode("ascii") == payload:
            return ImagePart(data=data, mime=head[5:-7])
    return ImagePart(url=url)


def _b64decode(text: str, position: int) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise ValueError(f"messages[{position}]: input_audio data is not base64") from None


def _text(content: object, position: int) -> str:
    """A str, or the text parts of a list joined (system, assistant and tool content)."""
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        texts = [p.get("text") for p in content if _is_text_part(p)]
        if len(texts) == len(content) and all(isinstance(t, str) for t in texts):
            return "".join(str(t) for t in texts)
    raise ValueError(f"messages[{position}].content must be a str or a list of text parts")


def _is_text_part(part: object) -> bool:
    return isinstance(part, Mapping) and part.get("type") == "text"


def _optional_str(message: Mapping[str, Any], key: str, position: int) -> str | None:
    value = message.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"messages[{position}].{key} must be a str")
    return value


def _nested_str(part: Mapping[str, Any], outer: str, inner: str) -> str | None:
    holder = part.get(outer)
    value = holder.get(inner) if isinstance(holder, Mapping) else None
    return value if isinstance(value, str) else None
