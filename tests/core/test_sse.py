"""SSEDecoder: differential tests against httpx-sse, every split point, and hypothesis.

httpx-sse is the reference. Its line-level decoder (``httpx_sse._decoders``) is fed exactly
what ``EventSource.iter_sse()`` feeds it (we check that too), so we can see its internal
state. Where it and we differ, the difference is asserted on its own and explained:

1. A final event without its blank line: httpx-sse drops it, as the WHATWG spec says ("if
   the file ends in the middle of an event ... the incomplete event is not dispatched");
   our ``flush()`` returns it on purpose (module docstring of ``llamaclient._protocol.sse``).
2. An event with fields but no ``data`` line (``event: x\\n\\n``, ``id: 1\\n\\n``): httpx-sse
   dispatches it with ``data == ""``; the spec says an empty data buffer is not dispatched,
   and we do not. (``data:\\n\\n`` has a data line and is dispatched by both, as ``""``.)
   Since httpx-sse never resets the last event id, once any ``id`` was seen every blank line
   after it, even the one that ends a ``:`` ping, gives an empty event.
3. ``retry``: httpx-sse takes any ``int()``-able value (``+5``, ``1_0``, ``-1``, ``" 5"``,
   non-ASCII digits); the spec takes ASCII digits only, and so do we.
4. A leading UTF-8 BOM: the spec strips it; httpx-sse keeps U+FEFF, so the first field name
   becomes ``"\\ufeffdata"`` and that line is ignored.
5. Invalid UTF-8: httpx-sse decodes text with ``errors="replace"``; we return bytes. We
   compare our payloads decoded the same way.
6. httpx-sse returns events of every type; we return only ``message`` events.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from unittest.mock import patch

import httpx
import pytest
from httpx_sse import EventSource, ServerSentEvent, aconnect_sse
from httpx_sse._decoders import SSEDecoder as RefDecoder
from httpx_sse._decoders import SSELineDecoder as RefLineDecoder
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from llamaclient._protocol import sse as _sse
from llamaclient._protocol.sse import SSEDecoder

BOM = b"\xef\xbb\xbf"


# --- the reference: httpx-sse, fed as EventSource.iter_sse() feeds it -----------------------


@dataclass
class Reference:
    """What httpx-sse makes of a body."""

    events: list[tuple[ServerSentEvent, bool]] = field(default_factory=list)  # (event, had data)
    pending: list[str] | None = None  # data lines of the event the body ended in, if any
    pending_type: str = ""
    last_event_id: str = ""

    def messages(self) -> list[str]:
        """The data of the events the spec dispatches as type ``message``."""
        return [
            sse.data for sse, had_data in self.events if had_data and sse.event in ("", "message")
        ]

    def dropped_final(self) -> list[str]:
        """The message event the body ended in without a blank line (httpx-sse drops it)."""
        if self.pending and self.pending_type in ("", "message"):
            return ["\n".join(self.pending)]
        return []


def reference(chunks: Iterable[bytes]) -> Reference:
    """Run httpx-sse's decoders the way ``EventSource.iter_sse()`` does."""
    text = codecs.getincrementaldecoder("utf-8")(errors="replace")  # httpx's TextDecoder
    lines = RefLineDecoder()
    decoder = RefDecoder()
    ref = Reference()

    def take(line: str) -> None:
        had_data = bool(decoder._data)
        sse = decoder.decode(line.rstrip("\n"))
        if sse is not None:
            ref.events.append((sse, had_data))

    for chunk in chunks:
        piece = text.decode(chunk)
        if piece:
            for line in lines.decode(piece):
                take(line)
    piece = text.decode(b"", True)
    if piece:
        for line in lines.decode(piece):
            take(line)
    for line in lines.flush():
        take(line)
    ref.pending = list(decoder._data)
    ref.pending_type = decoder._event
    ref.last_event_id = decoder._last_event_id
    return ref


SSE = tuple[str, str, str, "int | None"]


def fields(sse: ServerSentEvent) -> SSE:
    return (sse.event, sse.data, sse.id, sse.retry)


