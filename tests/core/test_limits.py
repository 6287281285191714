"""Rules 1 and 3 of the reliability issue, in the pure core.

1. Only our typed errors come out, whatever the bytes: JSON nested deeply enough to make
   msgspec raise ``RecursionError`` (``TOO_DEEP``: how deep depends on the Python version) is
   a ``ProtocolError`` at every decoder, with the partial.
3. Memory is bounded: one SSE event holds at most ``max_event_bytes`` however the body is
   split (measured with tracemalloc for a 64 MiB line), and a ``ProtocolError`` keeps at most
   the first 64 Ki characters of what it shows.
"""

from __future__ import annotations

import itertools
import json
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llamaclient import (
    Assembler,
    Config,
    Content,
    ContextOverflowError,
    HTTPStatusError,
    ProtocolError,
    ServerError,
)
from llamaclient._protocol.sse import SSEDecoder
from llamaclient._protocol.status import status_error
from llamaclient._types.config import MAX_BODY_BYTES, MAX_ERROR_BODY_BYTES, MAX_EVENT_BYTES
from llamaclient._types.errors import RAW_KEPT
from tests.support.nesting import TOO_DEEP

MiB = 1024 * 1024


def _chunk(delta: dict[str, object] | None = None, **extra: object) -> str:
    choice: dict[str, object] = {"index": 0, "delta": delta or {}}
    return json.dumps({"id": "c1", "choices": [choice], **extra}, separators=(",", ":"))


