"""The pure parts on their own: the scanner's callbacks and states, the repair of a truncated
value, and that neither needs an async library."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from llamaclient._arguments import repair, scanner
from llamaclient._arguments.repair import recover
from llamaclient._arguments.scanner import Phase, ScanError, Scanner, State


class Recorder:
    def __init__(self, *, lenient: bool) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.scanner = Scanner(
            lenient=lenient,
            begin=lambda key: self.calls.append(("begin", key)),
            piece=lambda text: self.calls.append(("piece", text)),
            end=lambda text: self.calls.append(("end", text)),
            value=lambda key, value: self.calls.append(("value", key, value)),
            repaired=lambda key, value: self.calls.append(("repaired", key, value)),
        )


def test_scanner_reports_strings_piece_by_piece_and_values_whole() -> None:
    rec = Recorder(lenient=False)
    rec.scanner.feed('{"n": [1, {"a": "}"}], "s": "a\\')
    assert rec.calls == [
        ("begin", ("n", 1, "a")),  # a nested string streams with its path
        ("end", "}"),
        ("value", "n", [1, {"a": "}"}]),
        ("begin", ("s",)),
        ("piece", "a"),
    ]
    rec.scanner.feed('nb", "t": true}')
    rec.scanner.finish()
    assert rec.calls[5:] == [("end", "\nb"), ("value", "t", True)]
    assert rec.scanner._state == State.CLOSED
    assert not rec.scanner.truncated


def test_scanner_lenient_finish_repairs_the_last_value() -> None:
    rec = Recorder(lenient=True)
    rec.scanner.feed('{"s": "x", "n": [1, tr')
    rec.scanner.finish()
    assert rec.calls == [("begin", ("s",)), ("end", "x"), ("repaired", "n", [1, True])]
    assert rec.scanner.truncated


def test_scanner_lenient_holds_a_candidate_close_until_it_is_decided() -> None:
    rec = Recorder(lenient=True)
    rec.scanner.feed('{"s": "say "')
    assert rec.scanner._state == State.PENDING
    assert rec.scanner._phase == Phase.QUOTE
    rec.scanner.feed(', "k')
    assert rec.scanner._phase == Phase.KEY
    rec.scanner.feed('" x')  # no ":" after the key: the quote was content
    assert rec.scanner._state == State.STRING
    rec.scanner.finish()
    assert "".join(c[1] for c in rec.calls if c[0] in ("piece", "end")) == 'say ", "k" x'


def test_scan_error_says_what_and_where() -> None:
    rec = Recorder(lenient=False)
    with pytest.raises(ScanError) as info:
        rec.scanner.feed('{"path": "a\\x"}')
    assert str(info.value) == "invalid escape '\\\\x' in the value of 'path'"
    assert isinstance(info.value, ValueError)


def test_states_and_phases_are_distinct_named_constants() -> None:
    for namespace in (State, Phase):
        names = [name for name in vars(namespace) if name.isupper()]
        values = [getattr(namespace, name) for name in names]
        assert sorted(values) == list(range(len(names))), namespace
    # every state has a scan, and the scans are indexed by the state
    assert len(scanner._SCANS) == len([name for name in vars(State) if name.isupper()])


@pytest.mark.parametrize("module", [scanner, repair])
def test_pure_modules_import_only_the_standard_library(module: Any) -> None:
    tree = ast.parse(Path(module.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add("." * node.level + (node.module or ""))
    allowed = {"__future__", "collections.abc", "json", "re", "typing", ".repair"}
    imported.discard("mutmut.mutation.trampoline")  # a mutation run's copy imports it
    assert imported <= allowed, imported - allowed


# ---- repair ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", 1),
        ("-0.5", -0.5),
        ("1.", 1),
        ("1e", 1),
        ("1e+", 1),
        ("2.5E-", 2.5),
        ("tru", True),
        ("true ", True),
        ("f", False),
        ("nul", None),
        ('"ab', "ab"),
        ('"a\\n', "a\n"),
        ('"a\\', "a"),
        ('"a\\u00', "a"),
        ('"a"', "a"),
        ("[", []),
        ("[ 1 ,", [1]),
        ("[1, ]", [1]),
        ("[1, [2, [3", [1, [2, [3]]]),
        ("[true, fals", [True, False]),
        ("[1, -", [1]),
        ('{"a": 1, "b": {"c": "d', {"a": 1, "b": {"c": "d"}}),
        ('{ "a" ', {}),
        ('{"a', {}),
        ('{"a":', {}),
        ('{"a": 1, }', {"a": 1}),
        ("  [1]  ", [1]),
        # complete values, with and without spaces (mutation testing: every index step)
        ('""', ""),
        ('["", 1]', ["", 1]),
        ('{"a":1}', {"a": 1}),
        ('{"a":1,"b":"c"}', {"a": 1, "b": "c"}),
        ("[1,2,[3,4]]", [1, 2, [3, 4]]),
        ("[[1], 2]", [[1], 2]),
        ('{"a": {"b": 1}, "c": [2]}', {"a": {"b": 1}, "c": [2]}),
        ('{"a":{"b":"c', {"a": {"b": "c"}}),
    ],
)
def test_recover_completes_a_cut_value(text: str, value: Any) -> None:
    assert recover(text) == (True, value)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "  ",
        "-",
        "x",
        "4x2",
        "1.e5",
        "1.x",  # not a cut number: something follows it
        "[1e, 2",
        "[1 2",
        "[x",
        '{"a" 1',
        "{1",
        '"a\\u12g',
        '"a\\q',
        '"a\nb',
        "[1]]",
        "[" * 100_000,
    ],
)
def test_recover_rejects_what_is_not_a_cut_value(text: str) -> None:
    assert recover(text) == (False, None)


NESTED = '{"a": [1, {"b": "c\\u00e9", "d": [true, null, -2.5e1]}, []], "e": 3, "f": {}}'


def _nested_calls(fragments: list[str]) -> list[tuple[Any, ...]]:
    calls: list[tuple[Any, ...]] = []
    scanner = Scanner(
        lenient=False,
        begin=lambda path: calls.append(("begin", path)),
        piece=lambda text: calls.append(("piece", text)),
        end=lambda text: calls.append(("end", text)),
        value=lambda key, value: calls.append(("value", key, value)),
        repaired=lambda key, value: calls.append(("repaired", key, value)),
        scalar=lambda path, raw: calls.append(("scalar", path, raw)),
        opened=lambda path, is_object: calls.append(("opened", path, is_object)),
    )
    for fragment in fragments:
        scanner.feed(fragment)
    scanner.finish()
    merged: list[tuple[Any, ...]] = []
    for call in calls:  # pieces of one string merged: what a split may change
        if call[0] in ("piece", "end") and merged and merged[-1][0] == "piece":
            merged[-1] = (call[0], merged[-1][1] + call[1])
        else:
            merged.append(call)
    return merged


def test_scanner_reports_nested_paths_leaves_and_containers() -> None:
    assert _nested_calls([NESTED]) == [
        ("opened", ("a",), False),
        ("scalar", ("a", 0), "1"),
        ("opened", ("a", 1), True),
        ("begin", ("a", 1, "b")),
        ("end", "c\u00e9"),
        ("opened", ("a", 1, "d"), False),
        ("scalar", ("a", 1, "d", 0), "true"),
        ("scalar", ("a", 1, "d", 1), "null"),
        ("scalar", ("a", 1, "d", 2), "-2.5e1"),
        ("opened", ("a", 2), False),
        ("value", "a", [1, {"b": "c\u00e9", "d": [True, None, -25.0]}, []]),
        ("scalar", ("e",), "3"),
        ("value", "e", 3),
        ("opened", ("f",), True),
        ("value", "f", {}),
    ]


@pytest.mark.parametrize("split", range(len(NESTED) + 1))
def test_scanner_nested_reports_ignore_the_split(split: int) -> None:
    assert _nested_calls([NESTED[:split], NESTED[split:]]) == _nested_calls([NESTED])


def test_scanner_nested_reports_char_by_char() -> None:
    assert _nested_calls(list(NESTED)) == _nested_calls([NESTED])