def public_reference(chunks: Sequence[bytes]) -> list[SSE]:
    """httpx-sse through its public API over a streaming ``httpx.Response``."""
    response = httpx.Response(
        200, headers={"content-type": "text/event-stream"}, content=iter(chunks)
    )
    return [fields(sse) for sse in EventSource(response).iter_sse()]


@dataclass
class Ours:
    fed: list[bytes]
    flushed: list[bytes]
    decoder: SSEDecoder

    def texts(self) -> list[str]:
        return [p.decode("utf-8", "replace") for p in self.fed]


def ours(chunks: Iterable[bytes]) -> Ours:
    decoder = SSEDecoder()
    fed: list[bytes] = []
    for chunk in chunks:
        fed.extend(decoder.feed(chunk))
    return Ours(fed, decoder.flush(), decoder)


def assert_same(chunks: Sequence[bytes]) -> Ours:
    """Our output equals httpx-sse's, up to the documented differences."""
    ref = reference(chunks)
    got = ours(chunks)
    assert got.texts() == ref.messages()
    assert [p.decode("utf-8", "replace") for p in got.flushed] == ref.dropped_final()
    assert got.decoder.last_event_id.decode("utf-8", "replace") == ref.last_event_id
    return got


def split_at(body: bytes, cuts: Iterable[int]) -> list[bytes]:
    points = sorted({c for c in cuts if 0 < c < len(body)})
    return [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]


# --- a llama-server-like stream (wire reference §1.2, §1.9) --------------------------------

_HEAD = {"created": 1760000000, "id": "chatcmpl-" + "a" * 32, "model": "m"}
_TIMINGS = {"cache_n": 0, "prompt_n": 20, "prompt_ms": 1.5, "predicted_n": 2}


def chunk_json(delta: dict[str, object], finish: str | None = None, **extra: object) -> bytes:
    body = {"choices": [{"finish_reason": finish, "index": 0, "delta": delta}], **_HEAD, **extra}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def llama_events() -> list[bytes]:
    """The HTTP chunks of a llama-server stream, one per provider call."""
    texts = ["Hello", " wörld", " 漢字", " 🦙", "\n", ' "quoted"', "x" * 70_000]
    role = b"data: " + chunk_json({"role": "assistant", "content": None}) + b"\n\n"
    first = b"data: " + chunk_json({"content": texts[0]}, timings=_TIMINGS) + b"\n\n"
    out = [role + first, b":\n\n"]  # role delta and first token in one HTTP chunk; a ping
    out += [b"data: " + chunk_json({"content": t}, timings=_TIMINGS) + b"\n\n" for t in texts[1:]]
    out.append(b"data: " + chunk_json({"reasoning_content": "ü" * 500}) + b"\n\n")
    finish = b"data: " + chunk_json({}, "stop") + b"\n\n"
    usage = b"data: " + chunk_json({}, None, usage={"completion_tokens": 2}) + b"\n\n"
    out.append(finish + usage)
    out.append(b"data: [DONE]\n\n")
    return out


LLAMA_CHUNKS = llama_events()
LLAMA_BODY = b"".join(LLAMA_CHUNKS)
LLAMA_PAYLOADS = [
    line[6:] for line in LLAMA_BODY.split(b"\n") if line.startswith(b"data: ")
]  # one data line per event


def test_llama_stream_matches_httpx_sse() -> None:
    got = assert_same(LLAMA_CHUNKS)
    assert got.fed == LLAMA_PAYLOADS
    assert got.fed[-1] == b"[DONE]"
    assert got.flushed == []
    assert json.loads(got.fed[3])["choices"][0]["delta"]["content"] == " 漢字"


def test_llama_stream_every_split_point() -> None:
    small = b"".join(LLAMA_CHUNKS[:4]) + LLAMA_CHUNKS[-1]  # the 70 kB line makes it slow
    expected = [line[6:] for line in small.split(b"\n") if line.startswith(b"data: ")]
    for cut in range(len(small) + 1):
        got = ours([small[:cut], small[cut:]])
        assert got.fed == expected, cut
        assert got.flushed == []