# -- rule 1: deep nesting, at every decoder --------------------------------------------------
def _deep(depth: int, kind: str) -> str:
    """JSON nested ``depth`` levels: arrays, objects, or both in turn."""
    if kind == "array":
        return "[" * depth + "]" * depth
    if kind == "object":
        return '{"a":' * depth + "1" + "}" * depth
    return '[{"a":' * (depth // 2) + "1" + "}]" * (depth // 2)


# Deep enough (about 2,000 levels on 3.11, 20,000 on 3.13), more, and far more.
DEPTHS = [TOO_DEEP, 3 * TOO_DEEP, 100_000]
KINDS = ["array", "object", "mixed"]


def _deep_payloads(depth: int, kind: str) -> dict[str, str]:
    """Every place of a chunk where nesting may hide, unclosed variants included."""
    deep = _deep(depth, kind)
    return {
        "unknown-field": f'{{"id":"c1","x":{deep}}}',
        "top-level": deep,
        "unclosed": "[" * depth,
        "in-error": f'{{"error":{{"message":"m","x":{deep}}}}}',
        "in-timings": f'{{"id":"c1","timings":{{"x":{deep}}}}}',
        "in-delta": f'{{"id":"c1","choices":[{{"index":0,"delta":{{"x":{deep}}}}}]}}',
        "tool-extra": (
            '{"id":"c1","choices":[{"index":0,"delta":{"tool_calls":'
            f'[{{"index":0,"id":"a","function":{{"name":"f"}},"x":{deep}}}]}}}}]}}'
        ),
        "tool-list": (f'{{"id":"c1","choices":[{{"index":0,"delta":{{"tool_calls":[{deep}]}}}}]}}'),
    }


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("kind", KINDS)
def test_deep_nesting_in_a_stream_is_a_protocol_error_with_the_partial(
    depth: int, kind: str
) -> None:
    for where, payload in _deep_payloads(depth, kind).items():
        for data in (payload, payload.encode()):
            asm = Assembler()
            assert asm.push(_chunk({"content": "Hel"})) == [Content("Hel")]
            with pytest.raises(ProtocolError) as info:
                asm.push(data)
            error = info.value
            assert info.type is ProtocolError, where
            assert error.partial is not None, where
            assert error.partial.content == "Hel", where
            assert len(error.raw) <= RAW_KEPT


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("kind", KINDS)
def test_deep_nesting_in_a_whole_answer_is_a_protocol_error(depth: int, kind: str) -> None:
    deep = _deep(depth, kind)
    bodies = [
        deep,
        f'{{"id":"r","x":{deep}}}',
        f'{{"id":"r","choices":[{{"index":0,"message":{{"x":{deep}}}}}]}}',
        '{"id":"r","choices":[{"index":0,"finish_reason":"tool_calls","message":'
        f'{{"tool_calls":[{{"id":"a","function":{{"name":"f"}},"x":{deep}}}]}}}}]}}',
    ]
    for body in bodies:
        with pytest.raises(ProtocolError) as info:
            Assembler.from_response(body.encode())
        assert info.type is ProtocolError
        assert info.value.partial is None  # nothing of a whole answer was shown


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("kind", KINDS)
def test_deep_nesting_in_an_error_body_keeps_the_status(depth: int, kind: str) -> None:
    deep = _deep(depth, kind)
    for body in (deep, f'{{"error":{deep}}}', f'{{"error":{{"type":"x","y":{deep}}}}}'):
        error = status_error(500, body.encode())
        assert type(error) is HTTPStatusError
        assert error.status == 500


def test_deep_nesting_message_says_so() -> None:
    with pytest.raises(ProtocolError, match=r"not a chat completion chunk \(JSON nested too"):
        Assembler().push('{"x":' + "[" * TOO_DEEP)
    with pytest.raises(ProtocolError, match=r"not a chat completion \(JSON nested too deeply"):
        Assembler.from_response(b'{"x":' + b"[" * TOO_DEEP)


def test_a_context_overflow_body_is_still_recognised() -> None:
    body = b'{"error":{"type":"exceed_context_size_error","n_prompt_tokens":9,"n_ctx":8}}'
    error = status_error(400, body)
    assert isinstance(error, ContextOverflowError)
    assert (error.n_prompt_tokens, error.n_ctx) == (9, 8)


# -- rule 3: the SSE event limit ---------------------------------------------------------------
def _splits(data: bytes, cuts: list[int]) -> Iterator[bytes]:
    last = 0
    for cut in sorted({c % (len(data) + 1) for c in cuts}):
        yield data[last:cut]
        last = cut
    yield data[last:]


def _decode(body: bytes, cuts: list[int], limit: int) -> list[bytes]:
    decoder = SSEDecoder(limit)
    out: list[bytes] = []
    for piece in _splits(body, cuts):
        out += decoder.feed(piece)
    return out + decoder.flush()


def _decoded_or_error(body: bytes, cuts: list[int], limit: int) -> list[bytes] | ProtocolError:
    try:
        return _decode(body, cuts, limit)
    except ProtocolError as exc:
        return exc


def _feed_all(decoder: SSEDecoder, pieces: Iterator[bytes]) -> int:
    """Feed every piece; return how many bytes went in before an error."""
    fed = 0
    for piece in pieces:
        decoder.feed(piece)
        fed += len(piece)
    return fed


LIMIT = 256


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(0, 3 * LIMIT), min_size=1, max_size=6),
    cuts=st.lists(st.integers(0, 10_000), max_size=8),
    style=st.sampled_from(["data", "multi", "crlf", "comment"]),
)
def test_an_event_over_the_limit_fails_however_split(
    sizes: list[int], cuts: list[int], style: str
) -> None:
    """An event whose bytes fit the limit is returned; one whose data does not fit is a
    ProtocolError naming the limit; no returned data is ever longer than the limit."""
    events = []
    for i, size in enumerate(sizes):
        text = bytes([97 + i % 26]) * size
        if style == "multi":  # the same data on several lines
            half = size // 2
            event = b"data: " + text[:half] + b"\ndata: " + text[half + 1 :] + b"\n\n"
        elif style == "crlf":
            event = b"data: " + text + b"\r\n\r\n"
        elif style == "comment":
            event = b": ping\ndata: " + text + b"\n\n"
        else:
            event = b"data: " + text + b"\n\n"
        events.append(event)
    body = b"".join(events)
    expected = _decode(body, [], 1 << 30)
    fits = all(len(e.rstrip(b"\r\n")) <= LIMIT for e in events)
    too_big = any(len(d) > LIMIT for d in expected)
    got = _decoded_or_error(body, cuts, LIMIT)
    if isinstance(got, ProtocolError):
        assert not fits
        assert f"max_event_bytes ({LIMIT} bytes)" in str(got)
        assert len(got.raw) <= LIMIT + len(body)
        return
    assert not too_big
    assert got == expected
    assert all(len(d) <= LIMIT for d in got)


