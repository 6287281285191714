"""ArgumentStream: live field-by-field decoding of streamed tool call arguments.

Every input goes through ``all_splits``: the whole text in one fragment, split in two at every
position, and one character at a time must give the same handle value, ``fields``, streamed
text and outcome (success or ProtocolError).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest

from llamaclient._arguments import ArgumentStream, FieldHandle, FieldText
from llamaclient._arguments.routing import LiveArguments
from llamaclient._types.errors import ProtocolError


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


@dataclass(frozen=True)
class Outcome:
    """What one run produced; equal outcomes mean identical observable behaviour."""

    error: str = ""  # what the ProtocolError said was wrong (its message without the raw text)
    value: Any = None  # the handle's value, or MISSING
    fields: dict[str, Any] = field(default_factory=dict)
    streams: tuple[tuple[str, str], ...] = ()  # each completed string occurrence, from events
    truncated: bool = False


def make(lenient: bool) -> ArgumentStream:
    return ArgumentStream.lenient() if lenient else ArgumentStream.strict()


def occurrences(events: Iterable[FieldText]) -> tuple[tuple[str, str], ...]:
    """Join the (field, text, done) tuples into one (field, full text) per string value."""
    done: list[tuple[str, str]] = []
    current: dict[str, list[str]] = {}
    for name, text, finished in events:
        assert isinstance(text, str)
        current.setdefault(name, []).append(text)
        if finished:
            done.append((name, "".join(current.pop(name))))
    assert not current, f"string fields never marked done: {current}"
    return tuple(done)


def what(error: ProtocolError) -> str:
    """The message of ``error`` without the raw text it ends with."""
    message = str(error)
    suffix = f": {error.raw!r}"
    assert message.endswith(suffix), message
    return message.removesuffix(suffix)


def failed(args: ArgumentStream, h: FieldHandle | None, error: ProtocolError) -> Outcome:
    """Check what a run that raised ``error`` left behind; its outcome."""
    assert error.raw, "the error carries the raw text"
    assert error.raw in args.raw
    if h is not None:
        assert h.done, "an error closes every handle"
    return Outcome(error=what(error))


def run(fragments: Iterable[str], *, lenient: bool, handle: str | None = "content") -> Outcome:
    args = make(lenient)
    h = args.field(handle) if handle is not None else None
    events: list[FieldText] = []
    taken: list[str] = []
    error: ProtocolError | None = None
    try:
        for fragment in fragments:
            events += args.feed(fragment)
            if h is not None:
                taken.append(h.take())
        events += args.finish()
    except ProtocolError as exc:
        error = exc
    if error is not None:
        return failed(args, h, error)
    value: Any = None
    if h is not None:
        taken.append(h.take())
        assert h.done
        try:
            value = h.value
        except ProtocolError:
            value = MISSING
        if isinstance(value, str):
            assert "".join(taken) == value, "take() pieces concatenate to the value"
    streams = occurrences(events)
    for name, _ in streams:
        if name != handle:
            assert name in args.fields
    for name, text in reversed(streams):  # last occurrence wins in fields
        if name != handle and isinstance(args.fields[name], str):
            assert args.fields[name] == text
            break
    return Outcome("", value, dict(args.fields), streams, args.truncated)


def all_splits(raw: str, *, lenient: bool, handle: str | None = "content") -> Outcome:
    reference = run([raw], lenient=lenient, handle=handle)
    for i in range(len(raw) + 1):
        split = run([raw[:i], raw[i:]], lenient=lenient, handle=handle)
        assert split == reference, f"split at {i} diverged for {raw!r}"
    by_char = run(list(raw), lenient=lenient, handle=handle)
    assert by_char == reference, f"char-by-char diverged for {raw!r}"
    with_empties = run(["", *list(raw), ""], lenient=lenient, handle=handle)
    assert with_empties == reference
    return reference


def strict(raw: str, handle: str | None = "content") -> Outcome:
    return all_splits(raw, lenient=False, handle=handle)


def lenient(raw: str, handle: str | None = "content") -> Outcome:
    return all_splits(raw, lenient=True, handle=handle)


def both(raw: str, handle: str | None = "content") -> Outcome:
    a = strict(raw, handle)
    b = lenient(raw, handle)
    assert a == b
    return a


# ---- strict: well-formed input ---------------------------------------------------------------


def test_strict_decodes_simple_payload() -> None:
    assert strict('{"content": "hello world"}').value == "hello world"


def test_strict_decodes_every_escape() -> None:
    out = strict(r'{"content":"a\"b\\c\/d\be\ff\ng\rh\ti\u00e9j\u20ac"}')
    assert out.value == 'a"b\\c/d\be\ff\ng\rh\ti\u00e9j\u20ac'


def test_strict_decodes_surrogate_pairs() -> None:
    assert strict(r'{"content":"ok \ud83d\ude00!"}').value == "ok \U0001f600!"
    assert strict(r'{"content":"\uD83D\uDE00\uD83D\uDE01"}').value == "\U0001f600\U0001f601"
    assert strict('{"content":"ok \U0001f600 \u4e2d\u6587!"}').value == "ok \U0001f600 中文!"


def test_strict_parses_other_fields_around_the_handled_one() -> None:
    raw = """{"lang": "py\\"x", "n": 4.5e2, "flag": true, "none": null, "neg": -0.5,
              "meta": {"a": ["b", {"c": 1}], "s": "}]\\"["}, "content": "payload", "after": 1}"""
    out = strict(raw)
    assert out.value == "payload"
    assert out.fields == {
        "lang": 'py"x',
        "n": 450.0,
        "flag": True,
        "none": None,
        "neg": -0.5,
        "meta": {"a": ["b", {"c": 1}], "s": '}]"['},
        "after": 1,
    }
    assert out.streams == (("lang", 'py"x'), ("content", "payload"))


def test_strict_handles_empty_payload_and_whitespace_envelope() -> None:
    assert strict('  { "content" : "" }  ').value == ""
    assert strict('\n{\n\t"content"\r\n:\n"x"\n}\n').value == "x"


@pytest.mark.parametrize("raw", ["", " ", "\n\t ", "{}", " { } "])
@pytest.mark.parametrize("mode", [False, True])
def test_empty_arguments_are_a_valid_no_parameter_call(raw: str, mode: bool) -> None:
    out = all_splits(raw, lenient=mode, handle=None)
    assert not out.error
    assert out.fields == {}
    args = make(mode)
    assert args.feed(raw) == []
    assert args.finish() == []
    assert dict(args.fields) == {}


def test_keys_are_decoded_json_strings() -> None:
    out = strict(r'{"a\"b": 1, "\u00e9": "x", "sp ace": [], "content": "c"}')
    assert out.fields == {'a"b': 1, "é": "x", "sp ace": []}
    assert out.value == "c"


# ---- strict: malformed input fails loudly ----------------------------------------------------


M = "malformed tool call arguments: "
IN_CONTENT = " in the value of 'content'"


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ('{"content": "unterminated', M + "a string value never closed"),
        ('{"content": "no brace"', M + "ended mid-object"),
        (r'{"content": "bad \q escape"}', M + r"invalid escape '\\q'" + IN_CONTENT),
        (r'{"content": "lone \ud800 high"}', M + r"unpaired \u surrogate" + IN_CONTENT),
        (r'{"content": "lone \udc00 low"}', M + r"unpaired \u surrogate" + IN_CONTENT),
        (r'{"content": "\ud800\u0041"}', M + r"unpaired \u surrogate" + IN_CONTENT),
        (r'{"content": "bad \u12g4"}', M + r"invalid escape '\\u12g'" + IN_CONTENT),
        ('{"content": "a"} trailing', M + "unexpected 't' after the closing '}'"),
        ('{"content": "a"}}', M + "unexpected '}' after the closing '}'"),
        ('{"content": "raw\nnewline"}', M + "unescaped control character U+000A" + IN_CONTENT),
        ('{"content": "tab\there"}', M + "unescaped control character U+0009" + IN_CONTENT),
        ('["content"]', M + "the arguments must be a JSON object, got '['"),
        ('"content"', M + "the arguments must be a JSON object, got '\"'"),
        ('{"content" x', M + "expected ':' after the field name 'content', got 'x'"),
        ('{"content": "a" "b": 1}', M + "expected ',' or '}' after the value of 'content'"),
        ('{"content": "a",}', M + "expected a field name, got '}'"),  # trailing comma
        ("{,}", M + "expected a field name, got ','"),
        ('{"n": 4x2}', M + "the value of 'n' is not valid JSON (Extra data: "),
        ('{"n": 01}', M + "the value of 'n' is not valid JSON (Extra data: "),
        ('{"n": NaN}', M + "expected the value of 'n', got 'N'"),
        ('{"n": -Infinity}', M + "the value of 'n' is not valid JSON (-Infinity is not JSON)"),
        ('{"n": True}', M + "expected the value of 'n', got 'T'"),
        ("{'n': 1}", M + 'expected a field name, got "\'"'),
        ('{"n": }', M + "expected the value of 'n', got '}'"),
        ('{"n": [1, 2}', M + "the value of 'n' is not valid JSON (Expecting ',' delimiter: "),
        (r'{"n": ["\ud800"]}', M + r"the value of 'n' contains an unpaired \u surrogate"),
        ('{"n": ["a\nb"]}', M + "the value of 'n' is not valid JSON (Invalid control character"),
        (r'{"bad\q": 1}', M + r"the field name 'bad\\q' is not valid JSON (Invalid \escape: "),
        (r'{"k\ud800": 1}', M + r"the field name 'k\\ud800' contains an unpaired \u surrogate"),
        ('{"a": 1', M + "ended mid-object"),
        ("{", M + "ended mid-object"),
    ],
)
def test_strict_rejects_malformed(bad: str, message: str) -> None:
    error = strict(bad).error
    if "(" in message:  # json's own detail follows: where in the value
        assert error.startswith(message), f"{bad!r}: {error!r}"
    else:
        assert error == message, bad


def test_error_carries_the_raw_text() -> None:
    args = ArgumentStream.strict()
    h = args.field("content")
    with pytest.raises(ProtocolError) as info:
        args.feed('{"content" x')
    assert '{"content" x' in str(info.value)
    assert info.value.raw == '{"content" x'
    # Dead after an error: feeding and finishing raise too, with the raw text.
    with pytest.raises(ProtocolError, match="failed") as again:
        args.feed("x")
    assert again.value.raw == '{"content" xx'
    with pytest.raises(ProtocolError):
        args.finish()
    # The handle was closed with the error instead of hanging.
    assert h.done
    with pytest.raises(ProtocolError, match="content"):
        _ = h.value


def test_error_raw_text_spans_all_fragments() -> None:
    args = ArgumentStream.strict()
    args.feed('{"path": "a",')
    with pytest.raises(ProtocolError) as info:
        args.feed(' "n": tru3}')
    assert info.value.raw == '{"path": "a", "n": tru3}'
    assert "tru3" in str(info.value)


def test_strict_error_at_finish_carries_the_raw_text() -> None:
    args = ArgumentStream.strict()
    args.feed('{"content": "stopped')
    with pytest.raises(ProtocolError, match="never closed") as info:
        args.finish()
    assert info.value.raw == '{"content": "stopped'


def test_missing_field_resolves_as_handle_error_not_stream_error() -> None:
    out = strict('{"other": "x"}')
    assert out.value == MISSING
    assert out.fields == {"other": "x"}


# ---- lenient: sloppy models ------------------------------------------------------------------


def test_lenient_decodes_well_formed_identically() -> None:
    raw = r'{"content":"a\"b\\c\nd \ud83d\ude00", "n": [1, {"x": "y"}], "z": "w"}'
    assert lenient(raw) == strict(raw)
    assert lenient(raw).value == 'a"b\\c\nd \U0001f600'


def test_lenient_unescaped_quote_mid_content_is_literal() -> None:
    assert lenient('{"content": "say "hi" ok"}').value == 'say "hi" ok'
    assert lenient('{"content": """}').value == '"'
    assert lenient('{"content": "a""b"}').value == 'a""b'


def test_lenient_raw_newline_and_control_characters_are_themselves() -> None:
    assert lenient('{"content": "line1\nline2\ttab\x00nul"}').value == "line1\nline2\ttab\x00nul"


def test_lenient_backslash_before_non_escape_is_literal() -> None:
    assert lenient(r'{"content": "C:\path \q \ x"}').value == r"C:\path \q \ x"
    # A valid escape still decodes: the JSON reading wins.
    assert lenient(r'{"content": "C:\temp"}').value == "C:\temp"
    assert lenient(r'{"content": "\\\q"}').value == "\\\\q"


def test_lenient_broken_unicode_escape_is_literal_text() -> None:
    assert lenient(r'{"content": "bad \u12g4 x"}').value == r"bad \u12g4 x"
    assert lenient(r'{"content": "\u"}').value == "\\u"


def test_lenient_model_forgot_the_closing_quote_and_brace() -> None:
    out = lenient('{"content": "the model stopped here')
    assert out.value == "the model stopped here"
    assert out.truncated


def test_lenient_model_closed_string_but_not_object() -> None:
    out = lenient('{"content": "done"')
    assert out.value == "done"
    assert out.truncated
    assert not lenient('{"content": "done"}').truncated


def test_lenient_text_after_a_quote_and_brace_is_content_up_to_the_end() -> None:
    # (mutation testing: one character after '"}' that ends the input is still content)
    out = lenient('{"content": "say "}x')
    assert (out.value, out.truncated) == ('say "}x', True)


def test_lenient_high_surrogate_then_a_complete_escape_at_the_end() -> None:
    # The low half is complete (\u0000, not a low surrogate): nothing is held back for it.
    out = lenient('{"content": "\\ud800\\u0000')
    assert (out.value, out.truncated) == ("\ufffd\x00", True)


def test_two_low_surrogates_are_two_unpaired_ones() -> None:
    # (mutation testing: \udc00 is not a high surrogate, so it does not pair with the next)
    assert lenient('{"content": "\\udc00\\udc00"}').value == "\ufffd\ufffd"
    error = strict('{"content": "\\udc00\\udc00"}').error
    assert error == M + "unpaired \\u surrogate" + IN_CONTENT


def test_lenient_trailing_partial_escape_is_flushed_literally() -> None:
    assert lenient('{"content": "ends with \\').value == "ends with \\"
    assert lenient('{"content": "ends with \\u12').value == "ends with \\u12"
    assert lenient('{"content": "ends with \\ud83d').value == "ends with \ufffd"
    assert lenient('{"content": "ends with \\ud83d\\').value == "ends with \ufffd\\"
    assert lenient('{"content": "ends with \\ud83d\\ude0').value == "ends with \ufffd\\ude0"


def test_lenient_quote_then_more_content_after_whitespace_and_brace() -> None:
    assert lenient('{"content": "a "} b"}').value == 'a "} b'
    assert lenient('{"content": "a" \n } \n').value == "a"


def test_lenient_unpaired_surrogate_is_replacement_not_dropped() -> None:
    assert lenient(r'{"content": "x \ud800 y"}').value == "x \ufffd y"
    assert lenient(r'{"content": "x \udc00 y"}').value == "x \ufffd y"
    assert lenient(r'{"content": "\ud800\u0041"}').value == "\ufffdA"
    assert lenient(r'{"content": "\ud800\ud83d\ude00"}').value == "\ufffd\U0001f600"
    assert lenient(r'{"content": "\ud800\n"}').value == "\ufffd\n"
    assert lenient(r'{"content": "\ud800\q"}').value == "\ufffd\\q"
    assert lenient(r'{"content": "\ud800\u12x"}').value == "\ufffd\\u12x"


# ---- lenient: the key-boundary rule ----------------------------------------------------------


def test_lenient_sloppy_field_recovers_via_key_boundary() -> None:
    raw = '{"note": "he said "hi" there", "content": "ok"}'
    out = lenient(raw)
    assert out.value == "ok"
    assert out.fields == {"note": 'he said "hi" there'}


def test_lenient_boundary_key_may_contain_spaces_and_tight_whitespace() -> None:
    out = lenient('{"a": "v "x"","some thing":"w","content":"c"}')
    assert out.value == "c"
    assert out.fields == {"a": 'v "x"', "some thing": "w"}


def test_lenient_boundary_key_is_a_full_json_string() -> None:
    out = lenient(r'{"a": "v" , "k \"q\" \u00e9" :1, "content" : "c" }')
    assert out.fields == {"a": "v", 'k "q" é': 1}
    assert out.value == "c"


def test_lenient_boundary_with_a_malformed_key_is_content() -> None:
    out = lenient('{"content": "a", "b\nc": x"}')
    assert out.value == 'a", "b\nc": x'


def test_lenient_documented_misfire_content_containing_a_boundary() -> None:
    out = lenient('{"content": "embed ", "meta": " done"}')
    assert out.value == "embed "
    assert out.fields == {"meta": " done"}


def test_lenient_partial_boundary_at_end_is_literal_content() -> None:
    assert lenient('{"content": "abc", "de').value == 'abc", "de'
    assert lenient('{"content": "abc", "de"').value == 'abc", "de'
    assert lenient('{"content": "abc",').value == 'abc",'
    # The partial boundary is content, but its last quote then closes the string at the end.
    assert lenient('{"content": "abc", "de" ').value == 'abc", "de'
    assert lenient('{"content": "abc", "de"}').value == 'abc", "de'


def test_lenient_value_after_boundary_may_be_any_json() -> None:
    out = lenient('{"content": "say "x"", "n": [1, {"a": "b"}], "m": 2, "s": "t"}')
    assert out.value == 'say "x"'
    assert out.fields == {"n": [1, {"a": "b"}], "m": 2, "s": "t"}


def test_lenient_stream_dying_mid_structure_keeps_completed_fields() -> None:
    out = lenient('{"content": "x", "meta": 1')
    assert out.value == "x"
    # The repair pass completes the trailing scalar the incremental parse could not.
    assert out.fields == {"meta": 1}
    assert out.truncated


def test_lenient_repair_pass_fills_fields_the_parse_missed() -> None:
    assert lenient('{"note": "he died her', handle=None).fields == {"note": "he died her"}
    assert lenient('{"a": 1, "flag": tru', handle=None).fields == {"a": 1, "flag": True}
    assert lenient('{"a": nul', handle=None).fields == {"a": None}
    assert lenient('{"a": 1.', handle=None).fields == {"a": 1}
    assert lenient('{"a": -', handle=None).fields == {}
    assert lenient('{"a": [1, {"b": "c\\n', handle=None).fields == {"a": [1, {"b": "c\n"}]}
    assert lenient('{"a": {"b": [1, 2], "c":', handle=None).fields == {"a": {"b": [1, 2]}}
    assert lenient('{"a": {"b": "x\\u00', handle=None).fields == {"a": {"b": "x"}}
    assert lenient('{"a": [tr', handle=None).fields == {"a": [True]}
    assert lenient('{"a": "x", "b":', handle=None).fields == {"a": "x"}
    assert lenient('{"a": "x", "b": ', handle=None).fields == {"a": "x"}
    assert lenient('{"a": 1, "b"', handle=None).fields == {"a": 1}
    assert lenient('{"a": 1,', handle=None).fields == {"a": 1}
    # After a string value, an unconfirmed boundary is the string's content (the rule).
    assert lenient('{"a": "x", "b"', handle=None).fields == {"a": 'x", "b'}
    assert lenient('{"a": "x",', handle=None).fields == {"a": 'x",'}
    assert lenient("{", handle=None).fields == {}


def test_lenient_repair_pass_never_overwrites_parsed_fields() -> None:
    assert lenient('{"a": 1, "a": 2', handle=None).fields == {"a": 1}


def test_lenient_repair_delivers_to_a_waiting_handle() -> None:
    assert lenient('{"content": [1, 2').value == [1, 2]


def test_lenient_trailing_comma_is_accepted() -> None:
    assert lenient('{"a": 1, "content": "c",}').fields == {"a": 1}
    assert strict('{"a": 1, "content": "c",}').error


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ('{"line": 4x2, "content": "y"}', M + "the value of 'line' is not valid JSON (Extra data"),
        ('{"line": [1, 2}', M + "the value of 'line' is not valid JSON (Expecting ','"),
        ("{'content': 'x'}", M + 'expected a field name, got "\'"'),
        ('["content"]', M + "the arguments must be a JSON object, got '['"),
        ('{"content" x', M + "expected ':' after the field name 'content', got 'x'"),
        ('{"n": 1}x', M + "unexpected 'x' after the closing '}'"),
        (r'{"n": ["\udc00"]}', M + r"the value of 'n' contains an unpaired \u surrogate"),
        (
            r'{"n": {"a": 1, "\udc00": 2}}',
            M + r"the value of 'n' contains an unpaired \u surrogate",
        ),
        (r'{"\udfff": 1}', M + r"the field name '\\udfff' contains an unpaired \u surrogate"),
        (r'{"\u12": 1}', M + r"the field name '\\u12' is not valid JSON (Invalid \uXXXX escape"),
    ],
)
def test_malformed_non_string_structure_fails_loudly_in_both_modes(bad: str, message: str) -> None:
    assert strict(bad).error.startswith(message)
    assert lenient(bad).error == strict(bad).error


