"""Rule 2 of the reliability issue: an error's ``partial`` is exactly what the events showed.

The bug: a payload whose choice 0 was applied before its choice 1 was rejected gave a partial
of "Helx" while the events had shown "Hel". The assembler now applies a payload whole or not
at all. Hypothesis drives random payload sequences, valid and invalid mixed; at the first
error (and at the end), the partial must equal the fold of the events returned so far.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llamaclient import (
    Assembler,
    Completion,
    Content,
    InferError,
    ProtocolError,
    Reasoning,
    ServerError,
    ToolCallDelta,
)
from llamaclient._types.events import ChatEvent


@dataclass
class Fold:
    """What the events add up to (the user's view)."""

    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: list[list[Any]] = field(default_factory=list)  # [id, name, [arguments]]

    def add(self, events: list[ChatEvent]) -> None:
        for event in events:
            if isinstance(event, Content):
                self.content.append(event.text)
            elif isinstance(event, Reasoning):
                self.reasoning.append(event.text)
            elif isinstance(event, ToolCallDelta):
                if event.index == len(self.calls):
                    self.calls.append([None, None, []])
                call = self.calls[event.index]
                if event.id and call[0] is None:
                    call[0] = event.id
                if event.name:
                    call[1] = event.name
                call[2].append(event.arguments)

    def check(self, partial: Completion | None, applied: int, predicted: int | None) -> None:
        if partial is None:
            assert applied == 0
            assert self.content == []
            assert self.reasoning == []
            assert self.calls == []
            return
        assert applied > 0
        assert partial.content == ("".join(self.content) if self.content else None)
        assert partial.reasoning_content == ("".join(self.reasoning) if self.reasoning else None)
        assert [(c.id, c.name, c.arguments) for c in partial.tool_calls] == [
            (i or "", n or "", "".join(a)) for i, n, a in self.calls
        ]
        assert (partial.timings.predicted_n if partial.timings else None) == predicted


def _payload(choices: list[dict[str, Any]], **extra: Any) -> str:
    return json.dumps({"id": "c1", "model": "m", "choices": choices, **extra})


def _choice(index: int = 0, finish: str | None = None, **delta: Any) -> dict[str, Any]:
    return {"index": index, "finish_reason": finish, "delta": delta}


texts = st.text(alphabet="abcxyz é\n{}\"'", min_size=0, max_size=4)
ids = st.sampled_from([None, "", "a", "b", "c"])
names = st.sampled_from([None, "", "f", "g"])


@st.composite
def tool_entries(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(["ok"] * 6 + ["bad-index", "bad-type", "extra"]))
    if kind == "bad-type":
        return {"index": "0"}
    entry: dict[str, Any] = {}
    index = draw(st.sampled_from([None, 0, 1, 2, 3, -1] if kind == "bad-index" else [None, 0, 1]))
    if index is not None:
        entry["index"] = index
    if (i := draw(ids)) is not None:
        entry["id"] = i
    function = {}
    if (n := draw(names)) is not None:
        function["name"] = n
    if (a := draw(texts)) and draw(st.booleans()):
        function["arguments"] = a
    if function:
        entry["function"] = function
    if kind == "extra":
        entry["extra_content"] = {"k": draw(texts)}
    return entry


def _content(draw: st.DrawFn) -> tuple[str, int | None]:
    return _payload([_choice(content=draw(texts))]), None


def _reasoning(draw: st.DrawFn) -> tuple[str, int | None]:
    return _payload([_choice(reasoning_content=draw(texts))]), None


def _tools(draw: st.DrawFn) -> tuple[str, int | None]:
    entries = draw(st.lists(tool_entries(), min_size=1, max_size=3))
    return _payload([_choice(tool_calls=entries)]), None


def _mixed(draw: st.DrawFn) -> tuple[str, int | None]:
    """Text, tool pieces, maybe timings and a finish: all in one payload."""
    entries = draw(st.lists(tool_entries(), min_size=1, max_size=3))
    finish = draw(st.sampled_from([None, "stop", "tool_calls", "eos"]))
    predicted = draw(st.none() | st.integers(0, 99))
    timings = {} if predicted is None else {"timings": {"predicted_n": predicted}}
    choice = _choice(0, finish, reasoning_content=draw(texts), content="x", tool_calls=entries)
    return _payload([choice], **timings), predicted


def _finish(draw: st.DrawFn) -> tuple[str, int | None]:
    finish = draw(st.sampled_from(["stop", "tool_calls", "length", "eos", ""]))
    return _payload([_choice(0, finish, content=draw(texts))]), None


def _two_choices(draw: st.DrawFn) -> tuple[str, int | None]:
    """The "Helx" bug: choice 0 fine, choice 1 not (or fine, with index 0)."""
    second = _choice(draw(st.sampled_from([0, 1, 2])), content="y")
    return _payload([_choice(content="x"), second]), None


def _timed(draw: st.DrawFn) -> tuple[str, int | None]:
    predicted = draw(st.integers(0, 99))
    timings = {"predicted_n": predicted}
    return _payload([_choice(content=draw(texts))], timings=timings), predicted


def _deep(draw: st.DrawFn) -> tuple[str, int | None]:
    depth = draw(st.sampled_from([1000, 5000]))
    deep = "[" * depth + "]" * depth
    return draw(
        st.sampled_from(
            [
                deep,
                '{"id":"c1","x":' + deep + "}",
                '{"id":"c1","choices":[{"index":0,"delta":{"content":"q","tool_calls":['
                '{"index":0,"id":"a","function":{"name":"f"},"x":' + deep + "}]}}]}",
            ]
        )
    ), None


def _fixed(draw: st.DrawFn) -> tuple[str, int | None]:
    progress = {"total": 9, "cache": 1, "processed": 5, "time_ms": 1.0}
    return draw(
        st.sampled_from(
            [
                _payload([], usage={"prompt_tokens": 3, "completion_tokens": 4}),
                _payload([], prompt_progress=progress),
                _payload([_choice(role="assistant", content=None)]),
                json.dumps({"error": {"code": 500, "message": "boom"}}),
                _payload([_choice(1, content="z")]),
                _payload([_choice(-1, content="z")]),
                json.dumps({"id": "c1", "choices": [{"index": 0, "delta": {"content": 5}}]}),
                "nope",
                "{",
                '{"choices":',
                "",
                "[1]",
                "[DONE]",
            ]
        )
    ), None


KINDS = [_content] * 4 + [_reasoning] * 2 + [_tools] * 4 + [_mixed] * 2
KINDS += [_finish, _two_choices, _timed, _deep] + [_fixed] * 3


@st.composite
def payloads(draw: st.DrawFn) -> tuple[str, int | None]:
    """One payload and the ``predicted_n`` its timings carry (None: no timings)."""
    return draw(st.sampled_from(KINDS))(draw)


def _push(asm: Assembler, data: str | bytes) -> list[ChatEvent] | InferError:
    try:
        return asm.push(data)
    except (ProtocolError, ServerError) as exc:
        return exc


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(payloads(), min_size=1, max_size=14), st.booleans())
def test_partial_is_the_fold_of_the_events(
    sequence: list[tuple[str, int | None]], as_bytes: bool
) -> None:
    asm = Assembler()
    seen = Fold()
    applied = 0
    predicted: int | None = None
    for data, timed in sequence:
        events = _push(asm, data.encode() if as_bytes else data)
        if isinstance(events, InferError):
            seen.check(events.partial, applied, predicted)
            if not str(events).startswith(("data after [DONE]", "push after an error")):
                # a failed assembler says so from then on, with the same partial
                with pytest.raises(ProtocolError, match=r"^push after an error") as again:
                    asm.push(_payload([_choice(content="late")]))
                assert again.value.partial == events.partial
            return
        if data != "[DONE]":
            applied += 1
            if timed is not None:
                predicted = timed
        seen.add(events)
    seen.check(asm.partial(), applied, predicted)


