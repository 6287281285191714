"""ChatTurn reading the answer, at the edges the other suites leave open (found by mutation
testing, ``devtools/mutation.py turn``): a budgeted stream drains after ``[DONE]`` like any
other, a whole answer over the limit keeps its start, and a typed answer that is not the
type carries exactly the text, the reason, the value decoded so far and the Completion.
Synchronous."""

from __future__ import annotations

from typing import Any

import msgspec

from llamaclient import (
    Assembler,
    ChatRequest,
    OutputError,
    ProtocolError,
    UserMessage,
)
from llamaclient._arguments.output import OutputDecoder
from llamaclient._turn.commands import Drain, Send
from llamaclient._turn.known import Known
from llamaclient._types.typed import output_type
from tests.support import streams
from tests.support.streams import ROLE, chunk, timings
from tests.turn.script import JSON, Answer, Fail, Server, config, drive, stream_body, turn


class City(msgspec.Struct):
    name: str


def whole(content: str) -> bytes:
    message = {"content": content}
    return msgspec.json.encode(
        {"id": "r", "choices": [{"finish_reason": "stop", "message": message}]}
    )


def test_a_budgeted_stream_drains_the_body_after_done() -> None:
    request = ChatRequest([UserMessage("q")], thinking_budget=100)
    known = Known()
    known.router = False
    chunks = [chunk(ROLE), chunk({"reasoning_content": "r"}, timings=timings(1)), chunk({}, "stop")]
    run = drive(turn(request, known=known), Server([Answer(body=[stream_body(chunks)])]))
    assert Drain(0.1) in run.commands
    assert run.done.completion is not None


def test_a_whole_answer_over_the_limit_names_its_status_and_keeps_its_start() -> None:
    body = whole("hello")
    run = drive(turn(conf=config(max_body_bytes=10)), Server([Answer(headers=JSON, body=[body])]))
    error = run.done.error
    assert isinstance(error, ProtocolError)
    assert error.raw == body[:10].decode()
    assert str(error) == (
        f"the body of an HTTP 200 answer is longer than max_body_bytes (10 bytes): "
        f"{body[:10].decode()!r}"
    )


def test_a_whole_typed_answer_that_is_not_the_type_carries_what_was_decoded() -> None:
    body = whole('{"nam": "x"}')
    run = drive(turn(output=output_type(City)), Server([Answer(headers=JSON, body=[body])]))
    error = run.done.error
    assert isinstance(error, OutputError)
    assert error.raw == '{"nam": "x"}'
    assert error.output == {"nam": "x"}
    assert error.partial == Assembler.from_response(body)
    assert str(error) == (
        'the answer is not a City: Object missing required field `name`: \'{"nam": "x"}\''
    )


def typed_stream(content: str, decoder: OutputDecoder) -> Any:
    t = turn(output=output_type(City), decoder=decoder, processors=[decoder.process])
    chunks = [chunk({"content": content}) if content else chunk(ROLE), chunk({}, "stop")]
    return drive(t, Server([Answer(body=[stream_body(chunks)])]))


def test_a_streamed_typed_answer_is_decoded_once() -> None:
    """The live decoder already took the text: the check at the end does not feed it again."""
    decoder = OutputDecoder()
    error = typed_stream('{"nam": "x"}', decoder).done.error
    assert isinstance(error, OutputError)
    assert error.output == {"nam": "x"}
    assert error.validation == "Object missing required field `name`"
    assert not decoder.failed


def test_an_empty_typed_answer_says_so_exactly() -> None:
    error = typed_stream("", OutputDecoder()).done.error
    assert isinstance(error, OutputError)
    assert error.validation == "the answer is empty"
    assert error.output is None


def test_an_unterminated_last_event_is_taken_at_the_end_of_the_body() -> None:
    """The body ends inside its last event (no blank line after it): that event counts."""
    chunks = [chunk(ROLE), chunk({"content": "hi"}, timings=timings(1))]
    last = msgspec.json.encode(chunk({}, "stop")).decode()
    body = stream_body(chunks, done=False) + f"data: {last}".encode()
    run = drive(turn(), Server([Answer(body=[body])]))
    assert run.done.completion is not None
    assert run.done.completion.content == "hi"


def test_a_break_after_several_reads_resumes_from_every_byte_received() -> None:
    body = stream_body(streams.reasoning_answer())
    pieces: list[bytes | Fail] = [body[:100], body[100:250], body[250:300], Fail("read", "cut")]
    run = drive(turn(), Server([Answer(body=pieces)], session=body))
    [get] = [s for s in run.sent(Send) if s.method == "GET"]
    assert get.path == "/v1/stream?conv_id=c0ffee&from=300"
    assert run.done.completion is not None
