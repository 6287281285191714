"""Typed output through a real stream against the fault server: the request carries the
schema, OutputDelta events follow the content that carried them, the Completion holds the
validated instance, and an answer that is not one raises OutputError with what arrived."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from llamaclient import (
    ChatRequest,
    Client,
    Config,
    Content,
    OutputDelta,
    OutputError,
    ProtocolError,
    UserMessage,
)
from tests.support.faultserver import FaultServer, Json, chat_chunks, stream

pytestmark = pytest.mark.anyio

REQUEST = ChatRequest([UserMessage("describe a city")], max_tokens=200)


class Place(msgspec.Struct):
    name: str
    population: int


class City(msgspec.Struct):
    name: str
    rank: int
    places: list[Place]


ANSWER = (
    '{"name": "Ly\\u00f3n", "rank": 3,'
    ' "places": [{"name": "Vieux \\"Lyon\\"", "population": 1200}]}'
)
PIECES = [ANSWER[i : i + 5] for i in range(0, len(ANSWER), 5)]


def answer(pieces: list[str], finish: str = "stop") -> Any:
    return stream(chat_chunks(pieces, finish_reason=finish))


async def test_typed_output_streams_deltas_and_ends_with_the_instance() -> None:
    async with FaultServer() as srv:
        srv.route("POST", "/v1/chat/completions", answer(PIECES))
        async with Client(Config(srv.url)) as client, client.chat(REQUEST, output=City) as s:
            events = [e async for e in s]
            body = srv.requests[0].json()
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["name"] == "City"
    assert body["response_format"]["json_schema"]["strict"] is True
    assert body["response_format"]["json_schema"]["schema"]["required"] == [
        "name",
        "rank",
        "places",
    ]
    assert s.completion.output == City("Lyón", 3, [Place('Vieux "Lyon"', 1200)])
    assert s.completion.content == ANSWER
    deltas = [e for e in events if isinstance(e, OutputDelta)]
    text: dict[tuple[str | int, ...], str] = {}
    for d in deltas:
        text[d.path] = text.get(d.path, "") + d.text
    assert text == {
        ("name",): "Lyón",
        ("rank",): "3",
        ("places", 0, "name"): 'Vieux "Lyon"',
        ("places", 0, "population"): "1200",
    }
    assert [d.path for d in deltas if d.done] == list(text)
    first = events.index(deltas[0])
    assert isinstance(events[first - 1], Content | OutputDelta)
    assert s.output() == json.loads(ANSWER)


async def test_output_so_far_is_readable_while_streaming() -> None:
    async with FaultServer() as srv:
        srv.route("POST", "/v1/chat/completions", answer(PIECES))
        async with Client(Config(srv.url)) as client, client.chat(REQUEST, output=City) as s:
            assert s.output() is None
            snapshots = []
            async for event in s:
                if isinstance(event, OutputDelta) and event.path == ("places", 0, "name"):
                    snapshots.append(json.dumps(s.output()))
    first = json.loads(snapshots[0])["places"][0]["name"]
    assert 'Vieux "Lyon"'.startswith(first)
    assert len(first) < len('Vieux "Lyon"')
    assert json.loads(snapshots[-1])["places"] == [{"name": 'Vieux "Lyon"'}]


async def test_parse_returns_the_instance() -> None:
    async with FaultServer() as srv:
        srv.route("POST", "/v1/chat/completions", answer(PIECES))
        async with Client(Config(srv.url)) as client:
            city = await client.parse(REQUEST, City)
    assert city == City("Lyón", 3, [Place('Vieux "Lyon"', 1200)])


async def test_parse_with_a_json_schema_dict_gives_the_plain_value() -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string"}}}
    async with FaultServer() as srv:
        srv.route("POST", "/v1/chat/completions", answer(PIECES))
        async with Client(Config(srv.url)) as client:
            value = await client.parse(REQUEST, schema)
            sent = srv.requests[0].json()["response_format"]["json_schema"]
    assert value == json.loads(ANSWER)
    assert sent == {"name": "output", "schema": schema, "strict": True}


async def test_a_length_finish_before_the_json_closed_is_an_output_error_with_the_partial() -> None:
    cut = PIECES[: len(PIECES) // 2 + 3]
    async with FaultServer() as srv:
        srv.route("POST", "/v1/chat/completions", answer(cut, finish="length"))
        async with Client(Config(srv.url)) as client, client.chat(REQUEST, output=City) as s:
            events: list[Any] = []

            async def drain() -> None:
                async for e in s:
                    events.append(e)

            with pytest.raises(OutputError) as info:
                await drain()
    error = info.value
    assert isinstance(error, ProtocolError)
    assert error.raw == "".join(cut)
    assert "max_tokens" in error.validation
    assert error.partial is not None
    assert error.partial.content == "".join(cut)
    assert error.output == s.output()
    assert error.output["name"] == "Lyón"
    assert error.output["rank"] == 3
    # the partial is exactly what the events delivered
    assert "".join(e.text for e in events if isinstance(e, Content)) == error.raw


async def test_an_answer_that_is_not_the_type_is_an_output_error() -> None:
    wrong = ['{"name": "X", ', '"rank": "first", "places": []}']
    async with FaultServer() as srv:
        srv.route("POST", "/v1/chat/completions", answer(wrong))
        async with Client(Config(srv.url)) as client:
            with pytest.raises(OutputError) as info:
                await client.parse(REQUEST, City)
    assert "Expected `int`, got `str` - at `$.rank`" in info.value.validation
    assert info.value.output == {"name": "X", "rank": "first", "places": []}
    assert "the answer is not a City" in str(info.value)


async def test_text_that_is_not_json_is_an_output_error() -> None:
    async with FaultServer() as srv:
        srv.route("POST", "/v1/chat/completions", answer(["Sure! Here", " it is"]))
        async with Client(Config(srv.url)) as client:
            with pytest.raises(OutputError, match="not a City") as info:
                await client.parse(REQUEST, City)
    assert info.value.raw == "Sure! Here it is"
    assert info.value.output is None


async def test_no_output_type_no_output_events() -> None:
    async with FaultServer() as srv:
        srv.route("POST", "/v1/chat/completions", answer(PIECES))
        async with Client(Config(srv.url)) as client, client.chat(REQUEST) as s:
            events = [e async for e in s]
            body = srv.requests[0].json()
    assert "response_format" not in body
    assert not [e for e in events if isinstance(e, OutputDelta)]
    assert s.completion.output is None
    assert s.output() is None


async def test_a_whole_json_answer_is_validated_too() -> None:
    body = {
        "choices": [
            {
                "finish_reason": "stop",
                "index": 0,
                "message": {"role": "assistant", "content": ANSWER},
            }
        ],
        "created": 1,
        "id": "chatcmpl-1",
        "model": "m",
        "object": "chat.completion",
        "usage": {"completion_tokens": 5, "prompt_tokens": 5, "total_tokens": 10},
    }
    async with FaultServer() as srv:
        srv.route("POST", "/v1/chat/completions", [Json(200, body)])
        async with Client(Config(srv.url)) as client, client.chat(REQUEST, output=City) as s:
            events = [e async for e in s]
    assert not [e for e in events if isinstance(e, OutputDelta)]  # nothing streamed
    assert s.completion.output == City("Lyón", 3, [Place('Vieux "Lyon"', 1200)])
    assert s.output() == json.loads(ANSWER)
