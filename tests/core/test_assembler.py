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
from llamaclient._types.events import ChatEvent
from tests.support import streams
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
    assert not asm.in_reasoning


def test_reasoning_tokens_without_timings_count_payloads() -> None:
    asm = Assembler()
    for _ in range(3):
        asm.push(dumps(chunk({"reasoning_content": "x"})))
    assert asm.reasoning_tokens == 3


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


def test_tool_index_that_skips_ahead() -> None:
    asm = Assembler()
    asm.push(dumps(chunk({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f"}}]})))
    asm.push(dumps(chunk({"tool_calls": [{"index": 1, "id": "b", "function": {"name": "g"}}]})))
    with pytest.raises(ProtocolError, match="index 5 skips ahead"):
        asm.push(dumps(chunk({"tool_calls": [{"index": 5, "id": "c", "function": {"name": "h"}}]})))


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
