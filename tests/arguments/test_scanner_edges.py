"""The scanner's edges that mutation testing found unpinned (docs/mutation.md): each input is
fed whole, split in two at every position and one character at a time, and every feeding must
report the same calls (the pieces of one string merged) and end the same way."""

from __future__ import annotations

from typing import Any

import pytest

from llamaclient._arguments.scanner import MAX_DEPTH, ScanError, Scanner

Calls = list[tuple[Any, ...]]


def _scanner(calls: Calls, *, lenient: bool) -> Scanner:
    return Scanner(
        lenient=lenient,
        begin=lambda path: calls.append(("begin", path)),
        piece=lambda text: calls.append(("piece", text)),
        end=lambda text: calls.append(("end", text)),
        value=lambda key, value: calls.append(("value", key, value)),
        repaired=lambda key, value: calls.append(("repaired", key, value)),
        scalar=lambda path, raw: calls.append(("scalar", path, raw)),
        opened=lambda path, is_object: calls.append(("opened", path, is_object)),
    )


def _merged(calls: Calls) -> Calls:
    merged: Calls = []
    for call in calls:  # the pieces of one string merged: what a split may change
        if call[0] in ("piece", "end") and merged and merged[-1][0] == "piece":
            merged[-1] = (call[0], merged[-1][1] + call[1])
        else:
            merged.append(call)
    return merged


def _run(fragments: list[str], *, lenient: bool) -> tuple[Calls, str, bool]:
    """The merged calls, the error's message ("" when none) and ``truncated``."""
    calls: Calls = []
    scanner = _scanner(calls, lenient=lenient)
    error = ""
    try:
        for fragment in fragments:
            scanner.feed(fragment)
        scanner.finish()
    except ScanError as exc:
        error = str(exc)
    assert ("piece", "") not in calls, "a piece is never empty"
    return _merged(calls), error, scanner.truncated


def scan(raw: str, *, lenient: bool = False) -> tuple[Calls, str, bool]:
    """What ``raw`` reports, the same whole, at every split and one character at a time."""
    whole = _run([raw], lenient=lenient)
    for i in range(len(raw) + 1):
        assert _run([raw[:i], raw[i:]], lenient=lenient) == whole, f"split at {i}: {raw!r}"
    assert _run(list(raw), lenient=lenient) == whole, f"char by char: {raw!r}"
    return whole


# ---- nested keys ----------------------------------------------------------------------------


def test_nested_keys_in_paths_are_decoded() -> None:
    calls, error, _ = scan('{"a": {"k\\u00e9\\"": "v", "\\n": [1], "": 2}}')
    assert error == ""
    assert calls == [
        ("opened", ("a",), True),
        ("begin", ("a", 'k\u00e9"')),
        ("end", "v"),
        ("opened", ("a", "\n"), False),
        ("scalar", ("a", "\n", 0), "1"),
        ("scalar", ("a", ""), "2"),
        ("value", "a", {'k\u00e9"': "v", "\n": [1], "": 2}),
    ]


# ---- malformed nested values -------------------------------------------------------------------


@pytest.mark.parametrize("raw", ['{"a": [tru]}', '{"a": {"b": 1x}}', '{"a": [NaN]}'])
def test_a_malformed_nested_scalar_is_not_reported_and_the_value_fails(raw: str) -> None:
    calls, error, _ = scan(raw)
    assert not [c for c in calls if c[0] == "scalar"]
    assert error.startswith("the value of 'a' is not valid JSON"), error


@pytest.mark.parametrize(
    "raw",
    [
        '{"a": {"b"1}}',  # no ":" after a nested key
        '{"a": {"b""c"}}',
        '{"a": {"b" 1}}',
        '{"a": {"b"}}',
        '{"a": {1}}',  # a value where a key belongs
        '{"a": [1 2]}',  # no ","
        '{"a": {"b": 1 "c": 2}}',
        '{"a": ["x" "y"]}',
    ],
)
def test_a_malformed_nested_value_fails_the_same_at_every_split(raw: str) -> None:
    # What the scanner reports after the malformation is best effort (docs/mutation.md), but it
    # must not depend on where the input was split, and the whole value must fail.
    calls, error, _ = scan(raw)
    assert calls[0] == ("opened", ("a",), raw[6] == "{")
    assert error.startswith("the value of 'a' is not valid JSON"), error


