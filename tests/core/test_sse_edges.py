"""SSEDecoder edges that the differential and random tests in ``test_sse.py`` reach only by
luck, found by mutation testing (``python -m devtools.mutation sse``, ``docs/mutation.md``).

- the exactly-one-event read must be exactly ``data: <line>\\n\\n``: one data line plus a byte
  of the next line, or with a CR in it, is not one;
- ``last_event_type`` is set by the one-event read after the first read of the body too;
- an ``event: error`` of several data lines is joined like any event;
- ``max_event_bytes`` is inclusive, on every path that measures (the line being read, the data
  values with their joining newlines, both together), also after an event was dispatched,
  after a ``flush()`` and in a decoder reused after that;
- the error shows the start of the event (its first data value, else the first piece of the
  line being read);
- a read longer than the limit that finishes a kept start leaves the decoder usable.
"""

from __future__ import annotations

import pytest

from llamaclient import ProtocolError
from llamaclient._protocol.sse import ErrorData, SSEDecoder

LIMIT = 100
TOO_LONG = f"a server-sent event is longer than max_event_bytes ({LIMIT} bytes)"


def _past_the_first_read() -> SSEDecoder:
    """A decoder whose next read meets the exactly-one-event check at an event boundary."""
    decoder = SSEDecoder()
    assert decoder.feed(b"data: 0\n\n") == [b"0"]
    return decoder


# -- the exactly-one-event read ------------------------------------------------------------------


def test_one_data_line_and_a_byte_of_the_next_line_is_no_whole_event() -> None:
    """``data: a\\n`` plus any byte but a line end: the event goes on past the read."""
    for value in range(256):
        byte = bytes([value])
        if byte in (b"\n", b"\r"):
            continue
        decoder = _past_the_first_read()
        assert decoder.feed(b"data: a\n" + byte) == [], byte
        assert decoder.feed(b"\n\n") == [b"a"], byte  # a one-byte line is no data line
        decoder = _past_the_first_read()
        assert decoder.feed(b"data: a\n" + byte + b"\n") == [], byte
        assert decoder.feed(b"\n") == [b"a"], byte
    decoder = _past_the_first_read()
    assert decoder.feed(b"data: a\nd") == []
    assert decoder.feed(b"ata: b\n\n") == [b"a\nb"]  # the byte started a data line


@pytest.mark.parametrize(
    ("chunk", "fed"),
    [
        (b"data: a\rb\n\n", [b"a"]),  # a lone CR ends "data: a"; "b" is a field line
        (b"data: a\r\n\n", [b"a"]),  # CRLF then LF: one event
        (b"data: a\r\rdata: b\n\n", [b"a", b"b"]),
    ],
)
def test_a_cr_in_a_read_shaped_like_one_event_ends_a_line(chunk: bytes, fed: list[bytes]) -> None:
    assert _past_the_first_read().feed(chunk) == fed


def test_last_event_type_after_a_one_event_read_at_an_edge() -> None:
    """The one-event read at the start of the body, or after a read that ended in CR."""
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n\n") == [b"a"]
    assert decoder.last_event_type == b"message"
    assert decoder.feed(b"event: other\ndata: o\r\r") == []
    assert decoder.last_event_type == b"other"
    assert decoder.feed(b"data: b\n\n") == [b"b"]
    assert decoder.last_event_type == b"message"


def test_error_event_of_several_data_lines() -> None:
    decoder = SSEDecoder()
    got = decoder.feed(b'event: error\ndata: {"error":\ndata: "x"}\n\n')
    assert got == [b'{"error":\n"x"}']
    assert type(got[0]) is ErrorData
    assert decoder.last_event_type == b"error"


# -- max_event_bytes is inclusive ------------------------------------------------------------------


def _events_at_the_limit(decoder: SSEDecoder) -> None:
    """Events that need exactly ``LIMIT`` bytes, each split so that the decoder holds them."""
    # the line being read: 100 bytes, a kept start joined to the read that ends it
    assert decoder.feed(b"data: " + b"x" * 94) == []
    assert decoder.feed(b"\n\n") == [b"x" * 94]
    # a data value and its newline: 99 + 1, in a read longer than the limit
    assert decoder.feed(b"data:" + b"v" * 99 + b"\n\n") == [b"v" * 99]
    # a data value and its newline (31) while the next line (69) is read
    assert decoder.feed(b"data: " + b"a" * 30) == []
    assert decoder.feed(b"\ndata: " + b"b" * 63) == []
    assert decoder.feed(b"\n\n") == [b"a" * 30 + b"\n" + b"b" * 63]


def test_events_of_exactly_the_limit_pass() -> None:
    decoder = SSEDecoder(LIMIT)
    _events_at_the_limit(decoder)
    _events_at_the_limit(decoder)  # nothing of the events before is counted


def test_events_of_exactly_the_limit_pass_after_other_events() -> None:
    decoder = SSEDecoder(LIMIT)
    assert decoder.feed(b"data: a\ndata: b\n\n") == [b"a\nb"]  # dispatched line by line
    _events_at_the_limit(decoder)


def test_events_of_exactly_the_limit_pass_after_flush() -> None:
    """``flush()`` of an event whose last line was kept line by line, then the decoder is
    reused: it starts from nothing held."""
    decoder = SSEDecoder(LIMIT)
    assert decoder.feed(b"data: " + b"a" * 30) == []
    assert decoder.feed(b"\ndata: " + b"b" * 50) == []
    assert decoder.flush() == [b"a" * 30 + b"\n" + b"b" * 50]
    _events_at_the_limit(decoder)


