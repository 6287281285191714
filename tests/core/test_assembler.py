"""The assembler: seed 000's six rules, and the tolerance real servers need."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llamaclient import (
    Assembler,
    CacheReport,
    Completion,
    Content,
    FinishReason,
    Progress,
    ProtocolError,
    Reasoning,
    ServerError,
    StreamClosedEarlyError,
    ToolCall,
    ToolCallDelta,
    ToolCallDone,
)
from llamaclient._types.completion import Timings, Usage
from llamaclient._types.events import ChatEvent
from tests.support import streams
from tests.support.nesting import TOO_DEEP
from tests.support.reference import fold
from tests.support.streams import ROLE, chunk, timings


def feed(payloads: list[str]) -> tuple[Assembler, list[ChatEvent]]:
    asm = Assembler()
    events: list[ChatEvent] = []
    for p in payloads:
        events.extend(asm.push(p))
    return asm, events


def as_json(completion: Completion) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(msgspec.json.encode(completion))
    out.pop("reasoning_tokens")
    out.pop("thinking_capped")
    out.pop("output")  # typed output: not part of the wire
    return out


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


# -- against the independent reference decoder --
@pytest.mark.parametrize("name", sorted(streams.ALL))
def test_matches_reference_decoder(name: str) -> None:
    payloads = streams.payloads(streams.ALL[name]())
    asm, _ = feed(payloads)
    assert as_json(asm.finish()) == fold(payloads)


@pytest.mark.parametrize("name", sorted(streams.ALL))
def test_str_and_bytes_payloads_agree(name: str) -> None:
    payloads = streams.payloads(streams.ALL[name]())
    a, ev_a = feed(payloads)
    b, ev_b = feed([p.encode() for p in payloads])  # type: ignore[misc]
    assert ev_a == ev_b
    assert a.finish() == b.finish()


# -- rule 1: event order --
def test_event_order_within_one_chunk() -> None:
    asm = Assembler()
    payload = chunk(
        {
            "reasoning_content": "r",
            "content": "c",
            "tool_calls": [{"index": 0, "id": "i", "function": {"name": "f", "arguments": "{"}}],
        },
        prompt_progress={"total": 5, "cache": 1, "processed": 5, "time_ms": 2},
    )
    assert asm.push(dumps(payload)) == [
        Progress(5, 1, 5, 2.0),
        Reasoning("r"),
        Content("c"),
        ToolCallDelta(0, "i", "f", "{"),
    ]


def test_empty_and_null_text_gives_no_event() -> None:
    asm = Assembler()
    assert asm.push(dumps(chunk(ROLE))) == []
    assert asm.push(dumps(chunk({"content": "", "reasoning_content": None}))) == []
    assert asm.push(dumps(chunk({}))) == []


def test_tool_call_delta_carries_piece_values() -> None:
    _, events = feed(streams.payloads(streams.tool_calls()))
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert deltas[0] == ToolCallDelta(0, "a" * 32, "list_dir", '{"path": "."}')
    assert deltas[2] == ToolCallDelta(1, None, None, '"path": ')


def test_tool_call_done_is_eager() -> None:
    _, events = feed(streams.payloads(streams.tool_calls()))
    kinds = [
        (type(e).__name__, getattr(e, "index", None))
        for e in events
        if isinstance(e, (ToolCallDelta, ToolCallDone))
    ]
    assert kinds == [
        ("ToolCallDelta", 0),
        ("ToolCallDone", 0),
        ("ToolCallDelta", 1),
        ("ToolCallDelta", 1),
        ("ToolCallDelta", 1),
        ("ToolCallDone", 1),
    ]
    done = [e for e in events if isinstance(e, ToolCallDone)]
    assert done[0].call == ToolCall("a" * 32, "list_dir", '{"path": "."}')
    assert done[1].call == ToolCall("b" * 32, "read_file", '{"path": "notes.txt"}')


# -- rule 2: concatenation --
def test_concatenation_and_none() -> None:
    asm, _ = feed(streams.payloads(streams.reasoning_answer()))
    c = asm.finish()
    assert c.reasoning_content == "Let me check é ✓."
    assert c.content == "Done — 好."
    assert c.tool_calls == ()
    asm, _ = feed(streams.payloads(streams.tool_calls()))
    assert asm.finish().content is None


def test_arguments_are_raw_text_never_reserialised() -> None:
    args = '{ "b" : 1.50,\n"a":"\\u00e9"}'
    asm = Assembler()
    asm.push(
        dumps(
            chunk(
                {
                    "tool_calls": [
                        {"index": 0, "id": "x", "function": {"name": "f", "arguments": args[:7]}}
                    ]
                }
            )
        )
    )
    asm.push(dumps(chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[7:]}}]})))
    asm.push(dumps(chunk({}, "tool_calls")))
    assert asm.finish().tool_calls[0].arguments == args


def test_id_and_name_repeated_on_every_piece_are_kept_once() -> None:
    asm = Assembler()
    for part in ("{", '"a"', ":1}"):
        asm.push(
            dumps(
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "f", "arguments": part},
                            }
                        ]
                    }
                )
            )
        )
    asm.push(dumps(chunk({}, "tool_calls")))
    assert asm.finish().tool_calls == (ToolCall("call_1", "f", '{"a":1}'),)


def test_name_that_grows_is_replaced_not_appended() -> None:
    asm = Assembler()
    asm.push(dumps(chunk({"tool_calls": [{"index": 0, "id": "i", "function": {"name": "read"}}]})))
    asm.push(
        dumps(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "i",
                            "function": {"name": "read_file", "arguments": "{}"},
                        }
                    ]
                }
            )
        )
    )
    asm.push(dumps(chunk({}, "tool_calls")))
    assert asm.finish().tool_calls[0].name == "read_file"


def test_pieces_without_index_new_id_means_new_call() -> None:
    asm = Assembler()
    asm.push(
        dumps(chunk({"tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{"}}]}))
    )
    asm.push(dumps(chunk({"tool_calls": [{"function": {"arguments": "}"}}]})))
    asm.push(
        dumps(chunk({"tool_calls": [{"id": "c2", "function": {"name": "g", "arguments": "{"}}]}))
    )
    asm.push(dumps(chunk({"tool_calls": [{"id": "c2", "function": {"arguments": "}"}}]})))
    asm.push(dumps(chunk({}, "tool_calls")))
    assert asm.finish().tool_calls == (ToolCall("c1", "f", "{}"), ToolCall("c2", "g", "{}"))


def test_server_extension_fields_are_kept() -> None:
    asm = Assembler()
    asm.push(
        dumps(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "i",
                            "type": "function",
                            "extra_content": {"google": {"thought_signature": "s"}},
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ]
                }
            )
        )
    )
    asm.push(dumps(chunk({}, "tool_calls")))
    call = asm.finish().tool_calls[0]
    assert call.extra == {"extra_content": {"google": {"thought_signature": "s"}}}


# -- rule 3: latest timings; usage after finish --
def test_latest_timings_and_usage_chunk_after_finish() -> None:
    asm, _ = feed(streams.payloads(streams.reasoning_answer()))
    c = asm.finish()
    assert c.timings is not None
    assert c.timings.predicted_n == 7
    assert c.usage.prompt_tokens == 20
    assert c.usage.completion_tokens == 7
    assert c.usage.cached_tokens == 0
    assert c.model == "tiny.gguf"


def test_usage_is_none_where_the_server_did_not_say() -> None:
    asm, _ = feed(streams.payloads(streams.answer_only()))
    c = asm.finish()
    assert (c.usage.prompt_tokens, c.usage.completion_tokens, c.usage.cached_tokens) == (
        None,
        None,
        None,
    )


# -- rule 4: reasoning tokens --
def test_reasoning_tokens_follow_predicted_n_while_reasoning() -> None:
    asm = Assembler()
    seen = []
    for p in streams.payloads(streams.reasoning_answer(), done=False):
        asm.push(p)
        seen.append((asm.reasoning_tokens, asm.in_reasoning))
    assert seen[3] == (2, True)
    assert seen[4] == (3, True)
    assert seen[5] == (3, False)  # the answer started: the count stops
    assert asm.finish().reasoning_tokens == 3


def test_tool_piece_ends_reasoning() -> None:
    asm = Assembler()
    asm.push(dumps(chunk({"reasoning_content": "x"}, timings=timings(1))))
    assert asm.in_reasoning
    asm.push(dumps(chunk({"tool_calls": [{"index": 0, "id": "i", "function": {"name": "f"}}]})))
    assert asm.in_reasoning is False


def test_reasoning_tokens_without_timings_count_payloads() -> None:
    asm = Assembler()
    for _ in range(3):
        asm.push(dumps(chunk({"reasoning_content": "x"})))
    assert asm.reasoning_tokens == 3


def test_reasoning_tokens_when_timings_start_late_or_stop() -> None:
    asm = Assembler()
    asm.push(dumps(chunk({"reasoning_content": "x"})))
    asm.push(dumps(chunk({"reasoning_content": "x"})))
    assert asm.reasoning_tokens == 2  # no timings yet: payloads counted
    asm.push(dumps(chunk({"reasoning_content": "x"}, timings=timings(7))))
    assert asm.reasoning_tokens == 7  # the server's count wins once it comes
    asm.push(dumps(chunk({"reasoning_content": "x"})))  # a payload without: the latest stays
    assert asm.reasoning_tokens == 7
    asm.push(dumps(chunk({"content": "y"}, timings=timings(9))))
    assert asm.reasoning_tokens == 7  # answer text: the count stops
    partial = asm.partial()
    assert partial is not None
    assert partial.timings is not None
    assert partial.timings.predicted_n == 9


def test_malformed_timings_count_as_none() -> None:
    # Timings are the server's telemetry, decoded only when asked for: a bad one is not a
    # protocol error (it never stops the answer), it is simply not there.
    asm = Assembler()
    good = dumps(chunk({"reasoning_content": "x"}, timings=timings(5)))
    assert asm.push(good) == [Reasoning("x")]
    bad = dumps(chunk({"reasoning_content": "z"}, timings={"predicted_n": "3"}))
    assert asm.push(bad) == [Reasoning("z")]
    assert asm.reasoning_tokens == 2  # the latest timings are bad: payloads counted
    asm.push(dumps(chunk({}, finish="stop")))
    completion = asm.finish()
    assert (completion.timings, completion.reasoning_content) == (None, "xz")
    assert asm.push(dumps(chunk({}, timings=[1]))) == []  # not even an object
    assert asm.finish().timings is None


# -- rule 5: finish errors --
def test_finish_without_finish_reason_is_closed_early_with_partial() -> None:
    asm, _ = feed(streams.payloads(streams.reasoning_answer()[:6], done=False))
    with pytest.raises(StreamClosedEarlyError) as info:
        asm.finish()
    partial = info.value.partial
    assert partial is not None
    assert partial.content == "Done"
    assert partial.reasoning_content == "Let me check é ✓."
    assert partial.finish_reason is None


def test_finish_without_id_is_protocol_error() -> None:
    asm = Assembler()
    asm.push('{"choices":[{"index":0,"finish_reason":"stop","delta":{"content":"x"}}]}')
    with pytest.raises(ProtocolError, match="id"):
        asm.finish()


def test_tool_call_without_name_is_protocol_error() -> None:
    asm = Assembler()
    asm.push(
        dumps(chunk({"tool_calls": [{"index": 0, "id": "i", "function": {"arguments": "{"}}]}))
    )
    with pytest.raises(ProtocolError, match="name"):
        asm.push(dumps(chunk({}, "tool_calls")))


def test_tool_call_without_id_is_protocol_error_at_finish() -> None:
    asm = Assembler()
    asm.push(dumps(chunk({"tool_calls": [{"index": 0, "function": {"name": "f"}}]})))
    with pytest.raises(ProtocolError, match="never got an id"):
        asm.push(dumps(chunk({}, "stop")))


# -- rule 6: push errors --
@pytest.mark.parametrize(
    "payload",
    [
        "not json",
        "[1, 2]",
        '"text"',
        "42",
        "",
        '{"choices": 5}',
        '{"choices":[{"index":0,"delta":{"content":5}}]}',
        '{"id":"x","choices":[{"index":0,"delta":{"tool_calls":[5]}}]}',
    ],
)
def test_not_a_chunk_is_protocol_error(payload: str) -> None:
    with pytest.raises(ProtocolError) as info:
        Assembler().push(payload)
    assert info.value.raw == payload


def test_unknown_finish_reason() -> None:
    with pytest.raises(ProtocolError, match="finish_reason 'eos'"):
        Assembler().push(dumps(chunk({}, "eos")))


def test_a_call_numbered_past_the_calls_so_far_is_the_next_call() -> None:
    """Anthropic's OpenAI endpoint numbers its first call 1 (after the text block 0): a
    number not seen yet is the next call, and the same number that call again; the events
    keep our own numbering."""
    asm = Assembler()
    asm.push(dumps(chunk({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f"}}]})))
    asm.push(dumps(chunk({"tool_calls": [{"index": 1, "id": "b", "function": {"name": "g"}}]})))
    events = asm.push(
        dumps(chunk({"tool_calls": [{"index": 5, "id": "c", "function": {"name": "h"}}]}))
    )
    assert events[-1] == ToolCallDelta(2, "c", "h", "")
    more = asm.push(dumps(chunk({"tool_calls": [{"index": 5, "function": {"arguments": "{}"}}]})))
    assert more == [ToolCallDelta(2, None, None, "{}")]
    again = asm.push(dumps(chunk({"tool_calls": [{"index": 1, "function": {"arguments": "x"}}]})))
    assert again == [ToolCallDelta(1, None, None, "x")]
    assert [c[0] for c in asm.tool_calls_so_far()] == ["f", "g", "h"]


def test_own_numbers_after_the_switch_keep_the_calls_apart() -> None:
    """After a server's own number (5) the next new number (1) is a new call even though it
    is the number our events gave the call numbered 5; call 0 goes on as call 0; a negative
    number is refused with the payload."""
    asm = Assembler()

    def piece(index: int, **entry: Any) -> list[ChatEvent]:
        return asm.push(dumps(chunk({"tool_calls": [{"index": index, **entry}]})))

    piece(0, id="a", function={"name": "f"})
    assert piece(5, id="b", function={"name": "g"})[-1] == ToolCallDelta(1, "b", "g", "")
    assert piece(1, id="c", function={"name": "h"})[-1] == ToolCallDelta(2, "c", "h", "")
    assert piece(0, function={"arguments": "{}"}) == [ToolCallDelta(0, None, None, "{}")]
    bad = dumps(chunk({"tool_calls": [{"index": -1, "function": {"arguments": "x"}}]}))
    with pytest.raises(ProtocolError, match="-1 is negative") as info:
        asm.push(bad)
    assert info.value.raw == bad


def test_the_first_call_numbered_one() -> None:
    asm = Assembler()
    first = asm.push(
        dumps(chunk({"tool_calls": [{"index": 1, "id": "t", "function": {"name": "read"}}]}))
    )
    asm.push(dumps(chunk({"tool_calls": [{"index": 1, "function": {"arguments": '{"a":1}'}}]})))
    asm.push(dumps(chunk({}, "tool_calls")))
    assert first == [ToolCallDelta(0, "t", "read", "")]
    assert asm.finish().tool_calls == (ToolCall("t", "read", '{"a":1}'),)


def test_choice_index_other_than_zero() -> None:
    with pytest.raises(ProtocolError, match="n=1"):
        Assembler().push('{"id":"x","choices":[{"index":1,"delta":{"content":"a"}}]}')


def test_data_after_done() -> None:
    asm = Assembler()
    asm.push("[DONE]")
    with pytest.raises(ProtocolError, match="after \\[DONE\\]"):
        asm.push(dumps(chunk({"content": "x"})))


def test_done_is_matched_exactly_not_by_prefix() -> None:
    with pytest.raises(ProtocolError):
        Assembler().push("[DONE]xyz")


# -- in-band errors --
def test_in_band_error_raises_server_error_with_partial() -> None:
    asm, _ = feed(streams.payloads(streams.reasoning_answer()[:6], done=False))
    error = (
        '{"error":{"code":500,"message":"Context size has been exceeded.","type":"server_error"}}'
    )
    with pytest.raises(ServerError) as info:
        asm.push(error)
    exc = info.value
    assert (exc.code, exc.message, exc.type) == (
        500,
        "Context size has been exceeded.",
        "server_error",
    )
    assert exc.partial is not None
    assert exc.partial.content == "Done"
    with pytest.raises(ProtocolError):
        asm.push(dumps(chunk({"content": "more"})))


def test_in_band_error_as_plain_string() -> None:
    with pytest.raises(ServerError, match="boom"):
        Assembler().push('{"error":"boom"}')


# -- non-streamed bodies go through the same rules --
def test_from_response_equals_streamed_completion() -> None:
    payloads = streams.payloads(streams.tool_calls())
    asm, _ = feed(payloads)
    streamed = asm.finish()
    body = {
        "choices": [
            {
                "finish_reason": "tool_calls",
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "reasoning_content": "Files.",
                    "tool_calls": [
                        {
                            "type": "function",
                            "function": {"name": "list_dir", "arguments": '{"path": "."}'},
                            "id": "a" * 32,
                        },
                        {
                            "type": "function",
                            "function": {"name": "read_file", "arguments": '{"path": "notes.txt"}'},
                            "id": "b" * 32,
                        },
                    ],
                },
            }
        ],
        "created": 1,
        "model": "tiny.gguf",
        "id": streams.ID,
        "object": "chat.completion",
        "timings": timings(17),
    }
    whole = Assembler.from_response(dumps(body))
    assert whole.tool_calls == streamed.tool_calls
    assert whole.reasoning_content == streamed.reasoning_content
    assert whole.finish_reason is FinishReason.TOOL_CALLS
    assert whole.timings == streamed.timings


def test_from_response_error_body() -> None:
    with pytest.raises(ServerError, match="bad"):
        Assembler.from_response('{"error":{"code":400,"message":"bad","type":"x"}}')


# -- property: extra fields at every level never change the result --
_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5))
_json = st.recursive(
    _json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
_KNOWN = {
    "id",
    "model",
    "choices",
    "timings",
    "usage",
    "prompt_progress",
    "error",
    "index",
    "finish_reason",
    "delta",
    "content",
    "reasoning_content",
    "tool_calls",
    "function",
    "name",
    "arguments",
    "cache_n",
    "prompt_n",
    "predicted_n",
    "prompt_ms",
    "prompt_per_second",
    "predicted_ms",
    "predicted_per_second",
    "prompt_tokens",
    "completion_tokens",
    "prompt_tokens_details",
    "cached_tokens",
    "total",
    "cache",
    "processed",
    "time_ms",
    "type",
}


def _sprinkle(obj: Any, extra: dict[str, Any], path: str = "") -> Any:
    if isinstance(obj, dict):
        out = {k: _sprinkle(v, extra, path + "." + k) for k, v in obj.items()}
        for k, v in extra.items():
            if k not in _KNOWN:
                out.setdefault(k, v)
        return out
    if isinstance(obj, list):
        return [_sprinkle(v, extra, path) for v in obj]
    return obj


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(sorted(streams.ALL)),
    extra=st.dictionaries(st.text(min_size=1, max_size=6), _json, max_size=3),
)
def test_extra_fields_at_every_level_change_nothing(name: str, extra: dict[str, Any]) -> None:
    chunks = streams.ALL[name]()
    plain = streams.payloads(chunks)
    noisy = [dumps(_sprinkle(c, extra)) for c in chunks] + ["[DONE]"]
    a, ev_a = feed(plain)
    b, ev_b = feed(noisy)
    kept = {k: v for k, v in extra.items() if k not in _KNOWN}
    # Extra fields on a tool-call entry are server extensions: kept, to be sent back.
    assert [_without_extra(e) for e in ev_a] == [_without_extra(e) for e in ev_b]
    ca, cb = a.finish(), b.finish()
    assert all(c.extra == kept for c in cb.tool_calls)
    assert [_without_extra_call(c) for c in ca.tool_calls] == [
        _without_extra_call(c) for c in cb.tool_calls
    ]
    assert msgspec.structs.replace(ca, tool_calls=()) == msgspec.structs.replace(cb, tool_calls=())


def _without_extra_call(call: ToolCall) -> ToolCall:
    return msgspec.structs.replace(call, extra={})


def _without_extra(event: ChatEvent) -> ChatEvent:
    if isinstance(event, ToolCallDone):
        return ToolCallDone(event.index, _without_extra_call(event.call))
    return event


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_only_raise_protocol_error(data: bytes) -> None:
    asm = Assembler()
    try:
        asm.push(data)
        asm.finish()
    except (ProtocolError, ServerError, StreamClosedEarlyError):
        pass


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        _json_leaf,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.dictionaries(st.sampled_from(sorted(_KNOWN)), inner, max_size=4),
        ),
        max_leaves=12,
    )
)
def test_random_json_shapes_only_raise_our_errors(obj: Any) -> None:
    with contextlib.suppress(ProtocolError, ServerError):
        Assembler().push(dumps(obj))


# -- partials: what an error carries -------------------------------------------------------
def _tool(
    index: int | None = 0, id: str | None = None, name: str | None = None, args: str | None = None
) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    if index is not None:
        entry["index"] = index
    if id is not None:
        entry["id"] = id
    function = {k: v for k, v in (("name", name), ("arguments", args)) if v is not None}
    if function:
        entry["function"] = function
    return entry


def _tools(*entries: dict[str, Any], **extra: Any) -> str:
    return dumps(chunk({"tool_calls": list(entries)}, **extra))


def test_partial_is_none_before_any_chunk() -> None:
    asm = Assembler()
    assert asm.partial() is None
    assert asm.partial(thinking_capped=True) is None
    asm.push("[DONE]")
    assert asm.partial() is None
    with pytest.raises(StreamClosedEarlyError) as info:
        asm.finish()
    assert info.value.partial is None


def test_error_on_the_first_payload_has_no_partial() -> None:
    with pytest.raises(ProtocolError) as info:
        Assembler().push("nope")
    assert info.value.partial is None
    with pytest.raises(ServerError) as error:
        Assembler().push('{"error":"boom"}')
    assert error.value.partial is None


def test_partial_after_a_chunk_without_text() -> None:
    asm = Assembler()
    asm.push(dumps(chunk(ROLE)))
    partial = asm.partial()
    assert partial == Completion(
        id=streams.ID,
        model="tiny.gguf",
        content=None,
        reasoning_content=None,
        tool_calls=(),
        finish_reason=None,
        timings=None,
        usage=Usage(),
        reasoning_tokens=0,
        thinking_capped=False,
    )


def test_partial_carries_thinking_capped() -> None:
    asm = Assembler()
    asm.push(dumps(chunk({"reasoning_content": "hm"})))
    capped = asm.partial(thinking_capped=True)
    assert capped is not None
    assert capped.thinking_capped is True
    assert (capped.reasoning_content, capped.reasoning_tokens) == ("hm", 1)
    plain = asm.partial()
    assert plain is not None
    assert plain.thinking_capped is False
    with pytest.raises(StreamClosedEarlyError) as info:
        asm.finish(thinking_capped=True)
    assert info.value.partial is not None
    assert info.value.partial.thinking_capped is True
    with pytest.raises(StreamClosedEarlyError) as info:
        asm.finish()
    assert info.value.partial is not None
    assert info.value.partial.thinking_capped is False


def test_finish_carries_thinking_capped() -> None:
    payloads = streams.payloads(streams.reasoning_answer())
    assert feed(payloads)[0].finish(thinking_capped=True).thinking_capped is True
    assert feed(payloads)[0].finish().thinking_capped is False


def test_error_partial_holds_the_tool_calls_so_far() -> None:
    asm = Assembler()
    asm.push(_tools({**_tool(0, "a", "f", "{}"), "extra_content": {"s": 1}}))
    asm.push(_tools(_tool(1, "b", "g", '{"x":')))
    asm.push(_tools(_tool(1, None, None, "2")))
    asm.push(_tools(_tool(2, None, None, "[1")))  # ends call 1; call 2 has no id nor name yet
    asm.push(_tools(_tool(2, None, None, ",")))
    assert asm.tool_calls_so_far() == [
        ("f", "{}", True),
        ("g", '{"x":2', True),
        (None, "[1,", False),
    ]
    with pytest.raises(ServerError) as info:
        asm.push('{"error":{"code":500,"message":"boom","type":"server_error"}}')
    partial = info.value.partial
    assert partial is not None
    assert partial.tool_calls == (
        ToolCall("a", "f", "{}", {"extra_content": {"s": 1}}),
        ToolCall("b", "g", '{"x":2'),
        ToolCall("", "", "[1,"),
    )
    assert partial.finish_reason is None


def test_protocol_error_partial_holds_the_output_so_far() -> None:
    asm = Assembler()
    asm.push(dumps(chunk({"content": "Hi"}, timings=timings(3))))
    asm.push(dumps(chunk(None, usage=streams.USAGE)))
    asm.push(_tools(_tool(0, "a", "f", "{")))
    with pytest.raises(ProtocolError) as info:
        asm.push(dumps(chunk({}, "eos")))
    partial = info.value.partial
    assert partial is not None
    assert (partial.id, partial.model, partial.content) == (streams.ID, "tiny.gguf", "Hi")
    assert partial.tool_calls == (ToolCall("a", "f", "{"),)
    assert partial.timings is not None
    assert partial.timings.predicted_n == 3
    assert partial.usage == Usage(20, 7, 0)
    # once failed, every later push says so, with the same partial
    with pytest.raises(ProtocolError) as again:
        asm.push(dumps(chunk({"content": "x"})))
    assert str(again.value).startswith("push after an error: ")
    assert again.value.partial == partial


# -- state accessors --------------------------------------------------------------------------
def test_state_accessors_follow_the_stream() -> None:
    asm = Assembler()
    assert asm.in_reasoning is False
    assert asm.reasoning_tokens == 0
    assert (asm.id, asm.is_finished, asm.saw_output, asm.tool_calls_so_far()) == (
        None,
        False,
        False,
        [],
    )
    asm.push(dumps(chunk(ROLE)))
    assert (asm.id, asm.is_finished, asm.saw_output) == (streams.ID, False, False)
    asm.push(dumps(chunk({"reasoning_content": "r"})))
    assert asm.saw_output
    assert asm.in_reasoning is True
    asm.push(dumps(chunk({"content": "c"})))
    assert asm.in_reasoning is False
    asm.push(dumps(chunk({}, "stop")))
    assert asm.is_finished
    assert asm.is_done is False
    asm.push("[DONE]")
    assert asm.is_done is True
    for delta in ({"content": "c"}, {"tool_calls": [_tool(0, "i", "f")]}):
        other = Assembler()
        other.push(dumps(chunk(delta)))
        assert other.saw_output


def test_the_first_completion_id_wins_and_the_latest_model() -> None:
    asm = Assembler()
    asm.push('{"id":"first","model":"a","choices":[]}')
    asm.push('{"id":"second","model":"b","choices":[]}')
    asm.push('{"choices":[{"index":0,"finish_reason":"stop","delta":{}}]}')
    done = asm.finish()
    assert (asm.id, done.id, done.model) == ("first", "first", "b")


def test_usage_without_prompt_tokens_details() -> None:
    asm = Assembler()
    asm.push(dumps(chunk({}, "stop")))
    asm.push(dumps(chunk(None, usage={"prompt_tokens": 4, "completion_tokens": 2})))
    assert asm.finish().usage == Usage(prompt_tokens=4, completion_tokens=2, cached_tokens=None)


def test_the_latest_usage_replaces_the_earlier() -> None:
    asm = Assembler()
    asm.push(dumps(chunk({}, None, usage=streams.USAGE)))
    asm.push(dumps(chunk({}, "stop", usage={"completion_tokens": 9})))
    assert asm.finish().usage == Usage(None, 9, None)


# -- tool-call pieces -----------------------------------------------------------------------
def test_piece_without_function_or_arguments() -> None:
    asm = Assembler()
    assert asm.push(_tools(_tool(0, "a"))) == [ToolCallDelta(0, "a", None, "")]
    assert asm.push(_tools(_tool(0, None, "f"))) == [ToolCallDelta(0, None, "f", "")]
    assert asm.push(_tools(_tool(0, None, None, ""))) == [ToolCallDelta(0, None, None, "")]
    assert asm.push(_tools({"index": 0, "function": None})) == [ToolCallDelta(0, None, None, "")]
    assert asm.push(_tools(_tool(0, None, None, "{}"))) == [ToolCallDelta(0, None, None, "{}")]
    events = asm.push(dumps(chunk({}, "tool_calls")))
    assert events == [ToolCallDone(0, ToolCall("a", "f", "{}"))]


def test_the_first_id_wins() -> None:
    asm = Assembler()
    asm.push(_tools(_tool(0, "first", "f", "{")))
    # a later piece of the same call with another id: reported as carried, not adopted
    assert asm.push(_tools(_tool(0, "second", None, "}"))) == [
        ToolCallDelta(0, "second", None, "}")
    ]
    asm.push(dumps(chunk({}, "tool_calls")))
    assert asm.finish().tool_calls == (ToolCall("first", "f", "{}"),)


def test_an_empty_id_is_no_id() -> None:
    asm = Assembler()
    asm.push(_tools(_tool(0, "", "f", "{")))
    asm.push(_tools(_tool(0, "late", None, "}")))
    asm.push(dumps(chunk({}, "tool_calls")))
    assert asm.finish().tool_calls == (ToolCall("late", "f", "{}"),)


def test_pieces_without_index_continue_the_last_call() -> None:
    asm = Assembler()
    events = asm.push(_tools(_tool(None, "c1", "f", "{")))
    assert events == [ToolCallDelta(0, "c1", "f", "{")]
    # the same id again, or no id: the same call
    assert asm.push(_tools(_tool(None, "c1", None, '"a"'))) == [ToolCallDelta(0, "c1", None, '"a"')]
    assert asm.push(_tools(_tool(None, None, None, ":1}"))) == [ToolCallDelta(0, None, None, ":1}")]
    events = asm.push(_tools(_tool(None, "c2", "g", "{}")))
    assert events == [
        ToolCallDone(0, ToolCall("c1", "f", '{"a":1}')),
        ToolCallDelta(1, "c2", "g", "{}"),
    ]


def test_first_piece_without_index_or_id_starts_a_call() -> None:
    asm = Assembler()
    assert asm.push(_tools(_tool(None, None, "f", "{"))) == [ToolCallDelta(0, None, "f", "{")]
    # an id on a later piece is a new id, so a new call: the first one never got its id
    late = _tools(_tool(None, "late", None, "}"))
    with pytest.raises(ProtocolError) as info:
        asm.push(late)
    assert str(info.value) == f"tool call 0 never got an id: {late!r}"


def test_new_call_after_a_done_call_does_not_close_it_twice() -> None:
    asm = Assembler()
    asm.push(_tools(_tool(0, "a", "f", "{}")))
    asm.push(dumps(chunk({}, "tool_calls")))
    # a late piece for a new call (servers do not do this; it must not re-close call 0)
    assert asm.push(_tools(_tool(1, "b", "g", "{}"))) == [ToolCallDelta(1, "b", "g", "{}")]


def test_several_calls_in_one_payload() -> None:
    asm = Assembler()
    events = asm.push(_tools(_tool(0, "a", "f", "{}"), _tool(1, "b", "g", "[]")))
    assert events == [
        ToolCallDelta(0, "a", "f", "{}"),
        ToolCallDone(0, ToolCall("a", "f", "{}")),
        ToolCallDelta(1, "b", "g", "[]"),
    ]
    assert asm.push(dumps(chunk({}, "tool_calls"))) == [ToolCallDone(1, ToolCall("b", "g", "[]"))]


def test_extension_fields_of_later_pieces_are_merged() -> None:
    asm = Assembler()
    asm.push(_tools({**_tool(0, "a", "f", "{"), "x": 1, "y": [1]}))
    asm.push(_tools({**_tool(0, None, None, "}"), "x": 2}))
    asm.push(dumps(chunk({}, "tool_calls")))
    assert asm.finish().tool_calls[0].extra == {"x": 2, "y": [1]}


# -- errors say what was wrong, and carry the offending text ------------------------------------
def _protocol_error(payloads: list[str], last: str) -> ProtocolError:
    asm, _ = feed(payloads)
    with pytest.raises(ProtocolError) as info:
        asm.push(last)
    return info.value


def test_error_not_a_chunk_names_the_decoder_problem() -> None:
    error = _protocol_error([], '{"choices": 5}')
    assert error.raw == '{"choices": 5}'
    assert str(error) == (
        "not a chat completion chunk (Expected `array | null`, got `int` - at `$.choices`): "
        "'{\"choices\": 5}'"
    )


def test_error_bytes_payload_raw_is_text() -> None:
    asm = Assembler()
    with pytest.raises(ProtocolError) as info:
        asm.push(b'{"choices": "\xc3\xa9"}')
    assert info.value.raw == '{"choices": "é"}'


def test_error_data_after_done() -> None:
    error = _protocol_error(["[DONE]"], '{"id":"x"}')
    assert str(error) == 'data after [DONE]: \'{"id":"x"}\''
    assert error.raw == '{"id":"x"}'
    assert error.partial is None
    asm, _ = feed(['{"id":"x","choices":[]}', " [DONE]\n"])  # whitespace around is fine
    with pytest.raises(ProtocolError) as info:
        asm.push("{}")
    assert info.value.partial is not None
    assert info.value.partial.id == "x"


def test_error_choice_index() -> None:
    payload = '{"id":"x","choices":[{"index":1,"delta":{"content":"a"}}]}'
    error = _protocol_error([], payload)
    assert str(error) == f"only n=1 is supported: {payload!r}"
    assert error.raw == payload


def test_error_unknown_finish_reason() -> None:
    payload = dumps(chunk({"content": "a"}, "eos"))
    error = _protocol_error([], payload)
    assert str(error).startswith("unknown finish_reason 'eos': ")
    assert error.raw == payload
    assert error.partial is None  # nothing of the failing payload is kept (no events showed it)
    asm = Assembler()
    asm.push(dumps(chunk({"content": "b"})))
    with pytest.raises(ProtocolError) as info:
        asm.push(payload)
    assert info.value.partial is not None
    assert info.value.partial.content == "b"


def test_error_bad_tool_call_entry() -> None:
    payload = '{"id":"x","choices":[{"index":0,"delta":{"tool_calls":[{"index":"0"}]}}]}'
    error = _protocol_error([], payload)
    assert str(error).startswith("bad tool call entry (Expected `int | null`, got `str`")
    assert error.raw == payload


@pytest.mark.parametrize(("index", "calls"), [(-1, 0), (-3, 2)])
def test_error_tool_index_out_of_range(index: int, calls: int) -> None:
    before = [_tools(_tool(i, f"c{i}", "f", "{}")) for i in range(calls)]
    payload = _tools(_tool(index, "z", "g"))
    error = _protocol_error(before, payload)
    assert str(error) == f"tool call index {index} is negative: {payload!r}"
    assert error.raw == payload
    if calls:
        assert error.partial is not None
        assert len(error.partial.tool_calls) == calls


@pytest.mark.parametrize(
    ("entry", "missing"),
    [(_tool(0, None, "f"), "id"), (_tool(0, "a"), "name"), (_tool(0), "id")],
)
def test_error_tool_call_incomplete_when_closed(entry: dict[str, Any], missing: str) -> None:
    finish = dumps(chunk({}, "tool_calls"))
    error = _protocol_error([_tools(entry)], finish)
    assert str(error) == f"tool call 0 never got an {missing}: {finish!r}"
    assert error.raw == finish
    assert error.partial is not None
    # closed by the next call's first piece: the error shows that piece
    nxt = _tools(_tool(1, "b", "g"))
    error = _protocol_error([_tools(entry)], nxt)
    assert str(error) == f"tool call 0 never got an {missing}: {nxt!r}"


def test_error_tool_call_incomplete_at_finish() -> None:
    asm = Assembler()
    asm.push(_tools(_tool(0, "a", "f")))
    asm.push(dumps(chunk({}, "tool_calls")))
    asm.push(_tools(_tool(1, "b")))  # a piece after the finish reason: never closed
    with pytest.raises(ProtocolError) as info:
        asm.finish()
    assert str(info.value) == "tool call 1 never got an name"
    assert info.value.raw == ""


def test_error_finish_without_finish_reason_or_id() -> None:
    asm = Assembler()
    asm.push(dumps(chunk({"content": "a"})))
    with pytest.raises(StreamClosedEarlyError) as early:
        asm.finish()
    assert str(early.value) == "the stream ended before a finish reason"
    asm = Assembler()
    asm.push('{"choices":[{"index":0,"finish_reason":"stop","delta":{"content":"x"}}]}')
    with pytest.raises(ProtocolError) as info:
        asm.finish()
    assert str(info.value) == "no chunk carried a completion id"
    assert info.value.partial is not None
    assert (info.value.partial.id, info.value.partial.model) == ("", None)
    assert info.value.partial.content == "x"
    assert info.value.partial.finish_reason is FinishReason.STOP


def test_server_error_message_and_fields() -> None:
    with pytest.raises(ServerError) as info:
        Assembler().push('{"error":{"code":503,"message":"Loading model","type":"unavailable"}}')
    assert str(info.value) == "server error 503: Loading model"
    assert (info.value.message, info.value.code, info.value.type) == (
        "Loading model",
        503,
        "unavailable",
    )
    with pytest.raises(ServerError) as plain:
        Assembler().push('{"error":"boom"}')
    assert str(plain.value) == "server error None: boom"
    assert (plain.value.message, plain.value.code, plain.value.type) == ("boom", None, None)
    with pytest.raises(ServerError) as bare:
        Assembler().push('{"error":{}}')
    assert (bare.value.message, bare.value.code, bare.value.type) == ("", None, None)


# -- non-streamed responses ----------------------------------------------------------------
def _response(message: dict[str, Any] | None, finish: str | None = "stop", **extra: Any) -> str:
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
    if message is not None:
        choice["message"] = message
    return dumps({"id": "r1", "object": "chat.completion", "choices": [choice], **extra})


def test_from_response_with_usage_model_and_timings() -> None:
    usage = {
        "prompt_tokens": 11,
        "completion_tokens": 3,
        "prompt_tokens_details": {"cached_tokens": 8},
    }
    body = _response(
        {"role": "assistant", "content": "Hi!"}, model="tiny", usage=usage, timings=timings(3)
    )
    got = Assembler.from_response(body)
    assert got == Completion(
        id="r1",
        model="tiny",
        content="Hi!",
        reasoning_content=None,
        tool_calls=(),
        finish_reason=FinishReason.STOP,
        timings=Timings(0, 20, 3, 12.5, 1600.0, 6.0, 500.0),
        usage=Usage(11, 3, 8),
        reasoning_tokens=0,
        cache=CacheReport(prompt=20, reused=0),  # prompt_n + cache_n; no earlier turn known
    )


def test_from_response_usage_without_details_and_no_model() -> None:
    body = _response({"content": "x"}, "length", usage={"prompt_tokens": 2})
    got = Assembler.from_response(body)
    assert (got.model, got.usage, got.finish_reason) == (None, Usage(2), FinishReason.LENGTH)
    assert got.timings is None


def test_from_response_reasoning_tokens_from_timings() -> None:
    body = _response({"reasoning_content": "think", "content": "x"}, timings=timings(40))
    got = Assembler.from_response(body)
    assert (got.reasoning_content, got.reasoning_tokens) == ("think", 40)


def test_from_response_tool_calls_without_index_are_positional() -> None:
    calls = [
        {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
        {"id": "a", "type": "function", "function": {"name": "g", "arguments": "[]"}},
        {"type": "function", "id": "c", "function": {"name": "h"}, "x": 1},
    ]
    got = Assembler.from_response(_response({"content": None, "tool_calls": calls}, "tool_calls"))
    # one call per entry, even when an id repeats (no streaming "continue the last call" rule)
    assert got.tool_calls == (
        ToolCall("a", "f", "{}"),
        ToolCall("a", "g", "[]"),
        ToolCall("c", "h", "", {"x": 1}),
    )
    assert got.content is None


def test_from_response_tool_calls_with_index() -> None:
    calls = [
        {"index": 0, "id": "a", "function": {"name": "f", "arguments": "{}"}},
        {"index": 1, "id": "b", "function": {"name": "g", "arguments": "{}"}},
    ]
    got = Assembler.from_response(_response({"tool_calls": calls}, "tool_calls"))
    assert [c.id for c in got.tool_calls] == ["a", "b"]


def test_from_response_without_message_or_finish() -> None:
    assert Assembler.from_response(_response(None)).content is None
    with pytest.raises(StreamClosedEarlyError) as info:
        Assembler.from_response(_response({"content": "x"}, None))
    assert info.value.partial is not None
    assert (info.value.partial.id, info.value.partial.content) == ("r1", "x")
    with pytest.raises(ProtocolError, match=r"^no chunk carried a completion id$"):
        Assembler.from_response('{"choices":[{"index":0,"finish_reason":"stop","message":{}}]}')


def test_from_response_errors() -> None:
    with pytest.raises(ProtocolError) as info:
        Assembler.from_response(b"<html>502</html>")
    assert str(info.value) == (
        "not a chat completion (JSON is malformed: invalid character (byte 0)): '<html>502</html>'"
    )
    assert info.value.raw == "<html>502</html>"
    assert info.value.partial is None
    with pytest.raises(ServerError) as error:
        Assembler.from_response('{"error":{"code":400,"message":"bad","type":"x"}}')
    assert str(error.value) == "server error 400: bad"
    assert (error.value.code, error.value.type) == (400, "x")
    with pytest.raises(ProtocolError) as index:
        Assembler.from_response('{"id":"r","choices":[{"index":2,"finish_reason":"stop"}]}')
    assert str(index.value).startswith("only n=1 is supported: ")
    assert index.value.raw == '{"id":"r","choices":[{"index":2,"finish_reason":"stop"}]}'
    eos = '{"id":"r","choices":[{"index":0,"finish_reason":"eos"}]}'
    with pytest.raises(ProtocolError) as reason:
        Assembler.from_response(eos)
    assert str(reason.value) == f"unknown finish_reason 'eos': {eos!r}"
    assert reason.value.raw == eos


@pytest.mark.parametrize(
    ("calls", "why"),
    [
        ([{"index": "0"}], "bad tool call entry (Expected `int | null`, got `str`"),
        ([{"id": "a", "function": {"arguments": "{}"}}], "tool call 0 never got an name"),
    ],
)
def test_from_response_tool_call_errors_carry_the_body(calls: list[Any], why: str) -> None:
    body = _response({"tool_calls": calls}, "tool_calls")
    with pytest.raises(ProtocolError) as info:
        Assembler.from_response(body)
    assert str(info.value).startswith(why)
    assert info.value.raw == body
    assert info.value.partial is None


def test_json_nested_too_deeply_is_protocol_error() -> None:
    # msgspec raises RecursionError for it; the error says what it is
    deep = "[" * TOO_DEEP + "]" * TOO_DEEP
    payload = '{"id":"x","choices":[{"index":0,"delta":{"tool_calls":[' + deep + "]}}]}"
    with pytest.raises(ProtocolError) as info:
        Assembler().push(payload)
    assert str(info.value).startswith("not a chat completion chunk (JSON nested too deeply): ")
    assert info.value.raw == payload
    body = '{"id":"r","choices":[{"index":0,"message":{"tool_calls":[' + deep + "]}}]}"
    with pytest.raises(ProtocolError) as whole:
        Assembler.from_response(body)
    assert str(whole.value).startswith("not a chat completion (JSON nested too deeply): ")


# -- the common payload (one plain text delta) takes a shortcut; it must not show ----------------
def _plain_text_stream(key: str) -> list[dict[str, Any]]:
    """One plain text delta per payload, ids, models and timings coming and going."""

    def text(piece: str, **extra: Any) -> dict[str, Any]:
        return {"choices": [{"index": 0, "delta": {key: piece}}], **extra}

    return [
        {"choices": [{"index": 0}]},  # a choice without a delta: nothing to show
        text("x", id="first", model="a"),
        text("y", id="second", model="b"),
        text("z", timings=timings(4)),
        text("!"),
        {"choices": [{"index": 0, "finish_reason": "stop"}]},
    ]


def _feed_watching(payloads: list[dict[str, Any]]) -> tuple[Assembler, list[Any]]:
    """Feed payloads; after each, what it returned and what the state accessors say."""
    asm = Assembler()
    seen: list[Any] = []
    for payload in payloads:
        seen.append((asm.push(dumps(payload)), asm.reasoning_tokens, asm.in_reasoning))
    return asm, seen


@pytest.mark.parametrize(
    ("key", "event", "tokens"),
    [
        ("content", Content, [0, 0, 0, 0, 0, 0]),
        ("reasoning_content", Reasoning, [0, 1, 2, 4, 4, 4]),
    ],
)
def test_plain_text_payloads_fold_like_any_payload(
    key: str, event: type[Content | Reasoning], tokens: list[int]
) -> None:
    payloads = _plain_text_stream(key)
    asm, seen = _feed_watching(payloads)
    thinking = key == "reasoning_content"
    texts = [[], ["x"], ["y"], ["z"], ["!"], []]
    assert seen == [
        ([event(t) for t in text], n, thinking and i > 0)
        for i, (text, n) in enumerate(zip(texts, tokens, strict=True))
    ]
    done = asm.finish()
    assert (done.id, done.model, getattr(done, key)) == ("first", "b", "xyz!")
    assert done.timings is not None
    assert done.timings.predicted_n == 4
    assert done.reasoning_tokens == tokens[-1]
    # the same payloads made uncommon (an empty usage object changes nothing else) take the
    # general path: the same events, states and Completion
    general, seen_general = _feed_watching([{**p, "usage": {}} for p in payloads])
    assert seen_general == seen
    assert general.finish() == done


@pytest.mark.parametrize(
    ("delta", "extra", "events"),
    [
        (
            {"reasoning_content": "r", "content": "c"},
            {},
            [Reasoning("r"), Content("c")],
        ),
        (
            {"content": "c", "tool_calls": [_tool(0, "i", "f", "{}")]},
            {},
            [Content("c"), ToolCallDelta(0, "i", "f", "{}")],
        ),
        (
            {"content": "c"},
            {"prompt_progress": {"total": 3, "cache": 0, "processed": 3, "time_ms": 1}},
            [Progress(3, 0, 3, 1.0), Content("c")],
        ),
        ({"content": "c"}, {"usage": {"prompt_tokens": 5}}, [Content("c")]),
    ],
)
def test_text_with_more_in_the_payload_shows_all_of_it(
    delta: dict[str, Any], extra: dict[str, Any], events: list[ChatEvent]
) -> None:
    asm = Assembler()
    assert asm.push(dumps(chunk(delta, **extra))) == events
    assert (asm.in_reasoning, asm.reasoning_tokens) == (False, int("reasoning_content" in delta))
    asm.push(dumps(chunk({}, "stop")))
    done = asm.finish()
    assert done.content == "c"
    assert done.usage == Usage(prompt_tokens=extra.get("usage", {}).get("prompt_tokens"))


def test_two_choices_of_index_0_are_both_applied() -> None:
    # rule 6 refuses a choice index other than 0; choices of index 0 fold in order
    payload = {**chunk(), "choices": [{"index": 0, "delta": {"content": t}} for t in "ab"]}
    asm = Assembler()
    assert asm.push(dumps(payload)) == [Content("a"), Content("b")]
    asm.push(dumps(chunk({}, "stop")))
    assert asm.finish().content == "ab"


def test_an_error_payload_with_text_shows_none_of_it() -> None:
    asm = Assembler()
    asm.push(dumps(chunk({"content": "a"})))
    with pytest.raises(ServerError, match="boom") as info:
        asm.push(dumps({"error": "boom", **chunk({"content": "b"})}))
    assert info.value.partial is not None
    assert info.value.partial.content == "a"


def test_reasoning_with_a_finish_reason_stays_reasoning() -> None:
    # the thinking budget ran out: the last text was reasoning, and it counts
    asm = Assembler()
    assert asm.push(dumps(chunk({"reasoning_content": "hm"}, "length"))) == [Reasoning("hm")]
    assert (asm.in_reasoning, asm.reasoning_tokens) == (True, 1)
    done = asm.finish()
    assert (done.reasoning_content, done.finish_reason) == ("hm", FinishReason.LENGTH)


# -- rule 7: a payload that fails half-way leaves every call as it was -----------------------------
@pytest.mark.parametrize(
    "entries",
    [
        # touches call 0 (a new name, more arguments, an extension field), closes it, fails
        [{**_tool(0, None, "g", "}"), "x": 1}, _tool(1, "b", "h", "{}"), _tool(-5, "z", "k")],
        # closes call 0 without touching it otherwise, fails
        [_tool(1, "b", "h", "{}"), _tool(-5, "z", "k")],
        # numbers a call its own way (7: the next call), then fails
        [_tool(7, "b", "h", "{}"), _tool(-5, "z", "k")],
    ],
)
def test_a_failed_payload_undoes_what_it_did_to_earlier_calls(entries: list[Any]) -> None:
    asm = Assembler()
    asm.push(_tools(_tool(0, "a", "f", "{")))
    with pytest.raises(ProtocolError, match="index -5 is negative") as info:
        asm.push(_tools(*entries))
    assert asm.tool_calls_so_far() == [("f", "{", False)]
    assert info.value.partial is not None
    assert info.value.partial.tool_calls == (ToolCall("a", "f", "{"),)