@pytest.mark.parametrize("lenient", [False, True])
def test_nesting_is_limited_to_max_depth_levels(lenient: bool) -> None:
    # Whole and one character at a time (every split would cost seconds: the depth does not
    # depend on it).
    deepest = '{"a": ' + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "}"
    calls, error, _ = _run([deepest], lenient=lenient)
    assert _run(list(deepest), lenient=lenient) == (calls, error, False)
    assert error == ""
    assert calls[-2] == ("opened", ("a",) + (0,) * (MAX_DEPTH - 1), False)
    assert calls[-1][:2] == ("value", "a")
    too_deep = '{"a": ' + "[" * (MAX_DEPTH + 1)
    calls, error, _ = _run([too_deep], lenient=lenient)
    assert _run(list(too_deep), lenient=lenient) == (calls, error, False)
    assert error == f"the value of 'a' is nested deeper than {MAX_DEPTH} levels"
    assert len(calls) == MAX_DEPTH


# ---- lenient mode ------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", ['{"n": 1, }', '{"n": [1],}', '{"s": "c", "n": null ,\n}'])
def test_lenient_accepts_a_trailing_comma_after_a_non_string_value(raw: str) -> None:
    calls, error, truncated = scan(raw, lenient=True)
    assert (error, truncated) == ("", False)
    assert calls[-1][:2] == ("value", "n")
    assert scan(raw)[1] == "expected a field name, got '}'"


@pytest.mark.parametrize("lenient", [False, True])
@pytest.mark.parametrize("raw", ['{"s": "ab"}', '{"s": "ab", "t": 1}', '{"s": "a\\n"}'])
def test_a_fragment_that_starts_with_the_closing_quote_sends_no_empty_piece(
    raw: str, lenient: bool
) -> None:
    calls, error, _ = scan(raw, lenient=lenient)  # scan() checks every split for it
    assert error == ""
    assert calls[:2] == [("begin", ("s",)), ("end", "ab" if "ab" in raw else "a\n")]


def test_a_candidate_close_that_was_content_leaves_nothing_held() -> None:
    # Memory stays bounded: once the text after a quote showed it was content, the scanner
    # keeps no raw text for it, however long the string goes on.
    raw = '{"s": "say "hi" to '
    for i in range(len(raw) + 1):
        calls: Calls = []
        scanner = _scanner(calls, lenient=True)
        for fragment in (raw[:i], raw[i:], "them", " and ", "more"):
            scanner.feed(fragment)
        assert not scanner._held, i
        scanner.feed('"}')
        scanner.finish()
        assert _merged(calls) == [("begin", ("s",)), ("end", 'say "hi" to them and more')]


def test_a_confirmed_close_leaves_nothing_held() -> None:
    raw = '{"s": "say "hi"", "t": '
    for i in range(len(raw) + 1):
        calls: Calls = []
        scanner = _scanner(calls, lenient=True)
        for fragment in (raw[:i], raw[i:], "[1, ", "2, ", "3]"):
            scanner.feed(fragment)
        assert not scanner._held, i
        scanner.feed("}")
        scanner.finish()
        assert _merged(calls)[:2] == [("begin", ("s",)), ("end", 'say "hi"')]
        assert _merged(calls)[-1] == ("value", "t", [1, 2, 3])


def test_a_candidate_key_with_a_lone_surrogate_is_no_boundary() -> None:
    # A top-level key with a lone surrogate is refused (strict and lenient), so after a
    # candidate close it shows that the quote was content.
    calls, error, truncated = scan('{"s": "a", "\\ud800": 1}', lenient=True)
    assert calls == [("begin", ("s",)), ("end", 'a", "\ufffd": 1}')]
    assert (error, truncated) == ("", True)
    calls, error, truncated = scan('{"s": "a", "\\ud83d\\ude00": 1}', lenient=True)
    assert calls == [
        ("begin", ("s",)),
        ("end", "a"),
        ("scalar", ("\U0001f600",), "1"),
        ("value", "\U0001f600", 1),
    ]
    assert (error, truncated) == ("", False)


@pytest.mark.parametrize("lenient", [False, True])
def test_nothing_is_held_without_a_candidate_close(lenient: bool) -> None:
    calls: Calls = []
    scanner = _scanner(calls, lenient=lenient)
    for fragment in ('{"n": [1', ", 2]", ', "m": {"k": "v"}', ', "s": "te', "xt"):
        scanner.feed(fragment)
        assert not scanner._held, fragment
