"""``Tools``: the schemas of a box of functions, and ``run(call)``, which dispatches by name,
awaits async tools, validates the arguments, and never raises for a tool's own failure."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import anyio
import msgspec
import pydantic
import pytest

from llamaclient import OutputError, ToolCall, ToolMessage, Tools, ToolSchema

pytestmark = pytest.mark.anyio


class Window(pydantic.BaseModel):
    start: int = pydantic.Field(ge=0)
    days: int = 7


@dataclass
class Place:
    city: str
    country: str = "FR"


def get_weather(city: str, unit: str = "celsius") -> dict[str, object]:
    """The current weather in a city.

    Args:
        city: The city's name.
        unit: ``celsius`` or ``fahrenheit``.

    Returns:
        The weather, as a dict.
    """
    return {"city": city, "unit": unit, "sky": "sunny"}


async def forecast(place: Place, window: Window) -> str:
    """A forecast for a place.

    Args:
        place: Where.
        window: Which days.
    """
    await anyio.lowlevel.checkpoint()
    return f"{place.city}: {window.days} days from day {window.start}"


def fails(path: str) -> str:
    """Always fails."""
    secret_local = "sk-from-a-local-variable"  # a traceback with locals would show it
    if secret_local:
        raise FileNotFoundError(f"no such file: {path}")
    return path


class Opaque:
    """Nothing msgspec can describe."""


def call(name: str, arguments: str, id: str = "call-1") -> ToolCall:
    return ToolCall(id, name, arguments)


def test_the_schemas_are_the_functions_own() -> None:
    tools = Tools([get_weather, forecast])
    assert tools.schemas == (
        ToolSchema.from_function(get_weather),
        ToolSchema.from_function(forecast),
    )
    weather, fc = tools.schemas
    assert weather.description == "The current weather in a city."  # no Args:/Returns:
    assert weather.parameters["properties"]["city"]["description"] == "The city's name."
    assert weather.parameters["required"] == ["city"]
    window = fc.parameters["properties"]["window"]  # the pydantic model's own schema
    assert window["properties"]["start"]["minimum"] == 0
    assert window["description"] == "Which days."
    assert tools.names == ("get_weather", "forecast")
    assert "forecast" in tools
    assert "nope" not in tools
    assert len(tools) == 2


async def test_a_call_runs_its_tool_by_name_and_answers_its_id() -> None:
    tools = Tools([get_weather, forecast])
    result = await tools.run(call("get_weather", '{"city": "Paris"}', id="call-7"))
    assert result == ToolMessage(
        "call-7", '{"city":"Paris","unit":"celsius","sky":"sunny"}', name="get_weather"
    )


async def test_an_async_tool_is_awaited_with_its_arguments_validated() -> None:
    tools = Tools([forecast])
    arguments = '{"place": {"city": "Lyon"}, "window": {"start": 2}}'
    result = await tools.run(call("forecast", arguments))
    assert result.content == "Lyon: 7 days from day 2"


async def test_arguments_that_do_not_fit_become_the_validation_message() -> None:
    tools = Tools([get_weather, forecast])
    wrong_type = await tools.run(call("get_weather", '{"city": 3}'))
    assert wrong_type.content == (
        "error: the arguments do not fit get_weather: Expected `str`, got `int` - at `$.city`"
    )
    missing = await tools.run(call("get_weather", "{}"))
    assert missing.content == (
        "error: the arguments do not fit get_weather: Object missing required field `city`"
    )
    # A pydantic model's own constraint, said with its path, as msgspec says one.
    below = await tools.run(call("forecast", '{"place": {"city": "A"}, "window": {"start": -1}}'))
    assert below.content.startswith("error: the arguments do not fit forecast: ")
    assert "at `$.window.start`" in below.content
    not_json = await tools.run(call("get_weather", '{"city": "Par'))
    assert not_json.content.startswith("error: the arguments do not fit get_weather: ")


async def test_empty_arguments_are_an_empty_object() -> None:
    def now() -> str:
        return "noon"

    assert (await Tools([now]).run(call("now", ""))).content == "noon"


async def test_an_unknown_tool_is_a_result_naming_the_tools() -> None:
    result = await Tools([get_weather, forecast]).run(call("read_file", "{}", id="c9"))
    assert result == ToolMessage(
        "c9",
        "error: there is no tool named 'read_file' (the tools: get_weather, forecast)",
        name="read_file",
    )


async def test_an_exception_is_its_type_and_message_and_nothing_else() -> None:
    result = await Tools([fails]).run(call("fails", '{"path": "notes.txt"}'))
    assert result.content == "error: FileNotFoundError: no such file: notes.txt"
    assert "Traceback" not in result.content
    assert "sk-from" not in result.content

    def silent() -> str:
        raise KeyError

    assert (await Tools([silent]).run(call("silent", "{}"))).content == "error: KeyError"


async def test_a_tool_raising_output_error_itself_is_its_failure_not_bad_arguments() -> None:
    """Arguments are validated before the function runs, so an ``OutputError`` from inside
    the tool (say, its own ``ToolCall.parse``) is the tool's error, not the model's."""

    def nested(text: str) -> str:
        return ToolCall("x", "inner", text).parse(Place).city

    result = await Tools([nested]).run(call("nested", '{"text": "[1]"}'))
    assert result.content.startswith("error: OutputError: the arguments of tool call 'inner'")


async def test_a_plain_tool_runs_in_a_worker_thread_unless_told_not_to() -> None:
    threads: list[int] = []

    def where() -> str:
        threads.append(threading.get_ident())
        return "here"

    await Tools([where]).run(call("where", "{}"))
    await Tools([where], threads=False).run(call("where", "{}"))
    assert threads[0] != threading.get_ident()
    assert threads[1] == threading.get_ident()


async def test_results_that_are_not_text_go_back_as_json() -> None:
    def model() -> Window:
        return Window(start=1)

    def struct() -> Place:
        return Place("Nice")

    def nothing() -> None:
        return None

    def a_set() -> set[int]:
        return {1}

    def an_object() -> object:
        return object()

    tools = Tools([model, struct, nothing, a_set, an_object])
    assert (await tools.run(call("model", ""))).content == '{"start":1,"days":7}'
    assert (await tools.run(call("struct", ""))).content == '{"city":"Nice","country":"FR"}'
    assert (await tools.run(call("nothing", ""))).content == "null"
    assert (await tools.run(call("a_set", ""))).content == "[1]"
    unknown = (await tools.run(call("an_object", ""))).content
    assert unknown == "error: TypeError: a object is not JSON"


async def test_a_plain_function_returning_an_awaitable_is_awaited() -> None:
    async def later() -> str:
        return "later"

    def deferred():  # type: ignore[no-untyped-def]
        return later()

    deferred.__annotations__ = {}
    assert (await Tools([deferred], threads=False).run(call("deferred", ""))).content == "later"


async def test_cancelling_a_run_of_a_thread_tool_does_not_wait_for_the_thread() -> None:
    release = threading.Event()

    def blocks() -> str:
        release.wait(5)
        return "late"

    try:
        with anyio.move_on_after(0.1) as scope, anyio.fail_after(2):
            await Tools([blocks]).run(call("blocks", ""))
        assert scope.cancelled_caught
    finally:
        release.set()


def test_a_function_that_cannot_be_a_tool_is_a_value_error() -> None:
    def star(*args: int) -> None: ...

    with pytest.raises(ValueError, match="star cannot be a tool"):
        Tools([star])
    with pytest.raises(ValueError, match="two tools are named 'get_weather'"):
        Tools([get_weather, get_weather])
    with pytest.raises(ValueError, match="needs a name"):
        Tools([lambda: None])

    def takes(thing: Opaque) -> None: ...

    with pytest.raises(ValueError, match="takes cannot be a tool"):
        Tools([takes])

    class Local:  # a hint that names it cannot be resolved from the module
        pass

    def hidden(thing: Local) -> None: ...

    with pytest.raises(ValueError, match="hidden cannot be a tool: name 'Local'"):
        Tools([hidden])


def test_tool_messages_from_the_box_encode_with_their_name() -> None:
    message = ToolMessage("c1", "2", name="add")
    assert msgspec.json.decode(msgspec.json.encode(message)) == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": "2",
        "name": "add",
    }


def test_output_error_is_what_invoke_raises_for_the_same_arguments() -> None:
    """The box and ``ToolCall.invoke`` validate through the same parameters type."""
    with pytest.raises(OutputError, match=r"Expected `str`, got `int` - at `\$.city`"):
        ToolCall("c", "get_weather", '{"city": 3}').invoke(get_weather)