# ---- lenient: repair of a truncated trailing value -------------------------------------------


@pytest.mark.parametrize(
    ("raw", "fields"),
    [
        # whitespace anywhere inside truncated containers
        ('{"a": [ 1 , { "b" : 2 ', {"a": [1, {"b": 2}]}),
        ('{"a": [ ', {"a": []}),
        ('{"a": {\n\t', {"a": {}}),
        ('{"a": { "b" \n', {"a": {}}),  # a whole key, its ':' never came
        ('{"a": {"b', {"a": {}}),  # a cut key
        ('{"a": [1, ', {"a": [1]}),  # cut after a comma
        ('{"a": [[1, ], 2', {"a": [[1], 2]}),  # a trailing comma inside is accepted
        ('{"a": [true, fals', {"a": [True, False]}),
        ('{"a": [nul', {"a": [None]}),
        # a trailing "-" is no number yet; a cut fraction or exponent reads as what came before
        ('{"a": -', {}),
        ('{"a": [1, -', {"a": [1]}),
        ('{"a": 1e', {"a": 1}),
        ('{"a": 1e+', {"a": 1}),
        ('{"a": 1.5E-', {"a": 1.5}),
        ('{"a": -2.', {"a": -2}),
        ('{"a": [3e', {"a": [3]}),
        ('{"a": 12e3', {"a": 12000.0}),  # complete, only the "}" is missing
        ('{"a": ["x\\u12', {"a": ["x"]}),  # a cut escape is dropped
        # not the start of a JSON value: nothing is filled in
        ('{"a": 4x', {}),
        ('{"a": 1.e5', {}),
        ('{"a": [1 2', {}),
        ('{"a": [x', {}),
        ('{"a": {"b" 1', {}),
        ('{"a": {1', {}),
        ('{"a": ["x\\u12g', {}),  # an invalid escape
        ('{"a": ["x\n', {}),  # a raw control character
    ],
)
def test_lenient_repairs_a_truncated_trailing_value(raw: str, fields: dict[str, Any]) -> None:
    out = lenient(raw, handle=None)
    assert out.fields == fields
    assert out.truncated
    assert strict(raw, handle=None).error == M + "ended mid-object"


