"""Output types: how a user's type becomes a JSON Schema, and JSON text becomes that type.

A type is a ``msgspec.Struct``, a dataclass, a ``TypedDict`` (or anything else msgspec can
convert to), a pydantic ``BaseModel`` (recognised by its methods: pydantic is never imported
here), or a plain JSON Schema ``dict``, whose output is the decoded JSON value.
"""

from __future__ import annotations

import functools
import inspect
import re
import typing
from collections.abc import Callable, Mapping
from typing import Any, Generic, Protocol, TypeVar

import msgspec

__all__ = ["OutputInvalid", "OutputType", "function_type", "output_type", "refused"]

T = TypeVar("T")

_NAME_BAD = re.compile(r"[^A-Za-z0-9_-]")
_REF = "#/$defs/"
_JSON = msgspec.json.Decoder()


class OutputInvalid(ValueError):
    """The text is not valid JSON or does not convert to the type; the message says why."""


class _Refusal(Protocol):
    def __call__(self, message: str, raw: str, *, validation: str) -> Exception: ...


def _plain(message: str, raw: str, *, validation: str) -> Exception:
    return OutputInvalid(f"{message}: {validation}")


refused: _Refusal = _plain
"""How a tool call's arguments that do not fit are refused: ``errors.py`` sets it to
``OutputError`` when it is imported (``import llamaclient`` does). Its ``partial`` is a
``Completion``, which holds ``ToolCall`` values: the one place the vocabulary loops back,
closed by this late binding instead of an import circle."""


class OutputType(Generic[T]):
    """One output type: its ``name``, its JSON ``schema`` (references inlined), and
    :meth:`from_json` / :meth:`from_value` to get an instance."""

    __slots__ = ("_from_json", "_from_value", "name", "schema")

    def __init__(
        self,
        name: str,
        schema: dict[str, Any],
        from_json: Callable[[str], T],
        from_value: Callable[[Any], T],
    ) -> None:
        self.name = _NAME_BAD.sub("_", name)[:64] or "output"
        self.schema = schema
        self._from_json = from_json
        self._from_value = from_value

    def response_format(self) -> dict[str, Any]:
        """The ``response_format`` body field that constrains the answer to :attr:`schema`."""
        return {
            "type": "json_schema",
            "json_schema": {"name": self.name, "schema": self.schema, "strict": True},
        }

    def from_json(self, text: str) -> T:
        """The instance for JSON ``text``; :class:`OutputInvalid` says why there is none."""
        try:
            return self._from_json(text)
        except (msgspec.MsgspecError, ValueError, TypeError) as exc:
            raise OutputInvalid(_first_line(exc)) from None

    def from_value(self, value: Any) -> T:
        """The instance for an already decoded JSON value (dicts, lists, scalars)."""
        try:
            return self._from_value(value)
        except (msgspec.MsgspecError, ValueError, TypeError) as exc:
            raise OutputInvalid(_first_line(exc)) from None


@typing.overload
def output_type(tp: type[T]) -> OutputType[T]: ...
@typing.overload
def output_type(tp: Mapping[str, Any]) -> OutputType[Any]: ...
def output_type(tp: type[T] | Mapping[str, Any]) -> OutputType[T] | OutputType[Any]:
    """The :class:`OutputType` of ``tp`` (built once per type)."""
    if isinstance(tp, Mapping):
        return _schema_output(tp)
    try:
        return _type_output(typing.cast(Any, tp))
    except TypeError as exc:  # unhashable: a parametrised alias msgspec still takes
        if "unhashable" not in str(exc):
            raise
        return _type_output.__wrapped__(tp)


def _schema_output(schema: Mapping[str, Any]) -> OutputType[Any]:
    plain = msgspec.json.decode(msgspec.json.encode(schema))  # a copy we own, plain dicts
    if not isinstance(plain, dict):
        raise TypeError("a JSON Schema must be a mapping")
    name = plain.get("title")
    return OutputType(
        name if isinstance(name, str) else "output", _inline(plain), _JSON.decode, _same
    )


@functools.lru_cache(maxsize=256)
def _type_output(tp: Any) -> OutputType[Any]:
    name = getattr(tp, "__name__", "output")
    if _is_pydantic(tp):
        return OutputType(
            name, _inline(tp.model_json_schema()), tp.model_validate_json, tp.model_validate
        )
    try:
        schema = msgspec.json.schema(tp)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"cannot build a JSON Schema for {tp!r}: {exc}") from None
    decoder = msgspec.json.Decoder(tp)
    return OutputType(
        name, _inline(schema), decoder.decode, functools.partial(msgspec.convert, type=tp)
    )


def _is_pydantic(tp: Any) -> bool:
    """A pydantic model, recognised without importing pydantic."""
    return isinstance(tp, type) and all(
        callable(getattr(tp, attr, None))
        for attr in ("model_json_schema", "model_validate_json", "model_validate")
    )


def _same(value: Any) -> Any:
    return value


def _first_line(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


class _Cyclic(Exception):
    pass


def _inline(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with its ``#/$defs/...`` references replaced by their targets, so the
    server's grammar builder sees one self-contained schema. A recursive type keeps its
    ``$defs``; only its root reference is replaced."""
    defs = schema.get("$defs", {})
    try:
        return typing.cast(dict[str, Any], _resolve(schema, defs, frozenset()))
    except _Cyclic:
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF) and ref[len(_REF) :] in defs:
            root = {k: v for k, v in schema.items() if k != "$ref"}
            return {**defs[ref[len(_REF) :]], **root}
        return schema


def _resolve(node: Any, defs: Mapping[str, Any], seen: frozenset[str]) -> Any:
    if isinstance(node, list):
        return [_resolve(item, defs, seen) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith(_REF):
        name = ref[len(_REF) :]
        if name in seen or name not in defs:
            raise _Cyclic
        target = _resolve(defs[name], defs, seen | {name})
        rest = {k: _resolve(v, defs, seen) for k, v in node.items() if k not in ("$ref", "$defs")}
        return {**target, **rest}
    return {k: _resolve(v, defs, seen) for k, v in node.items() if k != "$defs"}


# ---- tools from functions ------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def function_type(fn: Callable[..., Any]) -> tuple[OutputType[Any], str]:
    """The parameters of ``fn`` as an output type (a Struct of its parameters, built from
    the type hints; a parameter without a default is required) and its description (the
    docstring)."""
    hints = typing.get_type_hints(fn)
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise TypeError(f"{fn.__name__}: parameter {param.name!r} cannot be a tool argument")
        hint = hints.get(param.name, Any)
        if param.default is param.empty:
            fields.append((param.name, hint))
        else:
            fields.append((param.name, hint, param.default))
    struct = msgspec.defstruct(fn.__name__, fields, kw_only=True)
    spec = _type_output(struct)
    schema = {k: v for k, v in spec.schema.items() if k != "title"}
    spec = OutputType(fn.__name__, schema, spec._from_json, spec._from_value)
    return spec, inspect.getdoc(fn) or ""
