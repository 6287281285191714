"""Output types: how a user's type becomes a JSON Schema, and JSON text becomes that type.

A type is a ``msgspec.Struct``, a dataclass, a ``TypedDict`` (or anything else msgspec can
convert to), a pydantic ``BaseModel`` (recognised by its methods: pydantic is imported only
for a tool parameter whose type holds a model inside another, ``Item | None``, when it is
loaded already), or a plain JSON Schema ``dict``, whose output is the decoded JSON value.
"""

from __future__ import annotations

import functools
import inspect
import re
import typing
from collections.abc import Callable, Mapping
from typing import Any, Generic, Protocol, TypeVar

import msgspec

__all__ = [
    "OutputInvalid",
    "OutputType",
    "docstring_parts",
    "function_type",
    "output_type",
    "refused",
]

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

# Google-style docstring sections: the parameters' descriptions come from the first kind, and
# none of them goes into the tool's description (the model gets the parameters' schema, and
# what the function returns or raises is nothing it can use).
_ARGS = frozenset({"Args", "Arguments", "Parameters", "Params"})
_DROPPED = _ARGS | {"Returns", "Return", "Yields", "Yield", "Raises"}
_SECTION = re.compile(r"^(?P<name>[A-Z][A-Za-z ]*):\s*$")
_ENTRY = re.compile(r"^\**(?P<name>\w+)\s*(?:\([^)]*\))?\s*:\s*(?P<text>.*)$")


def docstring_parts(doc: str) -> tuple[str, dict[str, str]]:
    """A Google-style docstring (as ``inspect.getdoc`` gives it) split into the description
    without its ``Args:``, ``Returns:``, ``Yields:`` and ``Raises:`` sections, and the
    ``Args:`` entries by parameter name (continuation lines joined with spaces)."""
    kept: list[str] = []
    args: dict[str, str] = {}
    lines = doc.splitlines()
    i = 0
    while i < len(lines):
        head = _SECTION.match(lines[i])
        if head is None or head["name"] not in _DROPPED:
            kept.append(lines[i])
            i += 1
            continue
        end = i + 1
        while end < len(lines) and (not lines[end].strip() or lines[end][:1].isspace()):
            end += 1
        if head["name"] in _ARGS:
            args.update(_arg_entries(lines[i + 1 : end]))
        i = end
    return "\n".join(kept).strip(), args


def _arg_entries(body: list[str]) -> dict[str, str]:
    """``name (type): text`` entries, each continued by the lines indented deeper than it."""
    entries: dict[str, list[str]] = {}
    indent: int | None = None
    current: list[str] | None = None
    for line in body:
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        indent = depth if indent is None else indent
        entry = _ENTRY.match(line.strip()) if depth <= indent else None
        if entry is not None:
            current = entries.setdefault(entry["name"], [])
            current.append(entry["text"].strip())
        elif current is not None:
            current.append(line.strip())
    return {name: " ".join(t for t in texts if t) for name, texts in entries.items()}


def _mentions_pydantic(hint: Any) -> bool:
    return _is_pydantic(hint) or any(_mentions_pydantic(a) for a in typing.get_args(hint))


def _pydantic_param(hint: Any) -> OutputType[Any] | None:
    """The output type of a parameter that is (or holds) a pydantic model, through pydantic
    itself: msgspec cannot describe or convert one. None for any other parameter."""
    if not _mentions_pydantic(hint):
        return None
    if _is_pydantic(hint):
        return _type_output(hint)
    import pydantic  # a hint names a pydantic model, so pydantic is installed

    adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(hint)
    schema = _inline(adapter.json_schema())
    return OutputType("parameter", schema, adapter.validate_json, adapter.validate_python)


def _json_default(value: Any) -> Any:
    """A parameter's default as JSON for its schema (a pydantic model is dumped)."""
    dump = getattr(value, "model_dump", None)
    return dump(mode="json") if callable(dump) else msgspec.to_builtins(value)


def _const(value: Any) -> Callable[[], Any]:
    return lambda: value


class _Tool:
    """A function's parameters: a Struct of them for msgspec, with each pydantic parameter
    typed ``Any`` there, and validated by its model once msgspec has decoded the rest."""

    def __init__(self, fn: Callable[..., Any], args: Mapping[str, str]) -> None:
        hints = typing.get_type_hints(fn)
        fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
        self.models: dict[str, tuple[OutputType[Any], Any]] = {}
        for param in inspect.signature(fn).parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
                raise TypeError(
                    f"{fn.__name__}: parameter {param.name!r} cannot be a tool argument"
                )
            hint, default = hints.get(param.name, Any), param.default
            model = _pydantic_param(hint)
            if model is not None:
                self.models[param.name] = (model, default)
                hint = Any
                if default is not param.empty:  # msgspec cannot write a model in a schema
                    default = msgspec.field(default_factory=_const(default))
            if default is param.empty:
                fields.append((param.name, hint))
            else:
                fields.append((param.name, hint, default))
        self.struct = msgspec.defstruct(fn.__name__, fields, kw_only=True)
        self.decoder = msgspec.json.Decoder(self.struct)
        self.schema = self._schema(args)

    def _schema(self, args: Mapping[str, str]) -> dict[str, Any]:
        schema = {k: v for k, v in _type_output(self.struct).schema.items() if k != "title"}
        properties = dict(schema.get("properties", {}))
        for name, (model, default) in self.models.items():
            properties[name] = dict(model.schema)
            if default is not inspect.Parameter.empty:
                properties[name]["default"] = _json_default(default)
        for name, text in args.items():
            if name in properties and text:
                properties[name] = {**properties[name], "description": text}
        return {**schema, "properties": properties} if properties else schema

    def from_json(self, text: str) -> Any:
        return self._validated(self.decoder.decode(text))

    def from_value(self, value: Any) -> Any:
        return self._validated(msgspec.convert(value, self.struct))

    def _validated(self, params: Any) -> Any:
        for name, (model, default) in self.models.items():
            value = getattr(params, name)
            if value is default:  # not given: the default object itself, as Python passes it
                continue
            try:
                setattr(params, name, model._from_value(value))
            except (ValueError, TypeError) as exc:
                raise OutputInvalid(_located(exc, name)) from None
        return params


def _located(exc: Exception, name: str) -> str:
    """A pydantic failure said as msgspec says one: the first error and where it is."""
    errors = getattr(exc, "errors", None)
    found = errors() if callable(errors) else None
    if not isinstance(found, list) or not found or not isinstance(found[0], dict):
        return f"{_first_line(exc)} - at `$.{name}`"
    first = found[0]
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first.get("loc", ()))
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return f"{first.get('msg', 'invalid')} - at `$.{name}{path}`{more}"


@functools.lru_cache(maxsize=256)
def function_type(fn: Callable[..., Any]) -> tuple[OutputType[Any], str]:
    """The parameters of ``fn`` as an output type (a Struct of its parameters, built from
    the type hints; a parameter without a default is required; a pydantic model parameter
    has its model's schema and is validated by it) and its description: the docstring
    without its ``Args:``/``Returns:`` sections, whose ``Args:`` entries become the
    parameters' descriptions."""
    description, args = docstring_parts(inspect.getdoc(fn) or "")
    tool = _Tool(fn, args)
    return OutputType(fn.__name__, tool.schema, tool.from_json, tool.from_value), description