def test_lenient_repaired_value_goes_to_its_handle() -> None:
    assert lenient('{"content": 1e').value == 1
    assert lenient('{"content": {"a": [').value == {"a": []}


# ---- surrogate pairs and \u escapes ------------------------------------------------------------


@pytest.mark.parametrize(
    ("escaped", "char"),
    [
        (r"\ud83d\udc00", "\U0001f400"),  # a real emoji whose low half is the lowest one
        (r"\ud83d\udfff", "\U0001f7ff"),  # ... and the highest
        (r"\ud800\udc00", "\U00010000"),  # the first pair
        (r"\udbff\udfff", "\U0010ffff"),  # the last pair
        (r"\uD83D\uDC00", "\U0001f400"),  # upper-case hex
        (r"\ud7ff", "\ud7ff"),  # just below the surrogates: an ordinary character
        (r"\ue000", "\ue000"),  # just above
    ],
)
def test_surrogate_pair_bounds_are_accepted(escaped: str, char: str) -> None:
    e = escaped
    raw = f'{{"content": "<{e}>", "n": ["{e}"], "{e}": 1, "m": {{"{e}": [1, "{e}"]}}}}'
    out = strict(raw)
    assert out.value == f"<{char}>"
    assert out.fields == {"n": [char], char: 1, "m": {char: [1, char]}}
    assert lenient(raw) == out