@pytest.mark.parametrize(
    "reads",
    [
        [b"data: " + b"x" * 95],  # the line being read: 101 bytes
        [b"data:" + b"v" * 100 + b"\n\n"],  # a data value and its newline: 101
        [b"data: " + b"a" * 30, b"\ndata: " + b"b" * 64],  # 31 + a 70-byte line
    ],
)
def test_one_byte_over_the_limit_fails_at_the_read_that_crosses_it(reads: list[bytes]) -> None:
    decoder = SSEDecoder(LIMIT)
    for read in reads[:-1]:
        assert decoder.feed(read) == []
    with pytest.raises(ProtocolError, match=r"max_event_bytes \(100 bytes\)"):
        decoder.feed(reads[-1])


# -- what the error shows --------------------------------------------------------------------------


def test_the_error_shows_the_first_data_value_of_the_event() -> None:
    decoder = SSEDecoder(LIMIT)
    with pytest.raises(ProtocolError) as info:
        decoder.feed(b"data: first\ndata: second\ndata: " + b"c" * 90)
    assert info.value.raw == "first"
    assert str(info.value) == f"{TOO_LONG}: 'first'"


def test_the_error_shows_the_first_piece_of_the_line_when_there_is_no_data_yet() -> None:
    """The line came in three reads; only its first piece is shown (nothing is joined)."""
    decoder = SSEDecoder(LIMIT)
    assert decoder.feed(b"data: 1\n\n" * 12 + b"data: x") == [b"1"] * 12  # longer than 100
    assert decoder.feed(b"y" * 50) == []
    with pytest.raises(ProtocolError) as info:
        decoder.feed(b"z" * 50)
    assert info.value.raw == "data: x"
    assert str(info.value) == f"{TOO_LONG}: 'data: x'"


# -- reads longer than the limit, reuse after flush ------------------------------------------------


def test_a_long_read_that_finishes_a_kept_start_leaves_the_decoder_usable() -> None:
    decoder = SSEDecoder(LIMIT)
    assert decoder.feed(b"data: sta") == []  # kept raw
    body = b"".join(b"data: %d\n\n" % i for i in range(20))
    assert decoder.feed(b"rt\n\n" + body) == [b"start"] + [b"%d" % i for i in range(20)]
    assert decoder.feed(b"data: x\n\ndata: cut") == [b"x"]  # the start of the next is kept
    assert decoder.feed(b"\n\ndata: y") == [b"cut"]
    assert decoder.flush() == [b"y"]


def test_decoder_reused_after_flush_pairs_a_split_crlf() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a") == []
    assert decoder.flush() == [b"a"]
    assert decoder.feed(b"data: b\r") == []
    assert decoder.feed(b"\ndata: c\r\n") == []  # the "\n" ends the "\r\n" of "data: b"
    assert decoder.feed(b"\r") == [b"b\nc"]
    assert decoder.flush() == []


FLUSH = None  # in a list of reads: flush() there


def _raw_of_the_error(reads: list[bytes | None], limit: int = LIMIT) -> str:
    decoder = SSEDecoder(limit)

    def feed_all() -> None:
        for read in reads:
            if read is FLUSH:
                decoder.flush()
            else:
                decoder.feed(read)

    with pytest.raises(ProtocolError) as info:
        feed_all()
    return info.value.raw


@pytest.mark.parametrize(
    ("reads", "shown"),
    [
        ([b"\n", b"data: " + b"x" * 94, b"y"], 100),
        ([b"data: a\n\n\n", b"data: " + b"x" * 94, b"y"], 100),
        ([b"data: a", FLUSH, b"\n", b"data: " + b"x" * 94, b"y"], 100),
        (
            [b"data: " + b"x" * 30, b"\ndata: " + b"y" * 63, b"\n\ndata: " + b"z" * 44, b"w" * 51],
            101,
        ),
        (
            [
                b"data: " + b"x" * 30,
                b"\ndata: " + b"y" * 60 + b"\n",
                b"data: c\n\n\ndata: " + b"z" * 84,
                b"v" * 9,
                b"z",
                b"w",
            ],
            100,
        ),
        ([b"data: " + b"x" * 44, b"y" * 50, b"z"], 101),
        ([b"event: e", b"\ndata: " + b"x" * 85, b"y" * 10], 101),
        ([b"data: " + b"x" * 94, b"y"], 101),
        ([b"data: " + b"x" * 44, b"y" * 100], 150),
    ],
)
def test_how_much_of_the_line_that_crossed_the_limit_the_error_shows(
    reads: list[bytes | None], shown: int
) -> None:
    """Where the kept start of an event turns into line-by-line keeping decides how much of
    the crossing line ``ProtocolError.raw`` holds: pinned at every path that measures it (a
    leading blank line, after a dispatch, after ``flush()``, a kept start finished by a long
    read, an ``event:`` line first)."""
    assert len(_raw_of_the_error(reads)) == shown


def test_a_non_data_line_over_the_limit_fails_also_split_after_its_first_two_bytes() -> None:
    assert _raw_of_the_error([b"id", b": 123456789012345\ndata: x\n\n"], limit=10)
