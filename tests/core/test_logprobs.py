"""Token log-probabilities through the pure core: the events carry the tokens that wrote
them, ``Completion.logprobs`` is their fold, and each tool-call field (and typed-output
string) gets the confidence of the tokens that wrote it. Synchronous."""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llamaclient import (
    ArgumentDelta,
    Assembler,
    ChatRequest,
    Confidence,
    Config,
    Content,
    OutputDelta,
    ProtocolError,
    Reasoning,
    TokenLogprob,
    ToolCallDelta,
    ToolSchema,
    TopLogprob,
    UserMessage,
    build_body,
)
from llamaclient._arguments.output import OutputDecoder
from llamaclient._arguments.routing import LiveArguments
from llamaclient._types.events import ChatEvent
from llamaclient._types.logprobs import field_confidence, value_spans
from tests.support.reference import _spans, fold
from tests.support.streams import ROLE, chunk

READ = ToolSchema("read_file", "Read a file.", {"type": "object"})


def token(text: str, p: float, *alternatives: tuple[str, float]) -> dict[str, Any]:
    """One token as llama-server sends it (its non-standard ``id`` included)."""
    top = [{"id": 1, "token": text, "bytes": list(text.encode()), "logprob": math.log(p)}]
    top += [
        {"id": 2, "token": t, "bytes": list(t.encode()), "logprob": math.log(q)}
        for t, q in alternatives
    ]
    return {
        "id": 1,
        "token": text,
        "bytes": list(text.encode()),
        "logprob": math.log(p),
        "top_logprobs": top,
    }


def with_tokens(c: dict[str, Any], *tokens: dict[str, Any]) -> dict[str, Any]:
    c["choices"][0]["logprobs"] = {"content": list(tokens)}
    return c


def feed(
    payloads: list[dict[str, Any]], top: int | None = None
) -> tuple[Assembler, list[ChatEvent]]:
    asm = Assembler(top)
    events: list[ChatEvent] = []
    for p in payloads:
        events += asm.push(json.dumps(p))
    return asm, events


def carried(events: list[ChatEvent]) -> tuple[TokenLogprob, ...]:
    return tuple(
        t
        for e in events
        if isinstance(e, Reasoning | Content | ToolCallDelta) and e.logprobs
        for t in e.logprobs
    )


ANSWER = [
    chunk(ROLE),
    with_tokens(chunk({"reasoning_content": "Hm."}), token("Hm.", 0.9, ("So", 0.05))),
    with_tokens(chunk({"content": "Yes"}), token("Y", 0.5), token("es", 0.99)),
    chunk({"content": " plain"}),  # a payload without tokens: the fast path
    chunk({}, "stop"),
]


def test_each_text_event_carries_its_tokens_and_the_completion_has_them_all() -> None:
    asm, events = feed(ANSWER)
    texts = [e for e in events if isinstance(e, Reasoning | Content)]
    assert [e.text for e in texts] == ["Hm.", "Yes", " plain"]
    assert [len(e.logprobs or ()) for e in texts] == [1, 2, 0]
    assert texts[2].logprobs is None
    first = texts[0].logprobs[0]  # type: ignore[index]
    assert (first.token, first.id, first.bytes) == ("Hm.", 1, tuple(b"Hm."))
    assert first.probability == pytest.approx(0.9)
    assert [t.token for t in first.top_logprobs] == ["Hm.", "So"]
    done = asm.finish()
    assert done.logprobs == carried(events)
    assert done.content == "Yes plain"


def test_the_completion_matches_the_independent_reading() -> None:
    payloads = [json.dumps(p) for p in ANSWER]
    asm = Assembler()
    for p in payloads:
        asm.push(p)
    encoded = json.loads(msgspec.json.encode(asm.finish()))
    assert encoded["logprobs"] == fold(payloads)["logprobs"]


def test_a_stream_without_logprobs_has_none() -> None:
    asm, events = feed([chunk(ROLE), chunk({"content": "a"}), chunk({}, "stop")])
    assert asm.finish().logprobs is None
    assert all(getattr(e, "logprobs", None) is None for e in events)


def test_tokens_of_a_payload_without_text_go_on_the_next_text() -> None:
    held = with_tokens(chunk({}), token("<", 0.7))
    asm, events = feed([chunk(ROLE), held, with_tokens(chunk({"content": "x"}), token("x", 0.6))])
    (content,) = [e for e in events if isinstance(e, Content)]
    assert [t.token for t in content.logprobs or ()] == ["<", "x"]
    last = with_tokens(chunk({}, "stop"), token("</s>", 0.8))
    events += asm.push(json.dumps(last))
    assert [t.token for t in asm.finish().logprobs or ()] == ["<", "x", "</s>"]