# -- the cases the property found or the issue named, one by one -----------------------------
HEL = _payload([_choice(content="Hel")])


@pytest.mark.parametrize(
    ("name", "bad"),
    [
        ("second choice", _payload([_choice(content="x"), _choice(1, content="y")])),
        ("unknown finish", _payload([_choice(0, "eos", content="x")])),
        ("finish, then bad choice", _payload([_choice(0, "stop"), _choice(1, content="y")])),
        (
            "text, then a negative tool index",
            _payload([_choice(content="x", tool_calls=[{"index": -3, "id": "a"}])]),
        ),
        (
            "good piece, then a bad entry",
            _payload(
                [
                    _choice(
                        content="x",
                        tool_calls=[
                            {"index": 0, "id": "a", "function": {"name": "f", "arguments": "{"}},
                            {"index": "1"},
                        ],
                    )
                ]
            ),
        ),
        (
            "a new call closes one without a name",
            _payload(
                [
                    _choice(
                        content="x",
                        tool_calls=[
                            {"index": 0, "id": "a", "function": {"arguments": "{"}},
                            {"index": 1, "id": "b", "function": {"name": "g"}},
                        ],
                    )
                ]
            ),
        ),
        (
            "a finish closes a call without a name",
            _payload(
                [
                    _choice(
                        0,
                        "tool_calls",
                        content="x",
                        tool_calls=[{"index": 0, "id": "a", "function": {"arguments": "{"}}],
                    )
                ]
            ),
        ),
    ],
)
def test_a_rejected_payload_leaves_nothing_behind(name: str, bad: str) -> None:
    asm = Assembler()
    assert asm.push(HEL) == [Content("Hel")]
    before = asm.partial()
    with pytest.raises(ProtocolError) as info:
        asm.push(bad)
    assert info.value.partial == before, name
    assert info.value.partial is not None
    assert info.value.partial.content == "Hel"
    assert info.value.partial.finish_reason is None