@pytest.mark.parametrize(
    ("escaped", "replaced"),
    [
        (r"\ud800", "\ufffd"),  # lone halves at the bounds of their ranges
        (r"\udbff", "\ufffd"),
        (r"\udc00", "\ufffd"),
        (r"\udfff", "\ufffd"),
        (r"\ud83d\ud83d", "\ufffd\ufffd"),  # high, high
        (r"\ud83d\udbff", "\ufffd\ufffd"),  # high, then the highest high
        (r"\ud83d\ue000", "\ufffd\ue000"),  # high, then just above the low halves
        (r"\ud83d\ud7ff", "\ufffd\ud7ff"),  # high, then just below the surrogates
        (r"\udc00\ud83d", "\ufffd\ufffd"),  # low, high: the wrong order
        (r"\ud83dx", "\ufffdx"),
        (r"\ud83d\n", "\ufffd\n"),
    ],
)
def test_unpaired_surrogates_fail_strict_and_are_replaced_lenient(
    escaped: str, replaced: str
) -> None:
    raw = '{"content": "<' + escaped + '>"}'
    assert strict(raw).error == M + r"unpaired \u surrogate" + IN_CONTENT
    assert lenient(raw).value == f"<{replaced}>"


@pytest.mark.parametrize(
    ("escape", "invalid"),
    [
        ("\\u", '\\u"'),  # no hex digit, then the closing quote
        ("\\u1", '\\u1"'),
        ("\\u12", '\\u12"'),
        ("\\u123", '\\u123"'),
        ("\\uZ12", "\\uZ"),
        ("\\u12 x", "\\u12 "),
        ("\\u-1234", "\\u-"),
    ],
)
def test_unicode_escape_with_too_few_hex_digits(escape: str, invalid: str) -> None:
    raw = '{"content": "a' + escape + '"}'
    assert strict(raw).error == M + f"invalid escape {invalid!r}" + IN_CONTENT
    assert lenient(raw).value == "a" + escape  # kept literally


