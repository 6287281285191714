"""Chat messages, tool calls and tool schemas: what goes into a request.

``ChatMessage`` is the union of the four message kinds. An assistant turn is sent back exactly
as it arrived (use :meth:`Completion.message`), so the server's prompt cache hits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar, overload

import msgspec

from .errors import OutputError
from .typed import OutputInvalid, function_type, output_type

T = TypeVar("T")
R = TypeVar("R")

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
        :meth:`ToolSchema.from_function` made): ``fn(**arguments)``. An ``async`` function
        returns its coroutine. Raises :class:`OutputError` when the arguments do not fit."""
        spec, _ = function_type(fn)
        params = self._convert(spec)
        return fn(**msgspec.structs.asdict(params))

    def _convert(self, spec: Any) -> Any:
        text = self.arguments if self.arguments.strip() else "{}"
        try:
            return spec.from_json(text)
        except OutputInvalid as exc:
            raise OutputError(
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
        its parameters from the signature's type hints (through msgspec; a parameter without
        a default is required). Run a call with ``ToolCall.invoke(fn)``."""
        spec, doc = function_type(fn)
        return cls(fn.__name__, doc, spec.schema)


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


def _parameters(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A tool's parameters: the schema without its ``title`` (the tool has a name)."""
    return {k: v for k, v in schema.items() if k != "title"}
