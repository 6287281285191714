"""Chat messages, their content parts, tool calls and tool schemas: what goes into a request.

``ChatMessage`` is the union of the four message kinds, tagged by ``role``: a history encodes
with ``msgspec.json.encode(history)`` and decodes back with
``msgspec.json.decode(data, type=list[ChatMessage])``. An assistant turn is sent back exactly
as it arrived (use :meth:`Completion.message`), so the server's prompt cache hits.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar, overload

import msgspec

from . import typed
from .logprobs import Confidence
from .typed import OutputInvalid, function_type, output_type

T = TypeVar("T")
R = TypeVar("R")

__all__ = [
    "AssistantMessage",
    "AudioPart",
    "ChatMessage",
    "ContentPart",
    "ImagePart",
    "ReasoningField",
    "SystemMessage",
    "TextPart",
    "ToolCall",
    "ToolMessage",
    "ToolSchema",
    "UserMessage",
    "media_kinds",
]


class ToolCall(msgspec.Struct, frozen=True):
    """One tool call the model made.

    ``arguments`` is the raw JSON text exactly as the server streamed it; it is never parsed
    and re-serialised. ``extra`` holds fields a server added to the call beyond
    ``id``/``type``/``function`` (extensions it wants back on the next request).
    ``confidence`` is each top-level argument's :class:`Confidence` when the request asked
    for ``top_logprobs`` (None otherwise); it is never sent back.
    """

    id: str
    name: str
    arguments: str
    extra: Mapping[str, Any] = msgspec.field(default_factory=dict)
    confidence: Mapping[str, Confidence] | None = None

    @overload
    def parse(self, type: type[T]) -> T: ...
    @overload
    def parse(self, type: Mapping[str, Any]) -> Any: ...
    def parse(self, type: type[T] | Mapping[str, Any]) -> T | Any:
        """The arguments converted to ``type`` (a Struct, dataclass, TypedDict, pydantic
        model, or a JSON Schema dict for the plain decoded value). Empty arguments are
        ``{}``. Raises :class:`OutputError` when they are not valid JSON or not a ``type``."""
        return self._convert(output_type(type))

    def invoke(self, fn: Callable[..., R]) -> R:
        """Call ``fn`` with the arguments, converted to its parameters' type hints (the tool
        :meth:`ToolSchema.from_function` made; a pydantic model parameter gets an instance
        of its model): ``fn(**arguments)``. An ``async`` function returns its coroutine.
        Raises :class:`OutputError` when the arguments do not fit."""
        spec, _ = function_type(fn)
        params = self._convert(spec)
        return fn(**msgspec.structs.asdict(params))

    def _convert(self, spec: Any) -> Any:
        text = self.arguments if self.arguments.strip() else "{}"
        try:
            return spec.from_json(text)
        except OutputInvalid as exc:
            raise typed.refused(
                f"the arguments of tool call {self.name!r} do not fit {spec.name}",
                self.arguments,
                validation=str(exc),
            ) from None


class ToolSchema(msgspec.Struct, frozen=True):
    """A tool the model may call. ``parameters`` is a JSON Schema of type ``object``."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = msgspec.field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )

    @classmethod
    def from_type(
        cls, name: str, type: type[Any] | Mapping[str, Any], description: str = ""
    ) -> ToolSchema:
        """A tool whose parameters are the JSON Schema of ``type`` (a Struct, dataclass,
        TypedDict or pydantic model); read a call back with ``ToolCall.parse(type)``."""
        return cls(name, description, _parameters(output_type(type).schema))

    @classmethod
    def from_function(cls, fn: Callable[..., Any]) -> ToolSchema:
        """A tool for the function ``fn``: its name, its docstring as the description, and
        its parameters from the signature's type hints (through msgspec, and a pydantic
        model parameter through its model; a parameter without a default is required).
        A Google-style ``Args:`` section gives each parameter its ``description``, and the
        tool's description is the docstring without its ``Args:``/``Returns:`` sections.
        Run a call with ``ToolCall.invoke(fn)``."""
        spec, doc = function_type(fn)
        return cls(fn.__name__, doc, spec.schema)


class TextPart(msgspec.Struct, frozen=True, tag_field="type", tag="text"):
    """Text inside a multi-part user message: ``{"type": "text", "text": ...}`` on the wire."""

    text: str