@pytest.mark.parametrize("piece", [1, 7, 4096, 65536, 65537, 300_000])
@pytest.mark.parametrize("limit", [1, 100, 65535, 65536, 65537, 200_000])
def test_a_line_without_end_stops_at_the_limit(piece: int, limit: int) -> None:
    decoder = SSEDecoder(limit)
    fed = [0]

    def pieces() -> Iterator[bytes]:
        yield b"data: " + b"x" * (piece - 6) if piece > 6 else b"x" * piece
        while fed[0] <= limit + piece + 65536:
            fed[0] += piece
            yield b"x" * piece

    with pytest.raises(ProtocolError, match=f"max_event_bytes \\({limit} bytes\\)"):
        _feed_all(decoder, pieces())
    assert fed[0] <= limit + piece  # it stopped as soon as the limit was crossed


def test_many_data_lines_of_one_event_stop_at_the_limit() -> None:
    decoder = SSEDecoder(1000)
    with pytest.raises(ProtocolError, match="max_event_bytes"):
        _feed_all(decoder, (b"data: " + b"y" * 20 + b"\n" for _ in range(1000)))
    # small events are untouched by the limit, in any number
    decoder = SSEDecoder(1000)
    assert decoder.feed(b"data: " + b"z" * 900 + b"\n\n" * 3) == [b"z" * 900]
    assert decoder.feed(b"data: 1\n\n" * 2000) == [b"1"] * 2000


def test_a_read_bigger_than_the_limit_is_decoded_event_by_event() -> None:
    limit = 100
    body = b"".join(b"data: %d\n\n" % i for i in range(1000))
    decoder = SSEDecoder(limit)
    decoder.feed(b"data: sta")  # an event left open by the last read
    got = decoder.feed(b"rt\n\n" + body)
    assert got == [b"start"] + [b"%d" % i for i in range(1000)]
    assert SSEDecoder(limit).feed(b"\n" + body + b"data: open") == got[1:]
    with pytest.raises(ProtocolError, match="max_event_bytes"):
        SSEDecoder(limit).feed(body + b"data: " + b"w" * 200 + b"\n\n")
    with pytest.raises(ProtocolError, match="max_event_bytes"):
        SSEDecoder(limit).feed(body + b"data: " + b"w" * 200)


def test_a_joined_cut_event_is_measured() -> None:
    decoder = SSEDecoder(100)
    assert decoder.feed(b"data: " + b"a" * 60) == []
    with pytest.raises(ProtocolError, match="max_event_bytes"):
        decoder.feed(b"b" * 39 + b"\n\n")  # the line is 6 + 99 bytes: over 100
    decoder = SSEDecoder(100)
    assert decoder.feed(b"data: " + b"a" * 60) == []
    assert decoder.feed(b"b" * 30 + b"\n\ndata: c\n\n") == [b"a" * 60 + b"b" * 30, b"c"]


def test_the_decoder_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_event_bytes must be positive"):
        SSEDecoder(0)


def test_a_64_mib_line_peaks_near_the_limit() -> None:
    """The bug: one 200 MB line without a newline peaked at 600 MiB and was kept in
    ProtocolError.raw. Now reading stops at the limit: peak ~ limit + one read."""
    limit = 1 * MiB
    decoder = SSEDecoder(limit)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        # 64 MiB, each read a new object as from a socket
        reads = itertools.chain([b"data: "], (b"x" * 65536 for _ in range(64 * 16)))
        with pytest.raises(ProtocolError) as info:
            _feed_all(decoder, reads)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * limit, peak
    assert len(info.value.raw) <= RAW_KEPT


