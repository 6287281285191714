"""Edges of the pure core that the bigger suites reach only through the network: a router's
error answers, a released HTTP parser, a ``base_url`` that is not a string, why a stream has
no Completion, the partial without the events not yet taken, and output types' corners."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

import msgspec
import pydantic
import pytest

from llamaclient import (
    ChatEvent,
    Completion,
    Config,
    Content,
    HTTPStatusError,
    ModelLimitError,
    ModelLoadError,
    ModelNotFoundError,
    ModelNotLoadedError,
    Reasoning,
    StalledError,
    StreamState,
    ToolCall,
    ToolCallDelta,
    Usage,
)
from llamaclient._protocol.http11 import Http11Error, ResponseParser
from llamaclient._protocol.models import router_error
from llamaclient._turn.machine import _without
from llamaclient._types import typed
from llamaclient._types.state import why_unfinished
from llamaclient._types.typed import OutputInvalid, docstring_parts, function_type, output_type


# -- a router's answers ---------------------------------------------------------------------
def error(status: int, body: str) -> HTTPStatusError:
    return HTTPStatusError(status, body, message=body, type="x", code=status)


@pytest.mark.parametrize(
    ("status", "body", "route", "kind"),
    [
        (400, "model 'm' not found", False, ModelNotFoundError),
        (404, "File Not Found", True, ModelNotFoundError),
        (400, "model is not loaded", False, ModelNotLoadedError),
        (400, "model is not running", True, ModelNotLoadedError),
        (500, "model limit reached", False, ModelLimitError),
        (500, "failed to load model, model name=m", False, ModelLoadError),
        (404, "File Not Found", False, HTTPStatusError),  # on a chat: not the router's word
        (400, "model 'other' not found", False, HTTPStatusError),
    ],
)
def test_a_routers_answers_name_the_case(status: int, body: str, route: bool, kind: type) -> None:
    mapped = router_error(error(status, body), "m", model_route=route)
    assert type(mapped) is kind
    if isinstance(mapped, HTTPStatusError):
        assert (mapped.status, mapped.body, mapped.code) == (status, body, status)


def test_an_error_that_is_not_an_answer_passes_through() -> None:
    stalled = StalledError("no bytes")
    assert router_error(stalled, "m") is stalled


# -- a released parser ---------------------------------------------------------------------
def test_a_released_parser_refuses_more_bytes_and_keeps_what_it_parsed() -> None:
    parser = ResponseParser()
    parser.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi")
    parser.detach()
    with pytest.raises(Http11Error, match="after the response was released"):
        parser.feed(b"more")
    assert parser.status == 200


# -- settings ------------------------------------------------------------------------------
def test_a_base_url_that_is_not_a_string() -> None:
    with pytest.raises(ValueError, match=r"Config\.base_url must be a str, not int"):
        Config(8080)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("state", "text"),
    [
        (StreamState.PENDING, "has not been iterated yet"),
        (StreamState.STREAMING, "has not finished yet"),
        (StreamState.STOPPED, "it was stopped (closed or cancelled)"),
        (StreamState.FAILED, "it failed with StalledError: no bytes"),
    ],
)
def test_why_a_stream_has_no_completion(state: StreamState, text: str) -> None:
    assert text in why_unfinished(state, StalledError("no bytes"))


# -- the partial without what was not taken yet -------------------------------------------
PARTIAL = Completion(
    id="c",
    model=None,
    content="Hello",
    reasoning_content="hmm",
    tool_calls=(ToolCall("a", "f", '{"x": 1}'), ToolCall("b", "g", "{}")),
    finish_reason=None,
    timings=None,
    usage=Usage(),
)


def test_the_partial_leaves_out_the_events_not_taken_yet() -> None:
    unseen: list[ChatEvent] = [Reasoning("m"), Content("lo"), ToolCallDelta(0, None, None, " 1}")]
    got = _without(PARTIAL, unseen)
    assert (got.content, got.reasoning_content) == ("Hel", "hm")
    assert got.tool_calls[0].arguments == '{"x":'
    assert _without(PARTIAL, []) is PARTIAL


def test_a_call_whose_first_piece_is_not_taken_is_left_out_with_the_calls_after_it() -> None:
    got = _without(PARTIAL, [ToolCallDelta(1, "b", "g", "{}"), Content("Hello")])
    assert [c.id for c in got.tool_calls] == ["a"]
    assert got.content is None
    assert _without(PARTIAL, [ToolCallDelta(5, None, None, "x")]).tool_calls == PARTIAL.tool_calls


# -- output types ----------------------------------------------------------------------------
def test_before_errors_is_imported_a_refusal_is_an_output_invalid() -> None:
    refusal = typed._plain("bad", "{", validation="not JSON")
    assert isinstance(refusal, OutputInvalid)
    assert str(refusal) == "bad: not JSON"


@dataclasses.dataclass
class Point:
    x: int


def test_a_value_that_is_not_the_type_is_output_invalid() -> None:
    with pytest.raises(OutputInvalid, match="Expected `int`"):
        output_type(Point).from_value({"x": "no"})
    assert output_type({"type": "object"}).from_value({"a": 1}) == {"a": 1}  # a schema: as is


def test_an_unhashable_type_alias_still_has_an_output_type() -> None:
    alias: Any = Annotated[int, []]
    spec = output_type(alias)
    assert spec.from_json("3") == 3


def test_a_schema_whose_root_reference_is_missing_is_kept_as_it_is() -> None:
    schema = {"$ref": "#/$defs/Nope", "$defs": {"A": {"$ref": "#/$defs/A"}}}
    assert output_type(schema).schema["$ref"] == "#/$defs/Nope"


def test_an_args_section_with_text_before_its_first_entry() -> None:
    doc = "Do it.\n\nArgs:\n    (the arguments)\n    path: the file\n        to read\n"
    description, args = docstring_parts(doc)
    assert description == "Do it."
    assert args == {"path": "the file to read"}


class Limits(pydantic.BaseModel):
    limit: int


def tool(options: Limits) -> int:
    return options.limit


def test_a_pydantic_parameter_from_a_decoded_value_and_its_errors() -> None:
    spec, _ = function_type(tool)
    assert spec.from_value({"options": {"limit": 3}}).options == Limits(limit=3)
    with pytest.raises(OutputInvalid, match=r"at `\$\.options\.limit`"):
        spec.from_value({"options": {"limit": "x"}})


class Odd(Exception):
    """A validation error that lists nothing."""

    def errors(self) -> list[Any]:
        return []


def test_a_failure_that_lists_no_errors_is_named_by_its_text() -> None:
    assert typed._located(Odd("odd"), "options") == "odd - at `$.options`"
    assert typed._located(ValueError(), "o") == "ValueError - at `$.o`"
    assert msgspec  # (imported for the types above)