def test_llama_stream_byte_at_a_time() -> None:
    chunks = [LLAMA_BODY[i : i + 1] for i in range(len(LLAMA_BODY))]
    got = ours(chunks)
    assert got.fed == LLAMA_PAYLOADS
    assert public_reference(LLAMA_CHUNKS[:4]) == [
        fields(sse) for sse, _ in reference(LLAMA_CHUNKS[:4]).events
    ]


def test_llama_stream_every_split_point_with_crlf() -> None:
    body = LLAMA_CHUNKS[0].replace(b"\n", b"\r\n") + b":\r\rdata: [DONE]\r\r"
    expected = [*LLAMA_PAYLOADS[:2], b"[DONE]"]
    for cut in range(len(body) + 1):
        for cut2 in (cut + 1, cut + 2):
            chunks = split_at(body, [cut, cut2])
            assert ours(chunks).fed == expected, (cut, cut2)
    assert_same([body])


def test_long_line_in_many_reads() -> None:
    payload = b'{"content":"' + "é".encode() * 500_000 + b'"}'
    body = b"data: " + payload + b"\n\n"
    chunks = [body[i : i + 999] for i in range(0, len(body), 999)]
    assert ours(chunks).fed == [payload]
    assert_same(chunks)


def test_big_incomplete_event_is_not_copied_again_and_again() -> None:
    """Past the raw limit an incomplete event is kept as line pieces: linear, not quadratic."""
    decoder = SSEDecoder()
    piece = b"x" * 1000
    assert decoder.feed(b"data: ") == []
    for _ in range(_sse._RAW_LIMIT // 1000 + 5):
        assert decoder.feed(piece) == []
    assert decoder._raw == []
    assert len(decoder._line) > 1  # pieces, joined once when the line ends
    assert decoder.feed(b"\n\n") == [piece * (_sse._RAW_LIMIT // 1000 + 5)]


def test_big_event_then_small_ones_in_many_reads() -> None:
    """A read that ends a big event (kept line by line) and holds whole small ones."""
    big = b"data: " + b"x" * (1 << 20) + b"\n\n"
    body = big + b"data: a\n\ndata: b\n\n" + big + b"data: [DONE]\n\n"
    expected = [big[6:-2], b"a", b"b", big[6:-2], b"[DONE]"]
    for size in (999, 4096, 65536, 65536 + 7, len(body)):
        chunks = [body[i : i + size] for i in range(0, len(body), size)]
        assert ours(chunks).fed == expected, size


async def _aiter(chunks: Sequence[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


async def _httpx_sse_over_mock_transport(chunks: Sequence[bytes]) -> list[ServerSentEvent]:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=_aiter(chunks)
        )

    async with (
        httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client,
        aconnect_sse(client, "POST", "http://test/v1/chat/completions") as source,
    ):
        return [sse async for sse in source.aiter_sse()]


@pytest.mark.asyncio
async def test_llama_stream_matches_aconnect_sse() -> None:
    events = await _httpx_sse_over_mock_transport(LLAMA_CHUNKS)
    assert [sse.data.encode() for sse in events] == ours(LLAMA_CHUNKS).fed
    assert {sse.event for sse in events} == {"message"}  # httpx-sse names the default type


@pytest.mark.asyncio
async def test_split_chunks_match_aconnect_sse() -> None:
    body = b"data: a\r\ndata: b\r\r\n: c\n\rdata: \xc3\xa9\r\n\ndata: [DONE]\r"
    for cut in range(len(body) + 1):
        chunks = split_at(body, [cut, cut + 3])
        events = await _httpx_sse_over_mock_transport(chunks)
        assert [sse.data for sse in events] == ["a\nb", "é"]  # [DONE] lacks its blank line
        got = ours(chunks)
        assert got.fed == [b"a\nb", "é".encode()]
        assert got.flushed == [b"[DONE]"]  # difference 1


# --- WHATWG spec examples -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "fed", "flushed"),
    [
        (b"data: YHOO\ndata: +2\ndata: 10\n\n", [b"YHOO\n+2\n10"], []),
        (
            b": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\n"
            b"data:  third event\n",
            [b"first event", b"second event"],
            [b" third event"],  # difference 1
        ),
        (b"data\n\ndata\ndata\n\ndata:", [b"", b"\n"], [b""]),  # difference 1
        (b"data:test\n\ndata: test\n\n", [b"test", b"test"], []),
    ],
)
def test_spec_examples(body: bytes, fed: list[bytes], flushed: list[bytes]) -> None:
    for cut in range(len(body) + 1):
        got = assert_same([body[:cut], body[cut:]])
        assert (got.fed, got.flushed) == (fed, flushed)


def test_cr_split_from_lf() -> None:
    chunks = [b"data: a\r", b"\n\r", b"\ndata: b\r", b"\r"]
    got = assert_same(chunks)
    assert got.fed == [b"a", b"b"]
    lone = assert_same([b"data: a\r", b"\r", b"\n", b"data: b\r\n", b"\n"])
    assert lone.fed == [b"a", b"b"]  # "\r" then "\r\n": two line ends


# --- the documented differences, one by one ---------------------------------------------------


def test_difference_final_event_without_blank_line() -> None:
    body = [b"data: 1\n\ndata: 2\ndata: 3"]
    ref = reference(body)
    assert ref.messages() == ["1"]
    assert [sse[1] for sse in public_reference(body)] == ["1"]  # spec: discarded
    got = ours(body)
    assert (got.fed, got.flushed) == ([b"1"], [b"2\n3"])  # ours: delivered by flush()


def test_difference_events_without_data() -> None:
    body = [b"event: x\n\nid: 7\n\nretry: 5\n\n: only a comment\n\ndata:\n\n"]
    theirs = public_reference(body)
    assert theirs == [
        ("x", "", "", None),
        ("message", "", "7", None),
        ("message", "", "7", 5),
        ("message", "", "7", None),
        ("message", "", "7", None),  # "data:" has a data line: dispatched by both
    ]
    got = assert_same(body)
    assert got.fed == [b""]  # only "data:" has a data line
    assert got.decoder.last_event_id == b"7"
    assert got.decoder.retry == 5


@pytest.mark.parametrize("value", ["+5", "1_0", "-1", " 5", "\uff15", "5 ", "0x5"])
def test_difference_retry_needs_ascii_digits(value: str) -> None:
    body = [f"retry: {value}\ndata: x\n\n".encode()]
    theirs = public_reference(body)
    try:
        expected: int | None = int(value)
    except ValueError:
        expected = None
    assert theirs[0][3] == expected
    assert ours(body).decoder.retry is None


def test_retry_and_id_kept_across_events() -> None:
    got = ours([b"retry: 1500\nid: a\ndata: x\n\nid: b\0c\ndata: y\n\n"])
    assert got.fed == [b"x", b"y"]
    assert got.decoder.retry == 1500
    assert got.decoder.last_event_id == b"a"  # an id holding NUL is ignored


def test_difference_bom() -> None:
    body = BOM + b"data: a\n\ndata: b\n\n"
    assert [sse[1] for sse in public_reference([body])] == ["b"]  # "\ufeffdata" ignored
    for cut in range(len(body) + 1):
        assert ours([body[:cut], body[cut:]]).fed == [b"a", b"b"]
    assert ours([body[:1], body[1:2], body[2:3], body[3:]]).fed == [b"a", b"b"]
    assert ours([BOM + BOM + b"data: a\n\n"]).fed == []  # only one BOM is stripped
    assert ours([b"\xef\xbb"]).flushed == []


def test_event_types() -> None:
    body = [b"event: message\ndata: a\n\nevent: other\ndata: b\n\nevent:\ndata: c\n\n"]
    got = assert_same(body)
    assert got.fed == [b"a", b"c"]
    assert got.decoder.last_event_type == b"message"
    other = ours([b"data: a\n\nevent: other\ndata: b\n\n"])
    assert other.fed == [b"a"]
    assert other.decoder.last_event_type == b"other"


# --- hypothesis: random streams, random splits --------------------------------------------------

_names = st.sampled_from(["data", "event", "id", "retry", "", "dat", "data ", "DATA", "x"])
_values = st.text(
    alphabet=st.sampled_from(["a", " ", ":", "é", "漢", "🦙", "\0", "\x85", "\u2028", "\t", "1"]),
    max_size=8,
)
_seps = st.sampled_from([":", ": ", ":  ", ""])
_ends = st.sampled_from(["\n", "\r", "\r\n"])
_field = st.builds(lambda n, s, v: n + s + v, _names, _seps, _values)
_comment = st.builds(lambda v: ":" + v, _values)
_data = st.builds(lambda v: "data: " + v, _values)  # the common case, weighted up
_line = st.one_of(_data, _field, _comment, st.just(""), st.just("event: other"))
_stream = st.lists(st.tuples(_line, _ends), max_size=30).map(
    lambda lines: "".join(a + b for a, b in lines).encode()
)


@st.composite
def _chunked(draw: st.DrawFn, bodies: st.SearchStrategy[bytes]) -> list[bytes]:
    body = draw(bodies)
    cuts = draw(st.lists(st.integers(0, max(len(body), 1)), max_size=12))
    return split_at(body, cuts)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(_chunked(_stream), st.booleans())
def test_random_streams_match_httpx_sse(chunks: list[bytes], tail: bool) -> None:
    if tail:
        chunks = [*chunks, b"data: x\r\n\r\n"]
    assert_same(chunks)
    assert public_reference(chunks) == [fields(sse) for sse, _ in reference(chunks).events]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(_chunked(_stream), st.integers(0, 12))
def test_random_streams_line_by_line(chunks: list[bytes], limit: int) -> None:
    """Incomplete events bigger than the raw limit are taken apart line by line."""
    with patch.object(_sse, "_RAW_LIMIT", limit):
        assert_same(chunks)


_event = st.one_of(
    st.builds(lambda v: "data: " + v, _values),
    st.builds(lambda v: "data: " + v * 20, _values),  # longer than a small raw limit
    st.just(":"),
    st.builds(lambda a, b: f"data: {a}\ndata: {b}", _values, _values),
    st.builds(lambda v: f"event: other\ndata: {v}", _values),
)
_events = st.lists(_event, max_size=12).map(lambda events: "".join(e + "\n\n" for e in events))


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(_chunked(_events.map(str.encode)), st.integers(0, 40))
def test_llama_like_streams_line_by_line(chunks: list[bytes], limit: int) -> None:
    """Events split across reads, with a small raw limit: every path, mixed in one read."""
    with patch.object(_sse, "_RAW_LIMIT", limit):
        got = assert_same(chunks)
    assert (got.fed, got.flushed) == (ours([b"".join(chunks)]).fed, [])


@settings(max_examples=300)
@given(_chunked(st.binary(max_size=200)))
def test_random_bytes_match_httpx_sse(chunks: list[bytes]) -> None:
    assume(not b"".join(chunks).startswith(BOM[:1]))  # difference 4
    assert_same(chunks)


@settings(max_examples=300)
@given(_stream, st.data())
def test_any_split_gives_the_same_payloads(body: bytes, data: st.DataObject) -> None:
    whole = ours([body])
    cuts = data.draw(st.lists(st.integers(0, len(body)), max_size=len(body) + 1))
    split = ours(split_at(body, cuts))
    assert (split.fed, split.flushed) == (whole.fed, whole.flushed)
    single = ours([body[i : i + 1] for i in range(len(body))])
    assert (single.fed, single.flushed) == (whole.fed, whole.flushed)
    assert single.decoder.last_event_id == whole.decoder.last_event_id
    assert single.decoder.retry == whole.decoder.retry


# --- paths the random tests reach only by luck ---------------------------------------------------


@pytest.mark.parametrize("head", [b"data: ", b"event: x\nid: 9\ndata: a\ndata: "])
def test_huge_unfinished_last_line_in_pieces_is_joined_in_order_at_flush(head: bytes) -> None:
    """The body ends inside a line bigger than the raw limit that came in many reads."""
    pieces = [bytes([65 + i % 26]) * 997 for i in range(_sse._RAW_LIMIT // 997 + 9)]
    decoder = SSEDecoder()
    assert decoder.feed(head) == []
    for piece in pieces:
        assert decoder.feed(piece) == []
    assert len(decoder._line) > 1  # kept as pieces: the path under test
    flushed = decoder.flush()
    line = b"".join(pieces)
    if head == b"data: ":
        assert flushed == [line]
        assert decoder.last_event_type == b"message"
    else:
        assert flushed == []  # an event of type "x" is not returned...
        assert decoder.last_event_type == b"x"  # ...but it was dispatched
        assert decoder.last_event_id == b"9"
    assert decoder.flush() == []  # nothing is left behind
    assert decoder.feed(b"data: next\n\ndata: cut") == [b"next"]
    assert decoder.flush() == [b"cut"]


def test_huge_unfinished_line_raw_then_pieces_at_flush() -> None:
    """Past the raw limit within one read, then more pieces, then the body ends."""
    big = b"data: " + b"a" * (_sse._RAW_LIMIT + 10)
    decoder = SSEDecoder()
    assert decoder.feed(b"data: x\n\n" + big) == [b"x"]
    assert decoder.feed(b"b" * 10) == []
    assert decoder.feed(b"c" * 10) == []
    assert decoder.flush() == [big[6:] + b"b" * 10 + b"c" * 10]


def test_small_unfinished_event_in_pieces_at_flush() -> None:
    decoder = SSEDecoder()
    for piece in (b"da", b"ta: a", b"b", b"\ndata: c", b"d"):
        assert decoder.feed(piece) == []
    assert decoder.flush() == [b"ab\ncd"]


def test_cr_then_empty_read_then_lf_is_one_line_end() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"") == []
    assert decoder.feed(b"") == []
    # the "\n" ends the "\r\n" of "data: a": the event goes on, so one event "a\nb"
    assert decoder.feed(b"\ndata: b\n\n") == [b"a\nb"]
    # a "\r" at the end of a read still pairs with a "\n" after an empty read; a lone
    # "\r" followed by another line end is a blank line
    assert decoder.feed(b"data: c\r") == []
    assert decoder.feed(b"") == []
    assert decoder.feed(b"\r") == [b"c"]
    assert decoder.feed(b"\n") == []  # the "\n" of that second "\r\n"
    assert decoder.feed(b"\ndata: d\n\n") == [b"d"]  # ...so this "\n" is a blank line


def test_empty_reads_change_nothing() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"") == []
    assert decoder.feed(b"\xef") == []
    assert decoder.feed(b"") == []
    assert decoder.feed(b"\xbb\xbfdata: a\n") == []
    assert decoder.feed(b"") == []
    assert decoder.feed(b"\n") == [b"a"]


def test_last_event_type_is_message_by_default() -> None:
    assert SSEDecoder().last_event_type == b"message"


def _after_other(chunk: bytes) -> tuple[list[bytes], bytes]:
    """Feed an ``other`` event, then ``chunk``: what it returns and the last event type."""
    decoder = SSEDecoder()
    assert decoder.feed(b"event: other\ndata: o\n\n") == []
    assert decoder.last_event_type == b"other"
    return decoder.feed(chunk), decoder.last_event_type


@pytest.mark.parametrize(
    ("chunk", "fed", "kind"),
    [
        (b"data: a\n\n", [b"a"], b"message"),  # one event per read
        (b"data: a\n\ndata: b\n\n", [b"a", b"b"], b"message"),  # several
        (b"data: a\n\ndata: b", [b"a"], b"message"),  # several, the last cut
        (b"data: a", [], b"other"),  # only the start of an event: none completed
        (b":\n\ndata: a\n\n", [b"a"], b"message"),  # a ping first: the per-block path
        (b":\n\n", [], b"other"),  # a ping is no event
        (b"id: 1\n\n", [], b"other"),  # nor is an event without data
        (b"event: third\ndata: c\n\n", [], b"third"),
        (b"event: third\ndata: c\n\ndata: m\n\n", [b"m"], b"message"),
        (b"event: message\ndata: c\n\n", [b"c"], b"message"),
        (b"data: a\ndata: b\n\n", [b"a\nb"], b"message"),
    ],
)
def test_last_event_type_on_every_path(chunk: bytes, fed: list[bytes], kind: bytes) -> None:
    assert _after_other(chunk) == (fed, kind)


def test_last_event_type_line_by_line() -> None:
    with patch.object(_sse, "_RAW_LIMIT", 4):
        decoder = SSEDecoder()
        assert decoder.feed(b"event: other\ndata: o\n") == []
        assert decoder.feed(b"\n") == []
        assert decoder.last_event_type == b"other"
        assert decoder.feed(b"data: long line\n") == []
        assert decoder.feed(b"\n") == [b"long line"]
        assert decoder.last_event_type == b"message"


def test_decoder_state_properties() -> None:
    decoder = SSEDecoder()
    assert (decoder.last_event_id, decoder.retry) == (b"", None)
    decoder.feed(b"id: 4\nretry: 250\ndata: x\n\nid\nretry: x\n\n")
    assert (decoder.last_event_id, decoder.retry) == (b"", 250)  # "id" alone resets it
    decoder.feed(b"id:  5\n\n")
    assert decoder.last_event_id == b" 5"  # only one space is stripped


@pytest.mark.parametrize(
    ("line", "fed"),
    [
        (b"data:x", [b"x"]),
        (b"data:  x", [b" x"]),
        (b"data", [b""]),
        (b"data:", [b""]),
        (b"data :x", []),
        (b"DATA: x", []),
        (b": data: x", []),
        (b"data: a:b", [b"a:b"]),
    ],
)
def test_field_lines(line: bytes, fed: list[bytes]) -> None:
    for prefix in (b"", b":\n"):  # at an event boundary, and after a comment (per-line path)
        assert ours([prefix + line + b"\n\n"]).fed == fed, prefix


def test_line_by_line_event_then_whole_events_in_one_read() -> None:
    """An event kept line by line ends in a read that also holds whole events."""
    big = b"x" * (_sse._RAW_LIMIT + 1)
    decoder = SSEDecoder()
    assert decoder.feed(b"data: " + big + b"\n") == []  # over the limit: line by line
    assert decoder.feed(b"data: y\n\ndata: z\n\nevent: e\ndata: w\n\ndata: v") == [
        big + b"\ny",
        b"z",
    ]
    assert decoder.last_event_type == b"e"
    assert decoder.feed(b"\n\n") == [b"v"]


def test_line_by_line_event_ended_by_a_blank_line_at_a_read_start() -> None:
    big = b"x" * (_sse._RAW_LIMIT + 1)
    decoder = SSEDecoder()
    assert decoder.feed(b"data: " + big + b"\n") == []
    assert decoder.feed(b"\ndata: a\n\n") == [big, b"a"]
    assert decoder.feed(b"data: " + big + b"\ndata: b\n") == []
    assert decoder.feed(b"data: c") == []  # no blank line yet: lines are kept
    assert decoder.feed(b"\n\n") == [big + b"\nb\nc"]


def test_line_by_line_event_ends_exactly_at_its_blank_line() -> None:
    """Nothing of the event's last line is read again after its blank line (an ``id`` tail
    re-read as a field would reset the last event id)."""
    big = b"x" * (_sse._RAW_LIMIT + 1)
    decoder = SSEDecoder()
    assert decoder.feed(b"id: 7\ndata: " + big + b"\n") == []
    assert decoder.feed(b"data: paid\n\n") == [big + b"\npaid"]
    assert decoder.last_event_id == b"7"
    assert decoder.feed(b"data: " + big + b"\n") == []
    assert decoder.feed(b"data: a\n\ndata: b\n\n") == [big + b"\na", b"b"]


def test_two_line_event_after_a_whole_one_in_one_read() -> None:
    """The all-one-line-events fast path must not take an event of two data lines."""
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n\ndata: b\ndata: c\n") == [b"a"]
    assert decoder.feed(b"\n") == [b"b\nc"]


def test_decoder_reused_after_flush_of_a_small_event() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a") == []
    assert decoder.flush() == [b"a"]
    assert decoder.feed(b"data: b\n\ndata: c") == [b"b"]
    assert decoder.flush() == [b"c"]
    assert decoder.flush() == []
