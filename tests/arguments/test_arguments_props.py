"""Property tests for ArgumentStream: any chunking of any JSON object decodes to exactly what
``json.loads`` reads, and arbitrary input never raises anything but ProtocolError."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llamaclient._arguments import ArgumentStream, FieldText
from llamaclient._types.errors import ProtocolError

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Text with everything JSON must escape, plus emoji, CJK, and characters near the quoting rules.
_interesting = st.sampled_from(
    ['"', "\\", "/", "\n", "\r", "\t", "\b", "\f", "\x00", "\x1f", "\x7f", "\u2028", "é",
     "中", "文", "\U0001f600", "\U0001f9d1\u200d\U0001f4bb", "\ufffd", "{", "}", "[", "]",
     ",", ":", " ", '", "k": ', "\\u", "a"]
)  # fmt: skip
_chars = st.characters(exclude_categories=["Cs"])  # no lone surrogates: they are not text
texts = st.lists(st.one_of(_interesting, st.text(_chars, max_size=6)), max_size=12).map("".join)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=False, allow_infinity=False),
    texts,
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(texts, inner, max_size=4)),
    max_leaves=12,
)
objects = st.dictionaries(texts, values, max_size=6)


def render(obj: dict[str, Any], style: int) -> str:
    if style == 0:
        return json.dumps(obj)
    if style == 1:
        return json.dumps(obj, ensure_ascii=False)
    if style == 2:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return json.dumps(obj, indent=style - 2, ensure_ascii=style % 2 == 0)


def chop(raw: str, cuts: Sequence[int]) -> list[str]:
    points = sorted({c % (len(raw) + 1) for c in cuts})
    pieces = []
    start = 0
    for p in points:
        pieces.append(raw[start:p])
        start = p
    pieces.append(raw[start:])
    return pieces


def decode(
    fragments: Sequence[str], lenient: bool, handled: Sequence[str] = ()
) -> tuple[dict[str, Any], dict[str, Any], list[FieldText], dict[str, str]]:
    """Feed ``fragments``; return fields, handle values, events and take()-collected text."""
    args = ArgumentStream.lenient() if lenient else ArgumentStream.strict()
    handles = {name: args.field(name) for name in handled}
    taken = {name: "" for name in handled}
    events: list[FieldText] = []
    for fragment in fragments:
        events += args.feed(fragment)
        for name, h in handles.items():
            taken[name] += h.take()
    events += args.finish()
    for name, h in handles.items():
        taken[name] += h.take()
    return dict(args.fields), {n: h.value for n, h in handles.items()}, events, taken


@SETTINGS
@given(
    obj=objects,
    style=st.integers(0, 5),
    cuts=st.lists(st.integers(0, 10**6), max_size=12),
    lenient=st.booleans(),
    data=st.data(),
)
def test_any_chunking_of_any_object_decodes_like_json_loads(
    obj: dict[str, Any], style: int, cuts: list[int], lenient: bool, data: st.DataObject
) -> None:
    raw = render(obj, style)
    expected = json.loads(raw)
    handled = data.draw(st.lists(st.sampled_from(sorted(expected)), unique=True)) if obj else []
    fields, handle_values, events, taken = decode(chop(raw, cuts), lenient, handled)

    assert handle_values == {k: expected[k] for k in handled}
    assert fields == {k: v for k, v in expected.items() if k not in handled}
    # The streamed pieces of every string field concatenate to its value, in wire order.
    streamed: dict[str, str] = {}
    completed = []
    for name, text, done in events:
        streamed[name] = streamed.get(name, "") + text
        if done:
            completed.append(name)
    assert completed == [k for k, v in expected.items() if isinstance(v, str)]
    assert streamed == {k: v for k, v in expected.items() if isinstance(v, str)}
    for name in handled:
        assert taken[name] == (expected[name] if isinstance(expected[name], str) else "")


@SETTINGS
@given(obj=objects, style=st.integers(0, 5), lenient=st.booleans())
def test_char_by_char_equals_whole(obj: dict[str, Any], style: int, lenient: bool) -> None:
    raw = render(obj, style)
    whole = decode([raw], lenient)
    by_char = decode(list(raw), lenient)
    assert whole[0] == by_char[0] == json.loads(raw)


def outcome(fragments: Sequence[str], lenient: bool) -> tuple[str, Any]:
    args = ArgumentStream.lenient() if lenient else ArgumentStream.strict()
    h = args.field("content")
    error: ProtocolError | None = None
    try:
        for fragment in fragments:
            args.feed(fragment)
        args.finish()
    except ProtocolError as exc:
        error = exc
    assert h.done
    if error is not None:
        # raw is the text, or its first 64 Ki characters (ProtocolError keeps no more)
        assert error.raw.startswith(args.raw) or args.raw.startswith(error.raw)
        return "error", None
    assert h.done
    try:
        value = h.value
    except ProtocolError:
        value = "<missing>"
    return "ok", (dict(args.fields), value, args.truncated)


jsonish = st.text(
    st.sampled_from([*'{}[]",: \n\\ut0123456789abcdefnlrsDE.-+', "\U0001f600", "\x01"]),
    max_size=60,
)
garbage = st.one_of(
    st.text(max_size=80),
    st.binary(max_size=80).map(lambda b: b.decode("utf-8", "replace")),
    st.binary(max_size=80).map(lambda b: b.decode("latin-1")),
    jsonish,
    jsonish.map(lambda s: '{"content": "' + s),
    jsonish.map(lambda s: '{"a": 1, "content": "' + s),
    jsonish.map(lambda s: '{"a": [' + s),
    jsonish.map(lambda s: '{"content": "x' + s + '", "b": ' + s),
)


@settings(max_examples=1000, deadline=None)
@given(raw=garbage, cuts=st.lists(st.integers(0, 10**6), max_size=8), lenient=st.booleans())
def test_any_input_raises_only_protocol_error_and_ignores_chunking(
    raw: str, cuts: list[int], lenient: bool
) -> None:
    whole = outcome([raw], lenient)
    assert outcome(chop(raw, cuts), lenient) == whole
    if len(raw) <= 40:
        assert outcome(list(raw), lenient) == whole


@settings(max_examples=1000, deadline=None)
@given(raw=garbage)
def test_strict_accepts_only_what_json_loads_accepts(raw: str) -> None:
    args = ArgumentStream.strict()
    try:
        args.feed(raw)
        args.finish()
    except ProtocolError:
        return
    if raw.strip(" \t\n\r"):
        assert json.loads(raw) == dict(args.fields)
    else:
        assert dict(args.fields) == {}


def test_deep_nesting_is_a_protocol_error_not_a_crash() -> None:
    for lenient in (False, True):
        raw = '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"
        assert outcome([raw], lenient)[0] == "error"
        assert outcome(['{"a": ' + "[" * 100_000], lenient)[0] in ("ok", "error")