def test_unicode_escape_cut_by_the_end_of_input() -> None:
    for escape in ("\\u", "\\u1", "\\u12", "\\u123"):
        raw = '{"content": "a' + escape
        assert strict(raw).error == M + "a string value never closed"
        assert lenient(raw).value == "a" + escape


# ---- routing: handles versus fields ----------------------------------------------------------


@pytest.mark.parametrize("mode", [False, True])
def test_two_streamed_fields_route_independently(mode: bool) -> None:
    raw = r'{"old_code": "a\nb", "new_code": "c\nd"}'
    for fragments in ([raw], list(raw)):
        args = make(mode)
        old = args.field("old_code")
        new = args.field("new_code")
        for fragment in fragments:
            args.feed(fragment)
        args.finish()
        assert old.value == "a\nb"
        assert new.value == "c\nd"
        assert dict(args.fields) == {}, "handled fields are not duplicated"


def test_field_returns_the_same_handle() -> None:
    args = ArgumentStream.strict()
    h = args.field("content")
    assert args.field("content") is h
    assert h.name == "content"
    assert "content" in repr(h)


def test_handle_on_non_string_field_gets_the_parsed_value() -> None:
    args = ArgumentStream.strict()
    line = args.field("line")
    opts = args.field("opts")
    args.feed('{"line": 42, "opts": {"a": [true, null]}, "content": "x"}')
    args.finish()
    assert line.value == 42
    assert opts.value == {"a": [True, None]}
    assert line.take() == ""
    assert dict(args.fields) == {"content": "x"}