def test_a_payload_that_fails_half_way_leaves_no_tokens_behind() -> None:
    asm, _ = feed([chunk(ROLE), with_tokens(chunk({"content": "ok"}), token("ok", 0.5))])
    bad = chunk(
        {"content": "more", "tool_calls": [{"index": 0, "id": "c", "function": {"name": "f"}}, 7]}
    )
    with pytest.raises(ProtocolError) as caught:
        asm.push(json.dumps(with_tokens(bad, token("more", 0.4))))
    partial = caught.value.partial
    assert partial is not None
    assert partial.content == "ok"
    assert [t.token for t in partial.logprobs or ()] == ["ok"]


def test_alternatives_beyond_the_request_are_dropped() -> None:
    payload = with_tokens(chunk({"content": "a"}), token("a", 0.5, ("b", 0.3)))
    _, events = feed([chunk(ROLE), payload], top=0)
    (content,) = [e for e in events if isinstance(e, Content)]
    assert content.logprobs is not None
    assert content.logprobs[0].top_logprobs == ()
    _, events = feed([chunk(ROLE), payload], top=1)
    assert len(next(e for e in events if isinstance(e, Content)).logprobs[0].top_logprobs) == 1  # type: ignore[index]


def test_malformed_logprobs_are_telemetry_not_an_error() -> None:
    payload = chunk({"content": "a"})
    payload["choices"][0]["logprobs"] = {"content": "nonsense"}
    asm, events = feed([chunk(ROLE), payload, chunk({}, "stop")])
    assert [e.text for e in events if isinstance(e, Content)] == ["a"]
    assert asm.finish().logprobs is None


def test_a_whole_response_keeps_its_tokens() -> None:
    body = {
        "id": "chatcmpl-1",
        "choices": [
            {
                "finish_reason": "stop",
                "message": {"content": "hi"},
                "logprobs": {"content": [token("hi", 0.25)]},
            }
        ],
    }
    done = Assembler.from_response(json.dumps(body))
    assert [t.probability for t in done.logprobs or ()] == [pytest.approx(0.25)]


# -- a tool call's fields ----------------------------------------------------------------------
ARGUMENTS = '{"path": "a\\"b.txt", "n": 12, "deep": {"k": [1, "x"]}, "e": ""}'


def split_call(text: str, cuts: list[int]) -> list[dict[str, Any]]:
    """The call's arguments cut at ``cuts``; piece ``i`` written by one token of probability
    ``1 / (i + 2)``."""
    bounds = [0, *cuts, len(text)]
    out = [chunk(ROLE)]
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        entry: dict[str, Any] = {"index": 0, "function": {"arguments": text[a:b]}}
        if i == 0:
            entry |= {"id": "call_1", "function": {"name": "read_file", "arguments": text[a:b]}}
        out.append(with_tokens(chunk({"tool_calls": [entry]}), token(text[a:b], 1 / (i + 2))))
    out.append(chunk({}, "tool_calls"))
    return out


def expected(text: str, cuts: list[int]) -> dict[str, Confidence]:
    """By hand: the tokens of every piece that overlaps the field's value (quotes in)."""
    bounds = [0, *cuts, len(text)]
    out = {}
    for key, (start, end) in _spans(text).items():
        ps = [
            1 / (i + 2)
            for i, (a, b) in enumerate(itertools.pairwise(bounds))
            if a < end and b > start and b > a
        ]
        out[key] = Confidence(min(ps), math.fsum(ps) / len(ps), len(ps))
    return out