def test_the_default_limit_lets_a_7_mib_event_through() -> None:
    event = b"data: " + b"q" * (7 * MiB) + b"\n\n"
    decoder = SSEDecoder()
    out: list[bytes] = []
    for i in range(0, len(event), 65536):
        out += decoder.feed(event[i : i + 65536])
    assert [len(d) for d in out] == [7 * MiB]


# -- rule 3: what errors keep ------------------------------------------------------------------
def test_protocol_error_keeps_the_first_64_ki_of_raw() -> None:
    huge = b"\xc3\xa9" * (MiB // 2) + b"tail"
    error = ProtocolError("bad", huge)
    assert len(error.raw) <= RAW_KEPT
    assert error.raw.startswith("é")
    assert str(error).endswith(f"... ({len(huge)} bytes)'")
    text = "z" * (RAW_KEPT + 1)
    error = ProtocolError("bad", text)
    assert error.raw == text[:RAW_KEPT]
    assert str(error) == f"bad: {'z' * 500 + f'... ({RAW_KEPT + 1} chars)'!r}"
    assert ProtocolError("bad", "z" * RAW_KEPT).raw == "z" * RAW_KEPT


def test_server_error_text_is_clipped_but_the_message_kept() -> None:
    message = "m" * 10_000
    error = ServerError(message, 500)
    assert error.message == message
    assert str(error) == f"server error 500: {'m' * 500}... (10000 chars)"


def test_a_payload_error_keeps_at_most_64_ki_of_the_payload() -> None:
    asm = Assembler()
    asm.push(_chunk({"content": "a"}))
    with pytest.raises(ProtocolError) as info:
        asm.push(b'{"choices":"' + b"x" * (4 * MiB))
    assert len(info.value.raw) == RAW_KEPT


# -- the limits in Config ----------------------------------------------------------------------
def test_config_limits_have_safe_defaults() -> None:
    config = Config("http://h:1")
    assert config.max_event_bytes == MAX_EVENT_BYTES == 8 * MiB
    assert config.max_body_bytes == MAX_BODY_BYTES == 8 * MiB
    assert config.max_error_body_bytes == MAX_ERROR_BODY_BYTES == 64 * 1024
    assert SSEDecoder()._max == MAX_EVENT_BYTES


@pytest.mark.parametrize("name", ["max_event_bytes", "max_body_bytes", "max_error_body_bytes"])
@pytest.mark.parametrize("value", [0, -1, 1.5, True, "10"])
def test_config_limits_must_be_positive_ints(name: str, value: object) -> None:
    bad: dict[str, Any] = {name: value}
    with pytest.raises(ValueError, match=f"{name} must be a positive int"):
        Config("http://h:1", **bad)
    good: dict[str, Any] = {name: 1}
    assert getattr(Config("http://h:1", **good), name) == 1


def test_a_big_read_that_ends_with_its_last_event() -> None:
    assert SSEDecoder(10).feed(b"data: xyz\n\n") == [b"xyz"]  # 11 bytes: the measured path


# -- the rest of the pure core's error paths (nox -s coverage) --------------------------------
def test_a_redirect_is_named_and_loading_is_recognised() -> None:
    from llamaclient._protocol.status import is_loading

    assert str(status_error(302, b"", "http://elsewhere/")) == (
        "HTTP 302: redirect to 'http://elsewhere/' not followed"
    )
    assert str(status_error(301, b"moved")) == "HTTP 301: redirect not followed; moved"
    assert is_loading(503, b'{"error":{"message":"Loading model"}}')
    assert not is_loading(500, b"Loading model")


def test_is_done_after_done() -> None:
    asm = Assembler()
    assert not asm.is_done
    asm.push("[DONE]")
    assert asm.is_done
