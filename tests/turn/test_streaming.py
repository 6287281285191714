"""ChatTurn, streaming: the body through SSE, the assembler and the processors; how a stream
ends (the body's end, ``[DONE]``, a payload that fails, a break without resume); the
thinking budget between payloads; a whole answer; the typed output. Synchronous: the
machine does no I/O, so a scripted server answers its commands (``tests/turn/script.py``).
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from llamaclient import (
    Assembler,
    ChatRequest,
    Content,
    FinishReason,
    InferError,
    OutputError,
    ProtocolError,
    Reasoning,
    ServerError,
    StalledError,
    StreamClosedEarlyError,
    ThinkingCapped,
    ThinkingOverrunError,
    UserMessage,
)
from llamaclient._arguments.output import OutputDecoder
from llamaclient._turn.commands import Call, Done, Drain, Read, ReadAll, Send
from llamaclient._turn.known import Known
from llamaclient._types.events import ChatEvent, OutputDelta
from llamaclient._types.typed import output_type
from tests.support import streams
from tests.support.streams import ROLE, chunk, timings
from tests.turn.script import (
    JSON,
    Answer,
    Fail,
    Server,
    answer,
    config,
    drive,
    split_events,
    status,
    stream_body,
    turn,
)

BODY = stream_body(streams.reasoning_answer())


def fold(chunks: list[dict[str, Any]]) -> Any:
    asm = Assembler()
    events: list[ChatEvent] = []
    for payload in streams.payloads(chunks):
        events += asm.push(payload)
    return events, asm.finish()


@pytest.mark.parametrize("name", sorted(streams.ALL))
def test_a_stream_read_event_by_event_ends_with_the_assemblers_completion(name: str) -> None:
    chunks = streams.ALL[name]()
    run = drive(turn(), Server([answer(chunks)]))
    events, completion = fold(chunks)
    assert run.events == events
    assert run.done == Done(completion)
    assert [type(c) for c in run.commands] == [Send] + [Read] * (len(chunks) + 1) + [Drain, Done]


def test_split_at_every_byte_the_events_and_the_completion_are_the_same() -> None:
    whole = drive(turn(), Server([Answer(body=[BODY])]))
    for cut in range(1, len(BODY)):
        run = drive(turn(), Server([Answer(body=[BODY[:cut], BODY[cut:]])]))
        assert run.events == whole.events, cut
        assert run.done == whole.done, cut


def test_fed_one_byte_at_a_time_too() -> None:
    whole = drive(turn(), Server([Answer(body=[BODY])]))
    run = drive(turn(), Server([Answer(body=[BODY[i : i + 1] for i in range(len(BODY))])]))
    assert (run.events, run.done) == (whole.events, whole.done)


def test_at_every_step_the_partial_is_the_fold_of_the_events_so_far() -> None:
    seen: list[ChatEvent] = []

    def check(t: Any, out: Any) -> None:
        seen.extend(out)
        partial = t.partial()
        text = "".join(e.text for e in seen if isinstance(e, Content))
        thought = "".join(e.text for e in seen if isinstance(e, Reasoning))
        if partial is not None:
            assert (partial.content or "") == text
            assert (partial.reasoning_content or "") == thought

    drive(turn(), Server([answer(streams.reasoning_answer())]), each=check)


def test_a_body_that_ends_after_the_finish_reason_without_done_is_whole() -> None:
    body = stream_body(streams.answer_only(), done=False)
    run = drive(turn(), Server([Answer(body=split_events(body))]))
    assert run.done.completion is not None
    assert run.done.completion.finish_reason is FinishReason.LENGTH
    assert not run.sent(Drain)


def test_a_body_that_ends_before_the_finish_reason_is_closed_early_with_the_partial() -> None:
    body = stream_body([chunk(ROLE), chunk({"content": "Hel"})], done=False)
    run = drive(turn(conversation_id=None), Server([Answer(body=split_events(body))]))
    error = run.done.error
    assert isinstance(error, StreamClosedEarlyError)
    assert error.partial is not None
    assert error.partial.content == "Hel"
    assert run.events == [Content("Hel")]


def test_done_without_a_finish_reason_is_closed_early() -> None:
    body = stream_body([chunk({"content": "x"})])
    run = drive(turn(), Server([Answer(body=[body])]))
    assert isinstance(run.done.error, StreamClosedEarlyError)


def test_a_payload_that_fails_comes_after_the_events_of_its_read() -> None:
    body = stream_body([chunk({"content": "a"})], done=False) + b"data: {not json\n\n"
    run = drive(turn(), Server([Answer(body=[body])]))
    assert run.events == [Content("a")]
    error = run.done.error
    assert isinstance(error, ProtocolError)
    assert error.partial is not None
    assert error.partial.content == "a"


def test_an_in_band_error_carries_the_partial() -> None:
    error = {"error": {"code": 500, "message": "Context size has been exceeded."}}
    body = stream_body([chunk({"content": "a"}), error], done=False)
    run = drive(turn(), Server([Answer(body=split_events(body))]))
    assert isinstance(run.done.error, ServerError)
    assert run.done.error.partial is not None
    assert run.done.error.partial.content == "a"


def test_an_event_over_max_event_bytes_is_a_protocol_error() -> None:
    body = b"data: " + b"x" * 200
    run = drive(turn(conf=config(max_event_bytes=64)), Server([Answer(body=[body])]))
    assert isinstance(run.done.error, ProtocolError)
    assert "max_event_bytes" in str(run.done.error)


def test_data_after_done_is_never_read() -> None:
    body = stream_body(streams.answer_only()) + b"data: junk\n\n"
    run = drive(turn(), Server([Answer(body=[body])]))
    assert run.done.completion is not None


@pytest.mark.parametrize(
    ("kind", "error"),
    [("stall", StalledError), ("protocol", ProtocolError), ("read", StreamClosedEarlyError)],
)
def test_a_break_without_resume_is_typed_by_its_kind(kind: str, error: type) -> None:
    body = split_events(stream_body([chunk({"content": "a"})], done=False))
    run = drive(turn(conversation_id=None), Server([Answer(body=[*body, Fail(kind)])]))
    failure = run.done.error
    assert isinstance(failure, error)
    assert isinstance(failure, InferError)
    assert failure.partial is not None
    assert failure.partial.content == "a"
    if kind == "stall":
        assert "no bytes for 120.0 s while streaming" in str(run.done.error)


def test_a_break_after_the_finish_reason_keeps_the_answer() -> None:
    """Only the usage chunk or [DONE] was lost: the answer is whole."""
    chunks = [chunk({"content": "a"}), chunk({}, "stop")]
    body = split_events(stream_body(chunks, done=False))
    for kind in ("stall", "read"):
        run = drive(turn(conversation_id=None), Server([Answer(body=[*body, Fail(kind)])]))
        assert run.done.completion is not None, kind
        assert run.done.completion.content == "a"


def test_processors_see_every_read() -> None:
    seen: list[list[ChatEvent]] = []

    def spy(events: list[ChatEvent]) -> list[ChatEvent]:
        seen.append(list(events))
        return [*events, Content("+")] if events else events

    run = drive(turn(processors=[spy]), Server([answer(streams.answer_only())]))
    assert Content("+") in run.events
    assert sum(len(batch) for batch in seen) == 2  # "Hel", "lo": one read each


# -- the thinking budget ------------------------------------------------------------------
def thinking(n: int) -> list[dict[str, Any]]:
    out = [chunk(ROLE)]
    out += [chunk({"reasoning_content": f"r{i} "}, timings=timings(i + 1)) for i in range(n)]
    return [*out, chunk({"content": "ok"}, timings=timings(n + 1)), chunk({}, "stop")]


def budgeted(limit: int, grace: int = 256) -> Any:
    request = ChatRequest([UserMessage("q")], thinking_budget=limit)
    known = Known()
    known.router = False  # a plain server: no look at /models
    return turn(request, conf=config(thinking_grace=grace, model="m"), known=known)


OK = (200, b'{"success":true}')


def test_past_the_budget_the_reasoning_is_ended_once_and_the_cap_is_shown_after_it() -> None:
    server = Server(
        [Answer(body=[stream_body(thinking(5))])], {"/v1/chat/completions/control": [OK]}
    )
    run = drive(budgeted(3), server)
    calls = run.sent(Call)
    assert len(calls) == 1
    assert msgspec.json.decode(calls[0].body) == {
        "id": streams.ID,
        "action": "reasoning_end",
        "model": "m",
    }
    events = run.events
    assert events.index(ThinkingCapped(3)) == 3  # after the third reasoning piece, in one read
    assert run.done.completion is not None
    assert run.done.completion.thinking_capped
    assert run.done.completion.content == "ok"


@pytest.mark.parametrize("refusal", [(200, b'{"success":false}'), (404, b""), Fail("connect")])
def test_a_refused_end_shows_no_cap(refusal: Any) -> None:
    server = Server([answer(thinking(5))], {"/v1/chat/completions/control": [refusal]})
    run = drive(budgeted(3), server)
    assert not any(isinstance(e, ThinkingCapped) for e in run.events)
    assert run.done.completion is not None
    assert not run.done.completion.thinking_capped


def test_past_the_grace_the_stream_stops_and_the_partial_says_it_was_capped() -> None:
    """The bug: an error after the cap carried ``thinking_capped`` False."""
    server = Server([answer(thinking(9))], {"/v1/chat/completions/control": [OK]})
    run = drive(budgeted(2, grace=3), server)
    error = run.done.error
    assert isinstance(error, ThinkingOverrunError)
    assert error.partial is not None
    assert error.partial.thinking_capped
    assert "6 tokens past a budget of 2" in str(error)


def test_a_server_error_after_the_cap_carries_a_capped_partial() -> None:
    chunks = thinking(3)[:4]
    body = stream_body([*chunks, {"error": {"code": 500, "message": "boom"}}], done=False)
    server = Server([Answer(body=split_events(body))], {"/v1/chat/completions/control": [OK]})
    run = drive(budgeted(2), server)
    assert isinstance(run.done.error, ServerError)
    assert run.done.error.partial is not None
    assert run.done.error.partial.thinking_capped


def test_refused_and_over_the_grace_says_so() -> None:
    server = Server([answer(thinking(9))], {"/v1/chat/completions/control": [(500, b"")]})
    run = drive(budgeted(2, grace=3), server)
    assert "(the server refused to end it)" in str(run.done.error)


def test_without_an_id_there_is_nothing_to_end() -> None:
    chunks = [{k: v for k, v in c.items() if k != "id"} for c in thinking(4)]
    run = drive(budgeted(2), Server([answer(chunks)]))
    assert "/v1/chat/completions/control" not in run.paths()


def test_budgeted_reads_end_like_the_others() -> None:
    for body, error in [
        (stream_body(thinking(1), done=False), None),
        (stream_body([chunk({"content": "x"})], done=False), StreamClosedEarlyError),
        (stream_body([chunk({"content": "x"})], done=False) + b"data: [\n\n", ProtocolError),
    ]:
        run = drive(budgeted(5), Server([Answer(body=[body])]))
        if error is None:
            assert run.done.completion is not None
        else:
            assert isinstance(run.done.error, error)
    after_done = stream_body(thinking(1)) + b"data: junk\n\n"
    assert drive(budgeted(5), Server([Answer(body=[after_done])])).done.completion is not None


def test_processors_see_the_budgeted_reads_too() -> None:
    seen: list[ChatEvent] = []

    def spy(events: list[ChatEvent]) -> list[ChatEvent]:
        seen.extend(events)
        return events

    t = budgeted(100)
    t.context.plan.processors.append(spy)
    run = drive(t, Server([answer(thinking(2))]))
    assert seen == run.events


def test_a_request_budget_of_zero_turns_the_configs_off() -> None:
    request = ChatRequest([UserMessage("q")], thinking_budget=0)
    server = Server([answer(thinking(5))], {"/v1/chat/completions/control": [OK]})
    run = drive(turn(request, conf=config(thinking_budget=1)), server)
    assert "/v1/chat/completions/control" not in run.paths()


# -- a whole answer -----------------------------------------------------------------------
WHOLE = msgspec.json.encode(
    {"id": "r", "choices": [{"index": 0, "finish_reason": "stop", "message": {"content": "hi"}}]}
)


def test_a_2xx_answer_that_is_not_a_stream_is_read_whole() -> None:
    run = drive(turn(), Server([Answer(headers=JSON, body=[WHOLE])]))
    assert [type(c) for c in run.commands] == [Send, ReadAll, Done]
    assert run.done.completion == Assembler.from_response(WHOLE)


def test_a_whole_answer_over_max_body_bytes_is_a_protocol_error() -> None:
    run = drive(turn(conf=config(max_body_bytes=10)), Server([Answer(headers=JSON, body=[WHOLE])]))
    assert isinstance(run.done.error, ProtocolError)
    assert "longer than max_body_bytes (10 bytes)" in str(run.done.error)


@pytest.mark.parametrize(("piece", "error"), [(Fail("stall"), StalledError), (b"{", ProtocolError)])
def test_a_whole_answer_that_breaks_or_is_not_json(piece: Any, error: type) -> None:
    run = drive(turn(), Server([Answer(headers=JSON, body=[piece])]))
    assert isinstance(run.done.error, error)


# -- the typed output ---------------------------------------------------------------------
class City(msgspec.Struct):
    name: str


def typed(chunks: list[dict[str, Any]], headers: dict[str, str] | None = None) -> Any:
    decoder = OutputDecoder()
    t = turn(output=output_type(City), decoder=decoder, processors=[decoder.process])
    body = stream_body(chunks)
    sent = Answer(body=[body]) if headers is None else Answer(headers=headers, body=[body])
    return drive(t, Server([sent]))


def test_a_typed_answer_is_validated_into_the_completion() -> None:
    chunks = [chunk({"content": '{"name": '}), chunk({"content": '"Paris"}'}), chunk({}, "stop")]
    run = typed(chunks)
    assert run.done.completion is not None
    assert run.done.completion.output == City("Paris")
    assert OutputDelta(("name",), "Paris", True) in run.events


@pytest.mark.parametrize(
    ("content", "finish", "why"),
    [
        ('{"nam": "x"}', "stop", "name"),
        ("", "stop", "the answer is empty"),
        ('{"name": "Pa', "length", "the answer reached max_tokens before its JSON closed"),
    ],
)
def test_an_answer_that_is_not_the_type_is_an_output_error(
    content: str, finish: str, why: str
) -> None:
    chunks = [chunk({"content": content}) if content else chunk(ROLE), chunk({}, finish)]
    error = typed(chunks).done.error
    assert isinstance(error, OutputError)
    assert why in error.validation
    assert error.partial is not None
    assert error.partial.finish_reason == FinishReason(finish)


def test_a_whole_typed_answer_is_decoded_too() -> None:
    body = msgspec.json.encode(
        {
            "id": "r",
            "choices": [{"finish_reason": "stop", "message": {"content": '{"name":"Rome"}'}}],
        }
    )
    t = turn(output=output_type(City))
    run = drive(t, Server([Answer(headers=JSON, body=[body])]))
    assert run.done.completion is not None
    assert run.done.completion.output == City("Rome")


@pytest.mark.parametrize(("asked", "kept"), [(0, 0), (1, 1), (None, 2)])
def test_the_turn_keeps_as_many_alternatives_as_the_request_asked(
    asked: int | None, kept: int
) -> None:
    """``top_logprobs=0`` goes as 1 (llama-server sends none for 0): the turn keeps none."""
    entry = {"token": "hi", "logprob": -0.1, "top_logprobs": [
        {"token": "hi", "logprob": -0.1}, {"token": "ho", "logprob": -2.5}]}  # fmt: skip
    said = chunk({"content": "hi"})
    said["choices"][0]["logprobs"] = {"content": [entry]}
    request = ChatRequest([UserMessage("hi")], top_logprobs=asked)
    run = drive(turn(request), Server([answer([chunk(ROLE), said, chunk({}, "stop")])]))
    (content,) = [e for e in run.events if isinstance(e, Content)]
    assert content.logprobs is not None
    assert len(content.logprobs[0].top_logprobs) == kept
    completion = run.done.completion
    assert completion is not None
    assert completion.logprobs == content.logprobs


def test_a_whole_answer_keeps_as_many_alternatives_as_the_request_asked() -> None:
    entry = {"token": "hi", "logprob": -0.1, "top_logprobs": [{"token": "hi", "logprob": -0.1}]}
    choice = {"finish_reason": "stop", "message": {"content": "hi"}}
    whole = {"id": "r", "choices": [{**choice, "logprobs": {"content": [entry]}}]}
    request = ChatRequest([UserMessage("hi")], top_logprobs=0)
    run = drive(turn(request), Server([status(200, msgspec.json.encode(whole))]))
    completion = run.done.completion
    assert completion is not None
    assert [t.top_logprobs for t in completion.logprobs or ()] == [()]