@pytest.mark.parametrize("cut", range(1, len(ARGUMENTS)))
def test_each_field_gets_the_confidence_of_the_pieces_that_wrote_it_cut_anywhere(cut: int) -> None:
    cuts = sorted({cut, max(1, cut // 2)} - {len(ARGUMENTS)})
    asm, _events = feed(split_call(ARGUMENTS, cuts))
    (call,) = asm.finish().tool_calls
    assert call.arguments == ARGUMENTS
    assert call.confidence == expected(ARGUMENTS, cuts)
    assert set(call.confidence or {}) == {"path", "n", "deep", "e"}


@pytest.mark.parametrize("lenient", [False, True])
@pytest.mark.parametrize("cut", range(1, len(ARGUMENTS)))
def test_a_live_fields_last_piece_has_the_calls_confidence(cut: int, lenient: bool) -> None:
    cuts = sorted({cut, max(1, cut // 2)})
    asm = Assembler()
    live = LiveArguments(asm.tool_calls_so_far, True, lenient=lenient, tokens=asm.call_tokens)
    events: list[ChatEvent] = []
    for p in split_call(ARGUMENTS, cuts):
        events += live.process(asm.push(json.dumps(p)))
    (call,) = asm.finish().tool_calls
    done = {e.field: e for e in events if isinstance(e, ArgumentDelta) and e.done and not e.path}
    assert set(done) == {"path", "e"}
    for field, delta in done.items():
        assert delta.confidence == (call.confidence or {})[field]
    for delta in (e for e in events if isinstance(e, ArgumentDelta) and e.text):
        assert delta.logprobs  # the tokens of the piece that wrote it


def test_a_call_without_tokens_has_no_confidence() -> None:
    text = '{"a": 1}'
    asm, _ = feed(
        [
            chunk(ROLE),
            chunk(
                {
                    "tool_calls": [
                        {"index": 0, "id": "c", "function": {"name": "f", "arguments": text}}
                    ]
                }
            ),
            chunk({}, "tool_calls"),
        ]
    )
    assert asm.finish().tool_calls[0].confidence is None
    assert field_confidence("not json", [(0, 3, ())]) is None


# -- where the values are ----------------------------------------------------------------------
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
objects = st.dictionaries(st.text(max_size=6), json_values, max_size=5)
layouts = st.sampled_from(
    [(None, (", ", ": ")), (None, (",", ":")), (2, (",", ": ")), (None, (" ,  ", " : "))]
)


@given(objects, layouts)
def test_value_spans_find_every_value_as_a_decoder_and_a_character_walk_do(
    obj: dict[str, Any], layout: Any
) -> None:
    indent, separators = layout
    text = json.dumps(obj, indent=indent, separators=separators, ensure_ascii=False)
    spans = value_spans(text)
    assert spans == _spans(text)
    assert set(spans) == set(obj)
    for key, (start, end) in spans.items():
        assert json.loads(text[start:end]) == obj[key]
    for n in range(len(text)):  # a text that stops anywhere: the values complete so far
        for key, span in value_spans(text[:n], whole=False).items():
            if isinstance(obj[key], str | dict | list):
                assert span == spans[key]


@pytest.mark.parametrize(
    "text", ["", "[1]", '{"a" 1}', '{"a": 1}x', '{"a": 1,}', '{"a": tru}', "{1: 2}"]
)
def test_value_spans_of_what_is_not_one_object_are_empty(text: str) -> None:
    assert value_spans(text) == {}


# -- typed output --------------------------------------------------------------------------------
def test_an_output_string_gets_the_confidence_of_the_pieces_that_wrote_it() -> None:
    pieces = [('{"name": "Ad', 0.5), ('a", "age": 4', 0.25), ("2}", 1.0)]
    decoder = OutputDecoder()
    deltas: list[ChatEvent] = []
    for text, p in pieces:
        tokens = (TokenLogprob(text, math.log(p)),)
        deltas += decoder.process([Content(text, tokens)])
    out = [d for d in deltas if isinstance(d, OutputDelta)]
    name_done = next(d for d in out if d.path == ("name",) and d.done)
    assert name_done.confidence == Confidence(0.25, 0.375, 2)
    age = next(d for d in out if d.path == ("age",))
    assert (age.text, age.confidence) == ("42", Confidence(0.25, 0.625, 2))  # "4" and "2"
    assert all(d.logprobs for d in out)
    assert decoder.finish()


def test_a_nested_output_number_has_no_confidence_of_its_own() -> None:
    decoder = OutputDecoder()
    text = '{"point": {"x": 1, "y": 2}, "n": 3}'
    deltas = decoder.process([Content(text, (TokenLogprob(text, math.log(0.5)),))])
    sure = {d.path: d.confidence for d in deltas if isinstance(d, OutputDelta)}
    assert sure == {("point", "x"): None, ("point", "y"): None, ("n",): Confidence(0.5, 0.5, 1)}
    plain = OutputDecoder().process([Content(text)])
    assert all(d.confidence is None for d in plain if isinstance(d, OutputDelta))


# -- the request -----------------------------------------------------------------------------------
def body(**fields: Any) -> dict[str, Any]:
    sent: dict[str, Any] = json.loads(
        build_body(Config("http://llama.test"), ChatRequest([UserMessage("hi")], **fields))
    )
    return sent


def test_top_logprobs_is_sent_as_openai_asks_and_as_n_probs_with_tools() -> None:
    assert {k: body(top_logprobs=3).get(k) for k in ("logprobs", "top_logprobs", "n_probs")} == {
        "logprobs": True,
        "top_logprobs": 3,
        "n_probs": None,
    }
    with_tools = body(top_logprobs=3, tools=[READ])
    assert (with_tools.get("logprobs"), with_tools["n_probs"]) == (None, 3)
    assert body(top_logprobs=0, tools=[READ])["n_probs"] == 1  # 0 sends nothing at all
    assert body(top_logprobs=0)["top_logprobs"] == 1
    assert "logprobs" not in body()
    assert "n_probs" not in body()
    whole = json.loads(
        build_body(
            Config("http://llama.test"),
            ChatRequest([UserMessage("hi")], top_logprobs=2, tools=[READ]),
            stream=False,
        )
    )
    assert (whole["logprobs"], whole["top_logprobs"]) == (True, 2)  # refused only while streaming


@pytest.mark.parametrize("bad", [-1, 21, 2.0, True, "3"])
def test_top_logprobs_out_of_range_is_refused(bad: Any) -> None:
    with pytest.raises(ValueError, match="top_logprobs"):
        ChatRequest([UserMessage("hi")], top_logprobs=bad)


def test_empty_logprobs_and_a_name_only_piece() -> None:
    empty = chunk({"content": "a"})
    empty["choices"][0]["logprobs"] = {"content": []}
    header = {"index": 0, "id": "c", "function": {"name": "f"}}
    named = with_tokens(chunk({"tool_calls": [header]}), token("<call f>", 0.9))
    args = {"index": 0, "function": {"arguments": '{"a": 1}'}}
    asm, events = feed(
        [chunk(ROLE), empty, named, with_tokens(chunk({"tool_calls": [args]}), token("x", 0.5))]
    )
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert [len(e.logprobs or ()) for e in deltas] == [1, 1]  # the name's piece keeps its own
    events += asm.push(json.dumps(chunk({}, "tool_calls")))
    (call,) = asm.finish().tool_calls
    assert call.confidence == {"a": Confidence(0.5, 0.5, 1)}  # the name's token wrote no field
    assert [t.token for t in asm.finish().logprobs or ()] == ["<call f>", "x"]


def test_confidence_of_nothing_and_a_field_no_piece_wrote() -> None:
    assert Confidence.of([]) is None
    assert field_confidence('{"a": 1}', []) is None
    one = (TokenLogprob("x", math.log(0.5), top_logprobs=(TopLogprob("x", math.log(0.5)),)),)
    assert one[0].top_logprobs[0].probability == pytest.approx(0.5)
    found = field_confidence('{"a": 1, "b": 2}', [(0, 7, one)])
    assert found == {"a": Confidence(0.5, 0.5, 1)}  # "b" at 13-14: no piece there


@pytest.mark.parametrize("arguments", ['{"a": 1} {', '{"a": 1', '{"a": 1,}'])
def test_arguments_that_are_not_one_object_get_no_confidence(arguments: str) -> None:
    payloads = [
        chunk(ROLE),
        with_tokens(
            chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f"}}]}),
            token("<f>", 0.9),
        ),
        with_tokens(
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]}),
            token(arguments, 0.5),
        ),
        chunk({}, "tool_calls"),
    ]
    asm, _ = feed(payloads)
    (call,) = asm.finish().tool_calls
    assert call.arguments == arguments
    assert call.confidence is None  # a field that seems complete in a broken text: none


# -- the assembler's edges the mutation run found open ---------------------------------------
def test_call_tokens_of_a_call_that_never_came_are_none() -> None:
    asm, _ = feed(split_call('{"a": 1}', [3]))
    assert [s for s, _, _ in asm.call_tokens(0)] == [0, 3]
    assert asm.call_tokens(1) == []
    assert asm.call_tokens(7) == []


def test_a_whole_response_keeps_as_many_alternatives_as_asked() -> None:
    body = {
        "id": "chatcmpl-1",
        "choices": [
            {
                "finish_reason": "stop",
                "message": {"content": "hi"},
                "logprobs": {"content": [token("hi", 0.25, ("ho", 0.5))]},
            }
        ],
    }
    whole = Assembler.from_response(json.dumps(body), top_logprobs=0)
    assert [t.top_logprobs for t in whole.logprobs or ()] == [()]
    kept = Assembler.from_response(json.dumps(body))
    assert [len(t.top_logprobs) for t in kept.logprobs or ()] == [2]


def test_the_cache_report_counts_the_whole_prompt() -> None:
    timed = chunk({}, "stop", timings={"prompt_n": 3, "cache_n": 17, "predicted_n": 1})
    asm, _ = feed([chunk(ROLE), chunk({"content": "a"}), timed])
    cache = asm.finish().cache
    assert cache is not None
    assert (cache.prompt, cache.reused) == (20, 17)
