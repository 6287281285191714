"""The output decoder's edges that mutation testing found unpinned (docs/mutation.md): the
partial value at array index 0 and across several pieces, paths that do not fit the value, and
events after a delta-carrying ``Content``."""

from __future__ import annotations

from typing import Any

from llamaclient import Content, OutputDelta, Reasoning
from llamaclient._arguments.output import OutputDecoder, PartialValue


def test_partial_value_holds_a_string_at_array_index_zero() -> None:
    for prefix, value in [
        ('{"a": ["', {"a": [""]}),
        ('{"a": ["x', {"a": ["x"]}),
        ('{"a": ["xy"', {"a": ["xy"]}),
        ('{"a": ["xy", ', {"a": ["xy"]}),  # closed, the array still open
        ('{"a": ["xy", ["z', {"a": ["xy", ["z"]]}),
        ('{"a": ["xy", ["zw"', {"a": ["xy", ["zw"]]}),
        ('{"a": ["xy", ["zw"]', {"a": ["xy", ["zw"]]}),
    ]:
        decoder = OutputDecoder()
        decoder.feed(prefix)
        assert decoder.partial() == value, prefix


def test_partial_value_joins_every_piece_of_the_open_string() -> None:
    decoder = OutputDecoder()
    decoder.feed('{"s": "ab')
    assert decoder.partial() == {"s": "ab"}
    decoder.feed("cd")
    assert decoder.partial() == {"s": "abcd"}
    decoder.feed("ef")
    decoder.feed("gh")
    decoder.feed("ij")
    assert decoder.partial() == {"s": "abcdefghij"}
    decoder.feed('k", "t": [')
    assert decoder.partial() == {"s": "abcdefghijk", "t": []}


def test_a_path_that_does_not_fit_the_value_is_ignored() -> None:
    value = PartialValue()
    value.set(("a",), "xy")
    value.set(("n",), [1])
    for path in [("a", 0, 1), ("a", 1), ("a", 0, "k"), ("b", 0), ("n", 3), ("n", -1), ("n", "k")]:
        value.set(path, 5)
    assert value.root == {"a": "xy", "n": [1]}
    value.set(("n", 1), 2)  # one past the end appends
    value.set(("n", 0), 0)  # inside replaces
    assert value.root == {"a": "xy", "n": [0, 2]}


def test_process_keeps_every_event_after_a_content_that_carried_deltas() -> None:
    decoder = OutputDecoder()
    events: list[Any] = [Content('{"a": "x'), Reasoning("r"), Content(" "), Content('y"}')]
    assert decoder.process(events) == [
        Content('{"a": "x'),
        OutputDelta(("a",), "x", False),
        Reasoning("r"),
        Content(" "),
        OutputDelta(("a",), " ", False),
        Content('y"}'),
        OutputDelta(("a",), "y", True),
    ]
    assert decoder.finish()
