"""Typed outputs against real llama-servers.

Gemma 3 270M (the main job's model) answers under the JSON Schema of a Struct with string,
integer and nested fields: the grammar holds the model to it, the ``OutputDelta`` texts
joined are the final fields, ``parse`` works, and a too-small ``max_tokens`` is an
``OutputError`` with the partial value. The scripted model's tool calls parse into typed
Structs (``ToolCall.parse``) and run a function (``ToolSchema.from_function``,
``ToolCall.invoke``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import msgspec
import pytest

from devtools.llama_server import LlamaServer
from devtools.scripts import SCRIPTS
from llamaclient import (
    ChatRequest,
    Client,
    Config,
    FinishReason,
    OutputDelta,
    OutputError,
    ToolCallDone,
    ToolSchema,
    UserMessage,
)
from llamaclient._embedded import GEMMA_FLAGS, gemma_path
from tests.live.chat import drain, output, script_request

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    """One event loop: Gemma on 2 shared CPUs is slow, and both loops are proven elsewhere."""
    return "asyncio"


class Address(msgspec.Struct):
    city: str
    country: str


class Person(msgspec.Struct):
    name: str
    age: int
    address: Address


PROMPT = "Invent a person. Answer in JSON with name, age and address."


@pytest.fixture(scope="module")
def gemma_url(llama_server_binary: Any) -> Iterator[str]:
    """Gemma 3 270M on a llama-server of its own (the demo's flags), for this module."""
    server = LlamaServer(gemma_path(), *GEMMA_FLAGS, binary=llama_server_binary)
    server.start()
    try:
        yield server.base_url
    finally:
        server.stop()


@pytest.fixture
async def gemma(gemma_url: str) -> AsyncIterator[Client]:
    async with Client(Config(gemma_url)) as client:
        yield client


def person_request(max_tokens: int = 160) -> ChatRequest:
    return ChatRequest([UserMessage(PROMPT)], max_tokens=max_tokens, temperature=0, seed=7)


def leaves(value: Any, path: tuple[str | int, ...] = ()) -> dict[tuple[str | int, ...], Any]:
    if isinstance(value, dict):
        return {p: v for k, item in value.items() for p, v in leaves(item, (*path, k)).items()}
    return {path: value}


async def test_gemma_answers_a_struct_and_the_deltas_are_its_fields(gemma: Client) -> None:
    async with gemma.chat(person_request(), output=Person) as stream:
        events = [e async for e in stream]
    completion = stream.completion
    person = completion.output
    assert isinstance(person, Person)
    assert completion.finish_reason is FinishReason.STOP
    assert person.name
    assert person.address.city
    assert person.address.country
    assert stream.output() == msgspec.to_builtins(person)
    joined: dict[tuple[str | int, ...], str] = {}
    for e in events:
        if isinstance(e, OutputDelta):
            joined[e.path] = joined.get(e.path, "") + e.text
    expected = leaves(msgspec.to_builtins(person))
    assert set(joined) == set(expected)
    for path, value in expected.items():
        assert joined[path] == (value if isinstance(value, str) else str(value)), path
    assert [e.path for e in events if isinstance(e, OutputDelta) and e.done] == list(expected)


async def test_gemma_parse_returns_the_struct(gemma: Client) -> None:
    person = await gemma.parse(person_request(), Person)
    assert isinstance(person, Person)
    assert isinstance(person.age, int)
    assert isinstance(person.address, Address)


async def test_gemma_cut_by_max_tokens_is_an_output_error_with_the_partial(
    gemma: Client,
) -> None:
    with pytest.raises(OutputError) as info:
        await gemma.parse(person_request(max_tokens=10), Person)
    error = info.value
    assert error.partial is not None
    assert error.partial.finish_reason is FinishReason.LENGTH
    assert "max_tokens" in error.validation
    assert error.raw == error.partial.content
    assert error.raw.lstrip().startswith("{")
    assert isinstance(error.output, dict)
    assert error.output  # some fields had arrived
    assert set(error.output) <= {"name", "age", "address"}


class ReadFile(msgspec.Struct):
    path: str


class WriteFile(msgspec.Struct):
    path: str
    content: str


async def test_scripted_tool_call_parses_into_a_struct(live_client: Client) -> None:
    stream = live_client.chat(script_request("tool_call"))
    events, error = await drain(stream)
    assert error is None
    (done,) = [e for e in output(events) if isinstance(e, ToolCallDone)]
    assert done.call.parse(ReadFile) == ReadFile("notes.txt")
    assert stream.completion.tool_calls[0].parse(ReadFile) == ReadFile("notes.txt")
    with pytest.raises(OutputError, match="missing required field `content`"):
        done.call.parse(WriteFile)


def write_file(path: str, content: str) -> int:
    """Write a text file."""
    return len(content)


async def test_scripted_tool_call_runs_a_function_tool(live_client: Client) -> None:
    tool = ToolSchema.from_function(write_file)
    assert tool.parameters["required"] == ["path", "content"]
    stream = live_client.chat(script_request("write_file", tools=[tool]))
    _, error = await drain(stream)
    assert error is None
    (call,) = stream.completion.tool_calls
    expected = dict(SCRIPTS["write_file"].tool_calls[0][1])
    assert call.parse(WriteFile) == WriteFile(expected["path"], expected["content"])
    assert call.invoke(write_file) == len(expected["content"])


async def test_gemma_each_output_value_has_the_confidence_of_its_tokens(gemma: Client) -> None:
    """With ``top_logprobs``: every string, and the top-level number, gets a confidence on
    its last ``OutputDelta``, made of the answer's own tokens (a grammar-forced token is
    the model's probability before the grammar, so it may be low)."""
    request = msgspec.structs.replace(person_request(), top_logprobs=1)
    async with gemma.chat(request, output=Person) as stream:
        events = [e async for e in stream]
    completion = stream.completion
    assert isinstance(completion.output, Person)
    tokens = completion.logprobs
    assert tokens
    assert "".join(t.token for t in tokens) == completion.content
    done = {e.path: e.confidence for e in events if isinstance(e, OutputDelta) and e.done}
    assert set(done) == {("name",), ("age",), ("address", "city"), ("address", "country")}
    for path, sure in done.items():
        assert sure is not None, path
        assert 0 < sure.min <= sure.mean <= 1
        assert 1 <= sure.tokens <= len(tokens)
    probabilities = {t.probability for t in tokens}
    assert all(sure is not None and sure.min in probabilities for sure in done.values())