def test_late_handle_for_a_completed_field_gets_the_value() -> None:
    args = ArgumentStream.strict()
    args.feed('{"path": "a.rs", "n": 3, "content": "x"}')
    path = args.field("path")  # taken after `path` completed: delivered whole
    n = args.field("n")
    assert path.done
    assert path.value == "a.rs"
    assert path.take() == "a.rs"
    assert n.value == 3
    args.finish()
    assert path.value == "a.rs"


def test_late_handle_mid_stream_continues_the_field() -> None:
    for mode in (False, True):
        args = make(mode)
        args.feed('{"path": "p", "content": "hel')
        content = args.field("content")
        assert not content.done
        assert content.take() == "hel"
        args.feed("lo")
        assert content.take() == "lo"
        args.feed('"}')
        args.finish()
        assert content.value == "hello"
        assert dict(args.fields) == {"path": "p"}


def test_handle_after_finish_for_an_absent_field_raises() -> None:
    args = ArgumentStream.strict()
    args.feed('{"a": 1}')
    args.finish()
    ghost = args.field("ghost")
    assert ghost.done
    with pytest.raises(ProtocolError, match="ghost"):
        _ = ghost.value
    assert args.field("a").value == 1


def test_handle_after_failure_raises_the_stream_error() -> None:
    args = ArgumentStream.strict()
    with pytest.raises(ProtocolError):
        args.feed('{"a": x')
    with pytest.raises(ProtocolError, match="malformed"):
        _ = args.field("b").value


def test_value_before_completion_is_an_invalid_state() -> None:
    args = ArgumentStream.strict()
    h = args.field("content")
    args.feed('{"content": "ab')
    assert not h.done
    with pytest.raises(asyncio.InvalidStateError):
        _ = h.value


def test_take_drains_decoded_text_per_feed() -> None:
    args = ArgumentStream.strict()
    h = args.field("content")
    args.feed('{"content": "a\\')
    assert h.take() == "a"
    assert h.take() == ""
    args.feed("nb\\u00")
    assert h.take() == "\nb"
    args.feed('e9"')
    assert h.take() == "é"
    assert h.done
    args.feed("}")
    args.finish()
    assert h.value == "a\nbé"


def test_duplicate_key_last_wins_in_fields() -> None:
    assert strict('{"path": "a", "path": "b"}', handle=None).fields == {"path": "b"}
    assert strict('{"n": 1, "n": [2]}', handle=None).fields == {"n": [2]}
    assert lenient('{"path": "a", "path": "b"}', handle=None).fields == {"path": "b"}


def test_duplicate_key_with_a_handle_keeps_the_first_value() -> None:
    out = strict('{"content": "a", "content": "b"}')
    assert out.value == "a"
    assert out.fields == {}
    assert out.streams == (("content", "a"), ("content", "b"))
    assert strict('{"content": 1, "content": [2]}').value == 1
    assert strict('{"content": 1, "content": "b"}').value == 1


def test_fields_are_read_only_and_live() -> None:
    args = ArgumentStream.strict()
    args.feed('{"path": "a.rs", "content": "x')
    assert args.fields["path"] == "a.rs"  # available before the payload ends
    assert "content" not in args.fields
    with pytest.raises(TypeError):
        args.fields["x"] = 1  # type: ignore[index]
    args.feed('"}')
    assert args.fields["content"] == "x"
    args.finish()
    assert args.finished