class ImagePart(msgspec.Struct, frozen=True, omit_defaults=True, tag_field="type", tag="image"):
    """An image inside a user message: give ``data`` (the file's bytes, sent as a base64
    ``data:<mime>;base64,...`` URL) or ``url`` (sent as given: ``https://...`` is fetched
    by the server itself). On the wire: ``{"type": "image_url", "image_url": {"url": ...}}``.

    The server takes images only when it runs a vision projector (``--mmproj``); otherwise
    the request fails with :class:`~llamaclient.UnsupportedInputError`.
    """

    data: bytes | None = None
    url: str | None = None
    mime: str = "image/png"

    def __post_init__(self) -> None:
        if (self.data is None) == (self.url is None):
            raise ValueError("ImagePart needs exactly one of data= or url=")
        if self.data is not None and not self.mime.startswith("image/"):
            raise ValueError(f"ImagePart mime must start with 'image/', not {self.mime!r}")

    def wire_url(self) -> str:
        """The URL the server gets: ``url`` as given, or ``data`` as a base64 data URL."""
        if self.data is None:
            return self.url or ""
        return f"data:{self.mime};base64,{_base64(self.data)}"


class AudioPart(msgspec.Struct, frozen=True, tag_field="type", tag="audio"):
    """Audio inside a user message: the file's bytes and its ``format`` (``"wav"``,
    ``"mp3"``). On the wire: ``{"type": "input_audio", "input_audio": {"data": <base64>,
    "format": ...}}``. The server needs an audio-capable projector (``--mmproj``)."""

    data: bytes
    format: str


ContentPart = TextPart | ImagePart | AudioPart
"""One part of a multi-part user message (tagged by ``type`` when saved as JSON)."""


class SystemMessage(
    msgspec.Struct, frozen=True, omit_defaults=True, tag_field="role", tag="system"
):
    """Instructions for the whole conversation. ``name`` is passed to the chat template."""

    content: str
    name: str | None = None


class UserMessage(msgspec.Struct, frozen=True, omit_defaults=True, tag_field="role", tag="user"):
    """What the user said: a string, or a sequence of :data:`ContentPart` (text, images,
    audio), kept as a tuple. ``name`` is passed to the chat template."""

    content: str | Sequence[ContentPart]
    name: str | None = None

    def __post_init__(self) -> None:
        content = self.content
        if not isinstance(content, (str, bytes, tuple)) and isinstance(content, Sequence):
            msgspec.structs.force_setattr(self, "content", tuple(content))


ReasoningField = Literal["reasoning_content", "reasoning"]
"""The field a server streams the thinking in: llama-server, DeepSeek and older vLLM use
``reasoning_content``; newer vLLM, Groq and OpenRouter use ``reasoning``."""


class AssistantMessage(
    msgspec.Struct, frozen=True, omit_defaults=True, tag_field="role", tag="assistant"
):
    """An assistant turn. ``content`` None is sent as ``""``; ``reasoning_content`` None is
    left out; ``tool_calls`` empty is left out. The thinking goes back under
    ``reasoning_field``, the name it arrived under, so the server renders the same prompt."""

    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    name: str | None = None
    reasoning_field: ReasoningField = "reasoning_content"


class ToolMessage(msgspec.Struct, frozen=True, omit_defaults=True, tag_field="role", tag="tool"):
    """The result of the tool call ``tool_call_id``. ``name`` (the tool's name) is passed
    to the chat template; some templates show it."""

    tool_call_id: str
    content: str
    name: str | None = None


ChatMessage = SystemMessage | UserMessage | AssistantMessage | ToolMessage
"""Any chat message; a tagged union (``role``), so ``list[ChatMessage]`` decodes."""


def media_kinds(messages: Sequence[object]) -> frozenset[str]:
    """The input modalities the messages need beyond text: ``"vision"`` and/or ``"audio"``."""
    kinds: set[str] = set()
    for message in messages:
        if isinstance(message, UserMessage) and not isinstance(message.content, str):
            for part in message.content:
                if isinstance(part, ImagePart):
                    kinds.add("vision")
                elif isinstance(part, AudioPart):
                    kinds.add("audio")
    return frozenset(kinds)


def _base64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _parameters(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A tool's parameters: the schema without its ``title`` (the tool has a name)."""
    return {k: v for k, v in schema.items() if k != "title"}