def test_a_rejected_payload_restores_the_calls_it_touched() -> None:
    asm = Assembler()
    asm.push(_payload([_choice(tool_calls=[{"index": 0, "id": "a", "function": {"name": "f"}}])]))
    asm.push(_payload([_choice(tool_calls=[{"index": 1, "id": "b", "function": {"name": "g"}}])]))
    before = asm.partial()
    assert asm.tool_calls_so_far() == [("f", "", True), ("g", "", False)]
    bad = _payload(
        [
            _choice(
                tool_calls=[
                    {"index": 0, "function": {"name": "f2", "arguments": "x"}, "extra": 1},
                    {"index": 1, "function": {"arguments": "y"}},
                    {"index": 2, "function": {"arguments": "z"}},  # closes 1, opens 2
                    {"index": 2, "id": "c", "function": {"name": "h"}},
                    {"index": -4},
                ]
            )
        ],
        timings={"predicted_n": 7},
    )
    with pytest.raises(ProtocolError, match="tool call index -4 is negative"):
        asm.push(bad)
    assert asm.partial() == before
    assert asm.tool_calls_so_far() == [("f", "", True), ("g", "", False)]
    assert before is not None
    assert before.tool_calls[0].extra == {}


def test_the_first_payload_rejected_leaves_no_partial() -> None:
    with pytest.raises(ProtocolError) as info:
        Assembler().push(_payload([_choice(content="x"), _choice(1, content="y")]))
    assert info.value.partial is None


def test_a_rejected_whole_answer_has_no_partial() -> None:
    body = json.dumps(
        {
            "id": "r",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {"content": "x", "tool_calls": [{"id": "a", "function": {}}]},
                }
            ],
        }
    )
    with pytest.raises(ProtocolError, match="tool call 0 never got an name") as info:
        Assembler.from_response(body)
    assert info.value.partial is None
    with pytest.raises(ProtocolError, match="unknown finish_reason") as info:
        Assembler.from_response('{"id":"r","choices":[{"index":0,"finish_reason":"eos"}]}')
    assert info.value.partial is None
