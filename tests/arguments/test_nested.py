"""ArgumentStream learns nested paths: ``field("a", 0, "b")`` streams a string inside the
arguments, gets a nested value whole, and the top-level events stay as they were."""

from __future__ import annotations

import pytest

from llamaclient import ArgumentStream, FieldText, ProtocolError

RAW = '{"files": [{"path": "a.py", "body": "x = 1\\ny = 2"}, {"path": "b.py"}], "n": {"k": [7]}}'


def feed_all(args: ArgumentStream, fragments: list[str]) -> list[FieldText]:
    out: list[FieldText] = []
    for f in fragments:
        out += args.feed(f)
    return out + args.finish()


@pytest.mark.parametrize("split", range(len(RAW) + 1))
def test_a_nested_string_streams_into_its_handle_at_every_split(split: int) -> None:
    args = ArgumentStream.strict()
    body = args.field("files", 0, "body")
    events = feed_all(args, [RAW[:split], RAW[split:]])
    assert body.done
    assert body.value == "x = 1\ny = 2"
    assert events == []  # FieldText stays top-level only: no top-level string here
    assert args.fields["files"][1] == {"path": "b.py"}


def test_pieces_arrive_live() -> None:
    args = ArgumentStream.strict()
    body = args.field("files", 0, "body")
    args.feed(RAW[: RAW.index("y = 2")])
    assert body.take() == "x = 1\n"
    assert not body.done
    args.feed(RAW[RAW.index("y = 2") :])
    assert body.take() == "y = 2"
    assert body.done


def test_handle_taken_while_the_string_streams_gets_the_text_so_far_first() -> None:
    args = ArgumentStream.strict()
    args.feed(RAW[: RAW.index("y = 2")])
    body = args.field("files", 0, "body")
    args.feed(RAW[RAW.index("y = 2") :])
    args.finish()
    assert body.take() == "x = 1\ny = 2"


def test_handle_taken_after_the_field_completed_gets_the_value_at_once() -> None:
    args = ArgumentStream.strict()
    feed_all(args, [RAW])
    assert args.field("files", 1, "path").value == "b.py"
    assert args.field("n", "k").value == [7]
    assert args.field("n", "k", 0).value == 7
    assert args.field("files", -1).value == {"path": "b.py"}
    with pytest.raises(ProtocolError, match=r"without the field \"files\[1\]\['body'\]\""):
        _ = args.field("files", 1, "body").value


def test_nested_values_complete_with_their_top_level_field() -> None:
    args = ArgumentStream.strict()
    k = args.field("n", "k")
    path = args.field("files", 0, "path")
    args.feed(RAW[: RAW.index("}],")])
    assert path.take() == "a.py"  # a string streams...
    assert not path.done  # ...and completes once its top-level value is checked whole
    args.feed(RAW[RAW.index("}],") : -2])
    assert path.done
    assert path.value == "a.py"
    assert not k.done
    args.feed(RAW[-2:])
    assert k.done
    assert k.value == [7]


def test_a_nested_handle_that_never_comes_fails_at_finish() -> None:
    args = ArgumentStream.strict()
    missing = args.field("files", 5)
    feed_all(args, [RAW])
    assert missing.done
    with pytest.raises(ProtocolError, match="ended without the field"):
        _ = missing.value


def test_nested_handles_keep_working_in_lenient_mode_next_to_sloppy_top_level_strings() -> None:
    args = ArgumentStream.lenient()
    note = args.field("meta", "note")
    events = feed_all(args, ['{"content": "say "hi"", "meta": {"note": "a\\tb"}}'])
    assert note.value == "a\tb"
    assert {e.field for e in events} == {"content"}  # the nested string is no FieldText
    assert "".join(e.text for e in events) == 'say "hi"'
    assert [e.done for e in events][-1]


def test_handle_path_and_name() -> None:
    args = ArgumentStream.strict()
    h = args.field("files", 0, "body")
    assert h.path == ("files", 0, "body")
    assert h.name == "files[0]['body']"
    assert args.field("files", 0, "body") is h
    assert args.field("files").path == ("files",)


def test_malformed_nested_values_fail_as_before() -> None:
    args = ArgumentStream.strict()
    h = args.field("n", 0)
    with pytest.raises(ProtocolError, match="the value of 'n' is not valid JSON"):
        feed_all(args, ['{"n": ["a\\qb"]}'])
    with pytest.raises(ProtocolError):
        _ = h.value