def test_finish_closes_handles_so_missing_fields_resolve() -> None:
    args = ArgumentStream.strict()
    ghost = args.field("ghost")
    args.feed('{"content": "x"}')
    assert not ghost.done
    args.finish()
    assert ghost.done
    with pytest.raises(ProtocolError, match="ghost"):
        _ = ghost.value
    with pytest.raises(ProtocolError, match="finished"):
        args.feed("x")
    with pytest.raises(ProtocolError, match="finished"):
        args.finish()


def test_raw_is_everything_fed() -> None:
    args = ArgumentStream.lenient()
    assert args.raw == ""
    assert args.is_lenient
    args.feed('{"a":')
    args.feed(' "b"}')
    assert args.raw == '{"a": "b"}'
    args.finish()
    assert args.raw == '{"a": "b"}'


def test_a_bare_stream_is_strict_and_the_chat_streams_are_lenient() -> None:
    assert not ArgumentStream().is_lenient
    assert not ArgumentStream.strict().is_lenient
    assert ArgumentStream.lenient().is_lenient
    with pytest.raises(ProtocolError, match="unescaped control character"):
        ArgumentStream().feed('{"a": "x\ny"}')
    assert LiveArguments(list).claim(0).is_lenient  # what a chat stream decodes with
    assert not LiveArguments(list, lenient=False).claim(0).is_lenient


def test_abort_closes_the_open_handles_once() -> None:
    args = ArgumentStream.lenient()
    content = args.field("content")
    path = args.field("path")
    args.feed('{"path": "p", "content": "ab')
    args.abort("the chat ended")
    assert path.value == "p"
    assert content.done
    assert content.take() == "ab"
    with pytest.raises(ProtocolError) as info:
        _ = content.value
    assert str(info.value) == "tool call arguments incomplete: the chat ended: " + repr(args.raw)
    with pytest.raises(ProtocolError, match="incomplete: the chat ended"):
        _ = args.field("late").value
    args.abort("again")  # no-op
    with pytest.raises(ProtocolError, match="already failed"):
        args.feed("x")
    with pytest.raises(ProtocolError, match="already failed"):
        args.finish()
    finished = ArgumentStream.strict()
    finished.feed("{}")
    finished.finish()
    finished.abort("too late")  # no-op
    assert finished.finished


# ---- the events hook ---------------------------------------------------------------------------


def test_feed_returns_decoded_text_of_string_fields() -> None:
    args = ArgumentStream.strict()
    assert args.feed('{"path": "a.py", "n": 1, "content": "x\\') == [
        ("path", "a.py", True),
        ("content", "x", False),
    ]
    assert args.feed("n") == [("content", "\n", False)]
    assert args.feed("y") == [("content", "y", False)]
    assert args.feed('"') == [("content", "", True)]
    assert args.feed("}") == []
    assert args.finish() == []


def test_lenient_events_hold_back_a_candidate_close() -> None:
    args = ArgumentStream.lenient()
    assert args.feed('{"content": "say "') == [("content", "say ", False)]
    assert args.feed("hi") == [("content", '"hi', False)]
    assert args.feed('" ok"') == [("content", '" ok', False)]
    assert args.finish() == [("content", "", True)]


def test_events_are_field_text_tuples() -> None:
    args = ArgumentStream.strict()
    [event] = args.feed('{"a": "b"}')
    assert isinstance(event, FieldText)
    name, text, done = event
    assert (name, text, done) == (event.field, event.text, event.done) == ("a", "b", True)


# ---- realistic payloads ----------------------------------------------------------------------


def test_code_file_payload_streams_decoded() -> None:
    code = 'fn main() {\n    println!("hi \\\\ there");\n}\n\t// 中文 \U0001f600 </script>\n'
    for ascii_only in (True, False):
        raw = json.dumps({"path": "src/main.rs", "content": code}, ensure_ascii=ascii_only)
        assert both(raw).value == code
        assert both(raw).fields == {"path": "src/main.rs"}


def test_pretty_printed_arguments() -> None:
    obj = {"a": [1, 2, {"b": None}], "content": "x\ny", "c": {"d": "e"}}
    raw = json.dumps(obj, indent=2)
    out = both(raw)
    assert out.value == "x\ny"
    assert out.fields == {"a": [1, 2, {"b": None}], "c": {"d": "e"}}


def test_server_style_fragments() -> None:
    # llama-server sends "{" first, then suffixes of its JSON rendering.
    fragments = ['{"', 'path":"', "a.py", '","', 'content":"', "print(\\", '"hi\\")\\n', '"}']
    for mode in (False, True):
        args = make(mode)
        content = args.field("content")
        pieces: list[str] = []
        for fragment in fragments:
            args.feed(fragment)
            pieces.append(content.take())
        args.finish()
        assert content.value == 'print("hi")\n'
        assert "".join(pieces) == content.value
        assert dict(args.fields) == {"path": "a.py"}


