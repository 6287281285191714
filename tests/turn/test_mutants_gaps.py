"""ChatTurn at the last edges the ``turn`` mutation run left open (``devtools/mutation.py
turn``, its survivors after the first round of ``test_mutants_*.py``): the exact words of an
effort the chat template cannot render, the partial a consumer has seen when a call's first
pieces (its id, then its name) are all unseen, and a whole (non-streamed) typed answer that
the live decoder, which ``stream.output()`` reads, still learns. Synchronous."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from llamaclient import ChatRequest, Completion, ToolCallDelta, UnsupportedInputError, UserMessage
from llamaclient._arguments.output import OutputDecoder
from llamaclient._turn.machine import ChatTurn
from llamaclient._types.events import ChatEvent
from llamaclient._types.typed import output_type
from tests.support.streams import ROLE, chunk
from tests.turn.script import JSON, Answer, Server, drive, stream_body, turn


class City(msgspec.Struct):
    name: str


def test_an_effort_the_template_cannot_render_is_refused_in_those_words() -> None:
    props = msgspec.json.encode({"chat_template_caps": {"supports_reasoning_effort": False}})
    request = ChatRequest([UserMessage("hi")], reasoning_effort="low")
    run = drive(turn(request), Server(calls={"/props": [(200, props)]}))
    error = run.done.error
    assert isinstance(error, UnsupportedInputError)
    words = (
        "reasoning_effort 'low' is not supported by this server's chat template "
        "(its /props chat_template_caps say supports_reasoning_effort is false)"
    )
    assert error.message == words
    assert str(error) == words


def piece(**call: object) -> dict[str, object]:
    return chunk({"tool_calls": [{"index": 0, **call}]})


def test_a_call_whose_id_and_name_pieces_are_both_unseen_is_not_in_the_partial() -> None:
    """The first piece of the call carries only its id, the second its name: with both in
    the batch the consumer has not taken, the call is dropped from the partial it has
    seen (and the id piece, met after the call is dropped, changes nothing)."""
    head = stream_body([chunk(ROLE), chunk({"content": "Let me look."})], done=False)
    call = stream_body([piece(id="a" * 32, type="function"), piece(function={"name": "ls"})], False)
    rest = stream_body([piece(function={"arguments": "{}"}), chunk({}, "tool_calls")])
    seen: list[tuple[list[ChatEvent], Completion]] = []

    def each(t: ChatTurn, out: Sequence[ChatEvent]) -> None:
        if any(isinstance(e, ToolCallDelta) for e in out):
            seen.append((list(out), t.partial_seen(out)))

    run = drive(turn(), Server([Answer(body=[head, call, rest])]), each=each)
    assert run.done.completion is not None
    assert [e.name for e in run.done.completion.tool_calls] == ["ls"]
    (out, partial), _ = seen
    assert [(e.id, e.name) for e in out if isinstance(e, ToolCallDelta)] == [
        ("a" * 32, None),
        (None, "ls"),
    ]
    assert partial.tool_calls == ()
    assert partial.content == "Let me look."


def test_a_whole_typed_answer_is_fed_to_the_live_decoder() -> None:
    """A 2xx answer that is not a stream brings its text at once: the turn feeds it to the
    plan's live decoder (the one ``stream.output()`` reads), not to one of its own."""
    decoder = OutputDecoder()
    message = {"content": '{"name": "Oslo"}'}
    body = msgspec.json.encode(
        {"id": "r", "choices": [{"finish_reason": "stop", "message": message}]}
    )
    t = turn(output=output_type(City), decoder=decoder, processors=[decoder.process])
    run = drive(t, Server([Answer(headers=JSON, body=[body])]))
    assert run.done.completion is not None
    assert run.done.completion.output == City("Oslo")
    assert decoder.partial() == {"name": "Oslo"}
