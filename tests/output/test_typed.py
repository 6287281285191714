"""Output types: the schema sent for each kind of type, the conversion back, and typed tools
(ToolSchema.from_type / from_function, ToolCall.parse / invoke)."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, TypedDict

import msgspec
import pydantic
import pytest

from llamaclient import (
    ChatRequest,
    Config,
    OutputError,
    ProtocolError,
    ToolCall,
    ToolSchema,
    UserMessage,
    build_body,
)
from llamaclient._types.typed import OutputInvalid, output_type


class Point(msgspec.Struct):
    x: int
    y: int = 0


class Shape(msgspec.Struct):
    name: str
    points: list[Point]
    anchor: Point | None = None


@dataclasses.dataclass
class Pet:
    name: str
    legs: int


class Movie(TypedDict):
    title: str
    year: int


class Model(pydantic.BaseModel):
    title: str
    tags: list[str] = []
    pet: PetModel | None = None


class PetModel(pydantic.BaseModel):
    name: str


Model.model_rebuild()


class Tree(msgspec.Struct):
    label: str
    children: list[Tree] = []


def test_struct_schema_is_inlined_and_the_json_converts_back() -> None:
    spec = output_type(Shape)
    assert spec.name == "Shape"
    assert "$ref" not in str(spec.schema)
    assert "$defs" not in spec.schema
    assert spec.schema["type"] == "object"
    assert spec.schema["required"] == ["name", "points"]
    point = spec.schema["properties"]["points"]["items"]
    assert point["properties"]["x"] == {"type": "integer"}
    assert spec.from_json('{"name": "tri", "points": [{"x": 1}]}') == Shape("tri", [Point(1)])


def test_response_format_is_the_json_schema_envelope() -> None:
    assert output_type(Point).response_format() == {
        "type": "json_schema",
        "json_schema": {
            "name": "Point",
            "schema": {
                "title": "Point",
                "type": "object",
                "properties": {"x": {"type": "integer"}, "y": {"type": "integer", "default": 0}},
                "required": ["x"],
            },
            "strict": True,
        },
    }


def test_dataclass_typeddict_and_pydantic_models() -> None:
    assert output_type(Pet).from_json('{"name": "Rex", "legs": 4}') == Pet("Rex", 4)
    assert output_type(Movie).from_json('{"title": "M", "year": 1931}') == {
        "title": "M",
        "year": 1931,
    }
    spec = output_type(Model)
    assert "$ref" not in str(spec.schema)
    assert spec.schema["properties"]["pet"]["anyOf"][0]["properties"]["name"]["type"] == "string"
    assert spec.from_json('{"title": "t", "pet": {"name": "p"}}') == Model(
        title="t", pet=PetModel(name="p")
    )
    with pytest.raises(OutputInvalid, match="title"):
        spec.from_json('{"tags": []}')


def test_a_recursive_type_keeps_its_defs_with_the_root_inlined() -> None:
    spec = output_type(Tree)
    assert spec.schema["type"] == "object"
    assert spec.schema["properties"]["children"]["items"] == {"$ref": "#/$defs/Tree"}
    assert "Tree" in spec.schema["$defs"]
    assert spec.from_json('{"label": "a", "children": [{"label": "b"}]}') == Tree("a", [Tree("b")])


def test_a_plain_json_schema_gives_the_decoded_value() -> None:
    schema = {"title": "my answer!", "type": "object", "properties": {"a": {"type": "string"}}}
    spec = output_type(schema)
    assert spec.name == "my_answer_"
    assert spec.schema == schema
    assert spec.from_json('{"a": "b", "c": [1]}') == {"a": "b", "c": [1]}
    with pytest.raises(OutputInvalid):
        spec.from_json('{"a": ')


def test_wrong_values_say_where() -> None:
    with pytest.raises(OutputInvalid, match=r"Expected `int`, got `str` - at `\$.points\[0\].x`"):
        output_type(Shape).from_json('{"name": "s", "points": [{"x": "1"}]}')
    with pytest.raises(OutputInvalid, match=r"malformed|truncated|JSON"):
        output_type(Shape).from_json('{"name": "s"')


def test_a_type_msgspec_cannot_describe_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="cannot build a JSON Schema"):
        output_type(object)


def test_the_body_is_the_same_bytes_every_time() -> None:
    from llamaclient._client import _output_spec

    request = ChatRequest([UserMessage("hi")])
    bodies = set()
    for _ in range(3):
        spec = _output_spec(request, Shape)
        r = msgspec.structs.replace(request, response_format=spec.response_format())
        bodies.add(build_body(Config("http://x"), r))
    assert len(bodies) == 1
    assert b'"response_format":{"type":"json_schema","json_schema":{"name":"Shape"' in bodies.pop()


def test_output_with_a_response_format_already_set_is_refused() -> None:
    from llamaclient._client import _output_spec

    with pytest.raises(ValueError, match="leave response_format"):
        _output_spec(ChatRequest([], response_format={"type": "json_object"}), Point)


def test_pydantic_is_not_imported_by_the_library() -> None:
    code = "import llamaclient, sys; print('pydantic' in sys.modules)"
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---- typed tools -------------------------------------------------------------------------


def test_tool_schema_from_type() -> None:
    tool = ToolSchema.from_type("draw", Shape, "Draw a shape")
    assert tool.name == "draw"
    assert tool.description == "Draw a shape"
    assert tool.parameters["type"] == "object"
    assert "title" not in tool.parameters
    assert tool.parameters["required"] == ["name", "points"]


def test_tool_call_parse() -> None:
    call = ToolCall("c0", "draw", '{"name": "line", "points": [{"x": 1, "y": 2}, {"x": 3}]}')
    assert call.parse(Shape) == Shape("line", [Point(1, 2), Point(3)])
    assert call.parse({"type": "object"})["name"] == "line"
    assert ToolCall("c1", "noop", "").parse(dict[str, int]) == {}


def test_tool_call_parse_errors_are_output_errors_with_the_raw_text() -> None:
    call = ToolCall("c0", "draw", '{"name": 1, "points": []}')
    with pytest.raises(OutputError) as info:
        call.parse(Shape)
    assert isinstance(info.value, ProtocolError)
    assert info.value.raw == call.arguments
    assert "Expected `str`, got `int` - at `$.name`" in info.value.validation
    assert "'draw'" in str(info.value)
    with pytest.raises(OutputError, match=r"malformed|truncated"):
        ToolCall("c0", "draw", '{"name": "x"').parse(Shape)


def get_weather(city: str, days: int = 1, units: str | None = None) -> str:
    """Weather forecast for a city.

    Returns a short text.
    """
    return f"{city}:{days}:{units}"


async def async_tool(query: str) -> list[str]:
    return [query]


def test_tool_schema_from_function() -> None:
    tool = ToolSchema.from_function(get_weather)
    assert tool.name == "get_weather"
    assert tool.description == "Weather forecast for a city.\n\nReturns a short text."
    assert tool.parameters == {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer", "default": 1},
            "units": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        },
        "required": ["city"],
    }


def test_tool_call_invoke_calls_the_function_with_converted_arguments() -> None:
    call = ToolCall("c0", "get_weather", '{"city": "Oslo", "days": 3}')
    assert call.invoke(get_weather) == "Oslo:3:None"
    with pytest.raises(OutputError, match="Expected `int`"):
        ToolCall("c0", "get_weather", '{"city": "Oslo", "days": "3"}').invoke(get_weather)
    with pytest.raises(OutputError, match="missing required field `city`"):
        ToolCall("c0", "get_weather", "{}").invoke(get_weather)


@pytest.mark.anyio
async def test_invoke_returns_the_coroutine_of_an_async_function() -> None:
    assert await ToolCall("c", "async_tool", '{"query": "q"}').invoke(async_tool) == ["q"]


def test_functions_with_var_args_cannot_be_tools() -> None:
    def bad(*args: Any) -> None: ...

    with pytest.raises(TypeError, match="cannot be a tool argument"):
        ToolSchema.from_function(bad)


class SearchOptions(pydantic.BaseModel):
    """How to search."""

    limit: int = 10
    tags: list[str] = []


def search_notes(
    query: str, options: SearchOptions, fallback: SearchOptions | None = None
) -> str:
    """Search the notes.

    Looks at every file.

    Args:
        query: What to look for,
            in plain words.
        options (SearchOptions): The search settings.
        fallback: Settings for a second try.

    Returns:
        The matching lines.

    Raises:
        OSError: a file cannot be read.
    """
    return f"{query}|{options!r}|{fallback!r}"


def test_a_pydantic_model_parameter_gets_its_models_schema() -> None:
    tool = ToolSchema.from_function(search_notes)
    model = SearchOptions.model_json_schema()
    properties = tool.parameters["properties"]
    assert properties["options"] == {**model, "description": "The search settings."}
    assert properties["fallback"] == {
        "anyOf": [model, {"type": "null"}],
        "default": None,
        "description": "Settings for a second try.",
    }
    assert tool.parameters["required"] == ["query", "options"]


def test_invoke_passes_an_instance_of_the_pydantic_model() -> None:
    call = ToolCall("c0", "search_notes", '{"query": "milk", "options": {"limit": 2}}')
    assert call.invoke(search_notes) == f"milk|{SearchOptions(limit=2)!r}|None"
    both = ToolCall(
        "c1", "search_notes", '{"query": "q", "options": {}, "fallback": {"tags": ["a"]}}'
    )
    assert both.invoke(search_notes) == f"q|{SearchOptions()!r}|{SearchOptions(tags=['a'])!r}"


def test_a_pydantic_default_is_the_default_object_and_json_in_the_schema() -> None:
    default = SearchOptions(limit=3)

    def find(query: str, options: SearchOptions = default) -> SearchOptions:
        return options

    tool = ToolSchema.from_function(find)
    assert tool.parameters["properties"]["options"]["default"] == {"limit": 3, "tags": []}
    assert tool.parameters["required"] == ["query"]
    assert ToolCall("c", "find", '{"query": "q"}').invoke(find) is default
    assert ToolCall("c", "find", '{"query": "q", "options": {"limit": 5}}').invoke(find) == (
        SearchOptions(limit=5)
    )


def test_arguments_that_do_not_fit_the_model_say_where() -> None:
    call = ToolCall("c0", "search_notes", '{"query": "q", "options": {"limit": "many"}}')
    with pytest.raises(OutputError) as info:
        call.invoke(search_notes)
    assert info.value.validation.startswith("Input should be a valid integer")
    assert info.value.validation.endswith("- at `$.options.limit`")
    with pytest.raises(OutputError, match=r"at `\$\.options`"):
        ToolCall("c0", "search_notes", '{"query": "q", "options": 3}').invoke(search_notes)


def test_the_args_section_describes_the_parameters_and_leaves_the_description() -> None:
    tool = ToolSchema.from_function(search_notes)
    assert tool.description == "Search the notes.\n\nLooks at every file."
    assert tool.parameters["properties"]["query"] == {
        "type": "string",
        "description": "What to look for, in plain words.",
    }


def test_docstring_sections_other_than_args_and_returns_stay() -> None:
    def tidy(path: str, dry_run: bool = False) -> None:
        """Tidy a folder.

        Arguments:
            path: The folder.
            dry_run: Only say what would move.
            missing: Not a parameter (ignored).

        Example:
            tidy("notes")
        """

    tool = ToolSchema.from_function(tidy)
    assert tool.description == 'Tidy a folder.\n\nExample:\n    tidy("notes")'
    properties = tool.parameters["properties"]
    assert properties["path"]["description"] == "The folder."
    assert properties["dry_run"] == {
        "type": "boolean",
        "default": False,
        "description": "Only say what would move.",
    }
    assert "missing" not in properties