def test_work_is_linear_for_a_large_lenient_pending_span() -> None:
    # A candidate boundary whose key never closes holds back text across many fragments;
    # it must be matched incrementally (this would take minutes if re-scanned per fragment).
    body = "x" * 200_000
    args = ArgumentStream.lenient()
    h = args.field("content")
    args.feed('{"content": "a", "')
    for i in range(0, len(body), 10):
        args.feed(body[i : i + 10])
    assert h.take() == "a"  # held back: still a candidate boundary
    args.feed('" junk')  # the candidate key closes, no ':' follows: it was content
    args.finish()
    assert h.value == 'a", "' + body + '" junk'


# ---- asyncio ---------------------------------------------------------------------------------


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


@pytest.mark.asyncio
async def test_delta_streams_per_feed_chunks_live() -> None:
    args = ArgumentStream.strict()
    content = args.field("content")
    got: list[str | None] = []

    async def consume() -> None:
        while True:
            piece = await content.delta()
            got.append(piece)
            if piece is None:
                return

    task = asyncio.create_task(consume())
    await settle()
    assert got == []
    args.feed('{"content": "ab')
    await settle()
    assert got == ["ab"]  # available before the call ends
    args.feed('cd"}')
    args.finish()
    await asyncio.wait_for(task, 1)
    assert got == ["ab", "cd", None]
    assert await content.wait() == "abcd"


@pytest.mark.asyncio
async def test_wait_accumulates_streamed_chunks() -> None:
    args = ArgumentStream.strict()
    content = args.field("content")
    waiter = asyncio.create_task(content.wait())
    args.feed('{"content": "hel')
    await settle()
    assert not waiter.done()
    args.feed('lo"}')
    args.finish()
    assert await asyncio.wait_for(waiter, 1) == "hello"


@pytest.mark.asyncio
async def test_wait_on_non_string_and_late_handles() -> None:
    args = ArgumentStream.strict()
    line = args.field("line")
    args.feed('{"line": 42, "path": "a.rs", "content": "x"}')
    path = args.field("path")
    args.finish()
    assert await line.wait() == 42
    assert await line.delta() is None
    assert await path.delta() == "a.rs"
    assert await path.delta() is None
    assert await path.wait() == "a.rs"


@pytest.mark.asyncio
async def test_finish_wakes_waiters_for_missing_fields() -> None:
    args = ArgumentStream.strict()
    ghost = args.field("ghost")
    waiter = asyncio.create_task(ghost.wait())
    deltas = asyncio.create_task(ghost.delta())
    await settle()
    args.feed('{"content": "x"}')
    args.finish()
    with pytest.raises(ProtocolError, match="ghost"):
        await asyncio.wait_for(waiter, 1)
    with pytest.raises(ProtocolError, match="ghost"):
        await asyncio.wait_for(deltas, 1)


@pytest.mark.asyncio
async def test_stream_error_wakes_waiters_after_the_text_received() -> None:
    args = ArgumentStream.strict()
    content = args.field("content")
    waiter = asyncio.create_task(content.wait())
    args.feed('{"content": "partial')
    with pytest.raises(ProtocolError):
        args.feed('\x01"}')
    with pytest.raises(ProtocolError, match="control character"):
        await asyncio.wait_for(waiter, 1)
    assert await content.delta() == "partial"
    with pytest.raises(ProtocolError):
        await content.delta()


@pytest.mark.asyncio
async def test_several_consumers_and_fields_concurrently() -> None:
    args = ArgumentStream.lenient()
    handles = {name: args.field(name) for name in ("a", "b", "n")}

    async def collect(h: FieldHandle) -> str:
        parts = []
        while (piece := await h.delta()) is not None:
            parts.append(piece)
        return "".join(parts)

    tasks = [asyncio.create_task(collect(handles["a"])), asyncio.create_task(collect(handles["b"]))]
    waits = [asyncio.create_task(h.wait()) for h in handles.values()]
    raw = '{"a": "x "y" z", "n": [1], "b": "\\u00e9\\n"}'
    for ch in raw:
        args.feed(ch)
        await asyncio.sleep(0)
    args.finish()
    assert await asyncio.gather(*tasks) == ['x "y" z', "é\n"]
    assert await asyncio.gather(*waits) == ['x "y" z', "é\n", [1]]


def test_handles_work_under_trio() -> None:
    async def main() -> tuple[list[str | None], Any, Any]:
        args = ArgumentStream.strict()
        content = args.field("content")
        n = args.field("n")
        got: list[str | None] = []
        values: list[Any] = []

        async def consume() -> None:
            while True:
                piece = await content.delta()
                got.append(piece)
                if piece is None:
                    return

        async def wait() -> None:
            values.append(await content.wait())

        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            tg.start_soon(wait)
            await anyio.wait_all_tasks_blocked()
            args.feed('{"content": "ab')
            await anyio.wait_all_tasks_blocked()
            assert got == ["ab"]
            args.feed('cd", "n": 1}')
            args.finish()
        return got, values, await n.wait()

    got, values, n = anyio.run(main, backend="trio")
    assert got == ["ab", "cd", None]
    assert values == ["abcd"]
    assert n == 1


def test_constructible_and_usable_without_a_running_loop() -> None:
    args = ArgumentStream.strict()
    h = args.field("content")
    args.feed('{"content": "x"}')
    args.finish()
    assert asyncio.run(h.wait()) == "x"


def run_all(fragments: Sequence[str], mode: bool) -> dict[str, Any]:
    args = make(mode)
    for fragment in fragments:
        args.feed(fragment)
    args.finish()
    return dict(args.fields)
