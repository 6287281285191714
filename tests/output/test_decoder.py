"""The output decoder on its own, synchronously: the answer's JSON fed whole, payload by
payload and split at every position gives the same value and the same deltas."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from llamaclient import Content, OutputDelta, Reasoning
from llamaclient._arguments.output import OutputDecoder

ANSWER = (
    '{"name": "Ada \\"the\\" Countess", "age": 36, "ok": true, "none": null,'
    ' "address": {"city": "Lon\\u00addon", "lines": ["12 St", "\\ud83d\\ude00"]},'
    ' "tags": [], "scores": [1.5, -2e3], "deep": [[{"x": "y"}]]}'
)
EXPECTED = json.loads(ANSWER)


def run(fragments: Sequence[str]) -> tuple[list[OutputDelta], Any, bool]:
    decoder = OutputDecoder()
    deltas: list[Any] = []
    for fragment in fragments:
        deltas += decoder.feed(fragment)
    return deltas, decoder.partial(), decoder.finish()


def normal(deltas: Sequence[OutputDelta]) -> list[tuple[tuple[str | int, ...], str, bool]]:
    """Deltas with the pieces of one value merged: what no split may change."""
    out: list[tuple[tuple[str | int, ...], str, bool]] = []
    for d in deltas:
        if out and out[-1][0] == d.path and not out[-1][2]:
            out[-1] = (d.path, out[-1][1] + d.text, d.done)
        else:
            out.append((d.path, d.text, d.done))
    return out


def test_whole_answer_gives_every_leaf_with_its_path_in_order() -> None:
    deltas, value, ok = run([ANSWER])
    assert ok
    assert value == EXPECTED
    assert normal(deltas) == [
        (("name",), 'Ada "the" Countess', True),
        (("age",), "36", True),
        (("ok",), "true", True),
        (("none",), "null", True),
        (("address", "city"), "Lon\u00addon", True),
        (("address", "lines", 0), "12 St", True),
        (("address", "lines", 1), "\U0001f600", True),
        (("scores", 0), "1.5", True),
        (("scores", 1), "-2e3", True),
        (("deep", 0, 0, "x"), "y", True),
    ]


def test_every_split_point_gives_the_same_deltas_and_value() -> None:
    whole = run([ANSWER])
    for i in range(len(ANSWER) + 1):
        deltas, value, ok = run([ANSWER[:i], ANSWER[i:]])
        assert (normal(deltas), value, ok) == (normal(whole[0]), whole[1], whole[2]), i


def test_char_by_char_streams_strings_piece_by_piece() -> None:
    deltas, value, ok = run(list(ANSWER))
    assert ok
    assert value == EXPECTED
    name = [d for d in deltas if d.path == ("name",)]
    assert len(name) > 5  # it streamed, not arrived whole
    assert "".join(d.text for d in name) == EXPECTED["name"]
    assert [d.done for d in name][-1]
    assert not any(d.done for d in name[:-1])


def test_partial_value_mid_stream_holds_the_text_so_far() -> None:
    decoder = OutputDecoder()
    assert decoder.partial() is None
    decoder.feed('{"a": {"b": [1, "xy')
    assert decoder.partial() == {"a": {"b": [1, "xy"]}}
    decoder.feed('z", 2')
    assert decoder.partial() == {"a": {"b": [1, "xyz"]}}  # 2 is not whole yet
    decoder.feed("]}, ")
    assert decoder.partial() == {"a": {"b": [1, "xyz", 2]}}
    decoder.feed('"c": "')
    assert decoder.partial() == {"a": {"b": [1, "xyz", 2]}, "c": ""}
    decoder.feed('d"}')
    assert decoder.finish()
    assert decoder.partial() == {"a": {"b": [1, "xyz", 2]}, "c": "d"}


def test_empty_object_is_an_empty_dict() -> None:
    assert run(["{", "}"])[1:] == ({}, True)


def test_reading_the_partial_value_often_never_changes_it() -> None:
    decoder = OutputDecoder()
    seen = []
    for ch in ANSWER:
        decoder.feed(ch)
        seen.append(json.dumps(decoder.partial()))
    assert decoder.finish()
    assert json.loads(seen[-1]) == EXPECTED


@pytest.mark.parametrize(
    "bad",
    [
        '{"a": 1,}',
        '{"a": [1, 2}',
        '{"a": "x\\q"}',
        '{"a": ["\\q"]}',
        '["not an object"]',
        '{"a": 1} x',
        '{"a": tru}',
    ],
)
def test_malformed_json_stops_the_decoder_without_raising(bad: str) -> None:
    for fragments in ([bad], list(bad)):
        _, _, ok = run(fragments)
        assert not ok


def test_cut_answer_is_not_whole_but_keeps_its_partial_value() -> None:
    deltas, value, ok = run(['{"title": "Once upon', ' a time", "n": [1, 2'])
    assert not ok
    assert value == {"title": "Once upon a time", "n": [1]}
    assert normal(deltas)[0] == (("title",), "Once upon a time", True)


def test_process_inserts_deltas_after_the_content_that_carried_them() -> None:
    decoder = OutputDecoder()
    events: list[Any] = [Reasoning("hm"), Content('{"a": "x'), Content('y", "b": 2}')]
    out = decoder.process(events)
    assert out == [
        Reasoning("hm"),
        Content('{"a": "x'),
        OutputDelta(("a",), "x", False),
        Content('y", "b": 2}'),
        OutputDelta(("a",), "y", True),
        OutputDelta(("b",), "2", True),
    ]
    assert decoder.process([Reasoning("z")]) == [Reasoning("z")]


def test_deep_nesting_fails_fast() -> None:
    _, _, ok = run(['{"a": ' + "[" * 100_000])
    assert not ok
