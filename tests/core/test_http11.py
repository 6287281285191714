"""``llamaclient._protocol.http11``: HTTP/1.1 response framing without I/O.

First a differential test against h11 (hypothesis: random valid responses, then the same
with bytes flipped, inserted or deleted; ours fed whole, split at every position, byte by
byte and at random cuts): either both give the same status, headers, body, trailers and
bytes after the body, or both reject, or the difference is one of the deliberate ones
(:data:`DELIBERATE`), checked to be what it claims. Then a unit test for every rule.
"""

from __future__ import annotations

import gzip
import itertools
import re
import zlib
from dataclasses import dataclass, field

import h11
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llamaclient._protocol import http11
from llamaclient._protocol.http11 import (
    BODY,
    DONE,
    HEAD,
    MAX_DECODED,
    MAX_HEAD,
    MAX_LINE,
    ChunkedReader,
    ContentLengthReader,
    Http10Reader,
    Http11Error,
    ResponseParser,
    body_framing,
    chunk_size,
    content_decoder,
    keep_alive,
    parse_head,
)

# -- the two parsers, as comparable results -------------------------------------------------

Fields = list[tuple[bytes, bytes]]


@dataclass
class Parsed:
    status: int
    headers: Fields
    body: bytes
    trailers: Fields = field(default_factory=list)
    trailing: bytes = b""


def normalised(fields: list[tuple[str, str]]) -> Fields:
    """Our fields as h11 reports them: names lower-cased, Transfer-Encoding lower-cased,
    Content-Length stripped and given once (h11 drops repeats of the same value)."""
    out: Fields = []
    seen_length = False
    for name, value in fields:
        key = name.lower().encode()
        raw = value.encode("latin-1")
        if key == b"transfer-encoding":
            raw = raw.lower()
        elif key == b"content-length":
            if seen_length:
                continue
            seen_length = True
            raw = {v.strip() for v in raw.split(b",")}.pop()
        out.append((key, raw))
    return out


def theirs(wire: bytes, method: bytes = b"GET") -> Parsed | h11.ProtocolError:
    """h11's reading of ``wire`` followed by the end of the connection."""
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method=method, target="/", headers=[("Host", "x")]))
    conn.send(h11.EndOfMessage())
    result = Parsed(0, [], b"")
    body = []
    try:
        conn.receive_data(wire)
        conn.receive_data(b"")
        while True:
            event = conn.next_event()
            if isinstance(event, h11.Response):
                result.status = event.status_code
                result.headers = list(event.headers)
            elif isinstance(event, h11.Data):
                body.append(event.data)
            elif isinstance(event, h11.EndOfMessage):
                result.trailers = list(event.headers)
            elif isinstance(event, h11.InformationalResponse):
                continue
            else:  # ConnectionClosed, PAUSED, NEED_DATA
                break
    except h11.ProtocolError as exc:
        return exc
    if event is h11.NEED_DATA:  # pragma: no cover - EOF always ends it
        raise AssertionError("h11 wants more data after EOF")
    result.body = b"".join(body)
    result.trailing = conn.trailing_data[0]
    return result


def ours(pieces: list[bytes], head_only: bool = False) -> Parsed | Http11Error:
    parser = ResponseParser(head_only=head_only)
    try:
        for piece in pieces:
            parser.feed(piece)
        parser.eof()
        while parser.backlog:
            parser.pump()
    except Http11Error as exc:
        return exc
    assert parser.state == DONE
    return Parsed(
        parser.status,
        normalised(parser.fields),
        b"".join(parser.body),
        normalised(parser.trailers),
        parser.trailing,
    )


def cuts(wire: bytes, at: list[int]) -> list[bytes]:
    bounds = [0, *sorted(set(at)), len(wire)]
    return [wire[a:b] for a, b in itertools.pairwise(bounds) if b > a]


# The deliberate differences, each with a check that the wire really has what it says.
BARE_LF = re.compile(rb"(?<!\r)\n")
OBS_FOLD = re.compile(rb"\n[ \t]")
VERSION = re.compile(rb"HTTP/(?!1\.[01])[0-9]\.[0-9]")
LONG_SIZE = re.compile(rb"\n[0-9A-Fa-f]{17,20}[;\r \t]")
EXT_CONTROL = re.compile(rb";[^\n]*?(?:[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\r(?!\n))")

DELIBERATE: dict[str, re.Pattern[bytes]] = {
    "bare-lf": BARE_LF,  # h11 takes a bare LF as a line end in heads and trailers
    "obs-fold": OBS_FOLD,  # h11 unfolds obsolete folded lines
    "version": VERSION,  # h11 takes any HTTP/d.d
    "chunk-size": LONG_SIZE,  # h11 allows 20 hex digits, we 16
    "chunk-ext": EXT_CONTROL,  # h11 allows control characters in chunk extensions
}


def compare(wire: bytes, head_only: bool = False) -> None:
    """The differential check of one wire (fed whole, then split many ways)."""
    method = b"HEAD" if head_only else b"GET"
    reference = theirs(wire, method)
    whole = ours([wire], head_only)
    if isinstance(whole, Http11Error):
        if not isinstance(reference, h11.ProtocolError):
            pattern = DELIBERATE.get(whole.rule)
            assert pattern is not None, (wire, whole.rule, str(whole))
            assert pattern.search(wire), (wire, whole.rule)
    elif isinstance(reference, h11.ProtocolError):
        # We accept what h11 refuses in two cases only: a 101 nobody asked for (ours ends
        # the response there), and bytes after a complete response on a connection the
        # server said it would close (h11: "Got data when expecting EOF"; ours: kept in
        # ``trailing``, so the connection is not reused).
        if whole.status != 101:
            assert whole.trailing, (wire, str(reference))
            assert "expecting EOF" in str(reference), (wire, str(reference))
    else:
        assert whole == reference, wire
    # Split anywhere, the same outcome.
    positions: list[list[int]] = [[i] for i in range(1, len(wire))]
    positions.append(list(range(1, len(wire))))
    for at in positions:
        split = ours(cuts(wire, at), head_only)
        if isinstance(whole, Http11Error):
            assert isinstance(split, Http11Error), (wire, at)
        else:
            assert split == whole, (wire, at)


# -- hypothesis: random valid responses ------------------------------------------------------

TOKENS = st.sampled_from(["X-A", "x-b", "Server", "Content-Type", "Keep-Alive", "X_Y", "a!#$"])
VALUE_CHARS = st.characters(min_codepoint=0x21, max_codepoint=0xFF, exclude_characters="\x7f")
VALUES = st.builds(
    lambda words, sep: sep.join(words),
    st.lists(st.text(VALUE_CHARS, min_size=1, max_size=6), max_size=3),
    st.sampled_from([" ", "\t", "  "]),
)
OWS = st.sampled_from(["", " ", "\t", " \t"])


@st.composite
def header_lines(draw: st.DrawFn) -> list[bytes]:
    lines = []
    for _ in range(draw(st.integers(0, 4))):
        name, value = draw(TOKENS), draw(VALUES)
        lines.append(f"{name}:{draw(OWS)}{value}{draw(OWS)}".encode("latin-1"))
    return lines


@st.composite
def responses(draw: st.DrawFn) -> tuple[bytes, bool]:
    """A valid response (maybe after interim ones) and whether it answers a HEAD."""
    head_only = draw(st.booleans()) and draw(st.booleans())
    wire = b""
    for code in draw(st.lists(st.sampled_from([100, 103]), max_size=2)):
        wire += b"HTTP/1.1 %d Info\r\n" % code + b"".join(
            line + b"\r\n" for line in draw(header_lines())
        )
        wire += b"\r\n"
    version = draw(st.sampled_from([b"1.1", b"1.1", b"1.0"]))
    status = draw(st.sampled_from([200, 200, 201, 204, 206, 304, 404, 500, 503]))
    reason = draw(st.sampled_from([b" OK", b"", b" ", b" Not\tFound here"]))
    lines = draw(header_lines())
    connection = draw(st.sampled_from([None, b"close", b"keep-alive", b"Keep-Alive, Close"]))
    if connection is not None:
        lines.append(b"Connection: " + connection)
    body = draw(st.binary(max_size=60))
    framing = draw(st.sampled_from(["chunked", "length", "close"]))
    if framing == "chunked":
        lines.append(b"Transfer-Encoding: " + draw(st.sampled_from([b"chunked", b"Chunked"])))
        if draw(st.booleans()) and draw(st.booleans()):
            lines.append(b"Content-Length: 3")  # Transfer-Encoding wins
        at = draw(st.lists(st.integers(1, max(1, len(body) - 1)), max_size=4))
        pieces = cuts(body, at) if body else []
        ext = draw(st.sampled_from([b"", b";a=1", b';q="x y";z', b";", b"; \t"]))
        digits = draw(st.sampled_from([b"%x", b"%X", b"%03x"]))
        payload = b"".join(digits % len(p) + ext + b"\r\n" + p + b"\r\n" for p in pieces)
        trailers = b"".join(line + b"\r\n" for line in draw(header_lines()))
        payload += b"0" + ext + draw(OWS).encode() + b"\r\n" + trailers + b"\r\n"
    elif framing == "length":
        n = b"%d" % len(body)
        n = draw(st.sampled_from([n, b"0" + n]))
        lines.append(b"Content-Length: " + draw(st.sampled_from([n, n + b", " + n])))
        if draw(st.booleans()) and draw(st.booleans()):
            lines.append(b"content-length: " + n)
        payload = body
    else:
        payload = body
    extra = draw(st.sampled_from([b"", b"", b"HTTP/1.1 200 OK\r\n"]))
    wire += b"HTTP/" + version + b" %d" % status + reason + b"\r\n"
    wire += b"".join(line + b"\r\n" for line in lines) + b"\r\n" + payload + extra
    return wire, head_only


MUTATION_BYTES = st.sampled_from([*list(b"\r\n \t\x00:;0xaF9-+_\x0b\x7f\x80"), 255])


@st.composite
def mutated(draw: st.DrawFn) -> tuple[bytes, bool]:
    wire, head_only = draw(responses())
    data = bytearray(wire)
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["flip", "insert", "delete"]))
        i = draw(st.integers(0, len(data) - 1))
        if op == "flip":
            data[i] = draw(MUTATION_BYTES | st.integers(0, 255))
        elif op == "insert":
            data.insert(i, draw(MUTATION_BYTES))
        elif len(data) > 1:
            del data[i]
    return bytes(data), head_only


# In a mutation run (tests/support/mutation_plugin.py loads the "mutation" profile) every
# surviving mutant pays for every example of these tests (each compares every split of each
# example): there they take fewer, still the same ones for every mutant.
MUTATION = settings.get_current_profile_name() == "mutation"
FAST = settings(
    deadline=None,
    max_examples=60 if MUTATION else 300,
    suppress_health_check=[HealthCheck.too_slow],
)


@FAST
@given(responses())
def test_differential_valid_responses(case: tuple[bytes, bool]) -> None:
    wire, head_only = case
    assert isinstance(ours([wire], head_only), Parsed), wire  # the generator makes valid ones
    compare(wire, head_only)


@settings(FAST, max_examples=150 if MUTATION else 1000)
@given(mutated())
def test_differential_mutated_responses(case: tuple[bytes, bool]) -> None:
    compare(*case)


@pytest.mark.parametrize(
    "wire",
    [
        b"HTTP/1.1 200 OK\nContent-Length: 1\n\nx",  # bare LF line ends
        b"HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 1\r\n\r\nx",  # obs-fold
        b"HTTP/2.0 200 OK\r\nContent-Length: 1\r\n\r\nx",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"0" * 16
        + b"1\r\nx\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;a\x01\r\nx\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\nT: 1\n\n",
        b"HTTP/1.1 101 Switching\r\nUpgrade: x\r\n\r\nother protocol",
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nxy",
        b"HTTP/1.1 200 OK\r\n\r\nabc",
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    ],
)
def test_differential_deliberate_differences(wire: bytes) -> None:
    compare(wire)


# -- the head ---------------------------------------------------------------------------------


def parse(wire: bytes, head_only: bool = False) -> ResponseParser:
    parser = ResponseParser(head_only=head_only)
    parser.feed(wire)
    return parser


def rejected(wire: bytes, rule: str | None = None, eof: bool = False) -> Http11Error:
    def run() -> None:
        parser = ResponseParser()
        parser.feed(wire)
        if eof:
            parser.eof()

    with pytest.raises(Http11Error) as info:
        run()
    if rule is not None:
        assert info.value.rule == rule, str(info.value)
    return info.value


def test_status_line_and_headers() -> None:
    p = parse(b"HTTP/1.1 404 Not  Found\r\nA: 1\r\nb:2 \r\nA:\t x y \r\nEmpty:\r\n\r\n")
    assert (p.version, p.status, p.reason) == ("1.1", 404, "Not  Found")
    assert p.fields == [("A", "1"), ("b", "2"), ("A", "x y"), ("Empty", "")]
    assert p.headers == {"a": "1, x y", "b": "2", "empty": ""}
    assert p.state == BODY
    assert p.started
    assert parse(b"HTTP/1.0 200\r\n\r\n").reason == ""  # the reason phrase is optional
    assert parse(b"HTTP/1.1 200 \xe9t\xe9\r\n\r\n").reason == "\xe9t\xe9"


@pytest.mark.parametrize(
    ("wire", "rule"),
    [
        (b"HTTP/1.1 2000 OK\r\n\r\n", "status"),
        (b"HTTP/1.1 20 OK\r\n\r\n", "status"),
        (b"HTTP/1.1 2x0 OK\r\n\r\n", "status"),
        (b"HTTP/1.1 099 Low\r\n\r\n", "status"),
        (b"HTTP/1.1  200 OK\r\n\r\n", "status"),
        (b"HTTP/1.1 200 O\x00K\r\n\r\n", "status"),
        (b"HTTP/1.1 200 O\rK\r\n\r\n", "status"),
        (b"FTP/1.1 200 OK\r\n\r\n", "status"),
        (b"\r\nHTTP/1.1 200 OK\r\n\r\n", "status"),
        (b"HTTP/2 200 OK\r\n\r\n", "status"),
        (b"HTTP/2.0 200 OK\r\n\r\n", "version"),
        (b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n", "header"),
        (b"HTTP/1.1 200 OK\r\nX : y\r\n\r\n", "header"),  # whitespace before the colon
        (b"HTTP/1.1 200 OK\r\n: y\r\n\r\n", "header"),
        (b"HTTP/1.1 200 OK\r\nX(y): z\r\n\r\n", "header"),  # not a token
        (b"HTTP/1.1 200 OK\r\nX: a\x00b\r\n\r\n", "header"),
        (b"HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n", "header"),
        (b"HTTP/1.1 200 OK\r\nX: a\x0bb\r\n\r\n", "header"),
        (b"HTTP/1.1 200 OK\r\nX: a\nb: c\r\n\r\n", "bare-lf"),
        (b"HTTP/1.1 200 OK\nX: a\n\n", "bare-lf"),
        (b"HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n", "obs-fold"),
        (b"HTTP/1.1 200 OK\r\n\tX: a\r\n\r\n", "obs-fold"),
        (b"HTTP/1.1 100 Continue\r\nX : a\r\n\r\n", "header"),  # interim heads are checked
        (b"\x16\x03\x01\x02\x00", "status"),  # a TLS handshake: refused at once
    ],
)
def test_bad_heads(wire: bytes, rule: str) -> None:
    rejected(wire, rule)


def test_head_too_long_counts_the_head_only() -> None:
    parser = ResponseParser()
    parser.feed(b"HTTP/1.1 200 OK\r\n")
    filler = b"X: " + b"a" * 1000 + b"\r\n"
    while len(parser._head) + len(filler) <= MAX_HEAD:
        parser.feed(filler)
    with pytest.raises(Http11Error) as info:
        parser.feed(filler)
    assert info.value.rule == "too-long"
    big = parse(b"HTTP/1.1 200 OK\r\nX: " + b"a" * (MAX_HEAD - 100) + b"\r\n\r\n" + b"b" * MAX_HEAD)
    assert big.state == BODY  # what follows the head does not count


def test_head_split_anywhere_and_interim_responses() -> None:
    wire = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Hints\r\nLink: <a>\r\n\r\n"
    wire += b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    for i in range(1, len(wire)):
        parser = ResponseParser()
        parser.feed(wire[:i])
        assert parser.started
        parser.feed(wire[i:])
        assert (parser.status, b"".join(parser.body), parser.state) == (200, b"ok", DONE), i
    only_interim = parse(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert only_interim.state == HEAD
    assert only_interim.started  # bytes arrived, though no head is pending
    assert not ResponseParser().started


def test_101_ends_the_response_and_keeps_what_follows() -> None:
    p = parse(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: ws\r\n\r\n\x81\x00")
    assert (p.status, p.state, p.body, p.trailing) == (101, DONE, [], b"\x81\x00")
    assert not p.keep_alive


def test_parse_head_directly() -> None:
    head = parse_head(b"HTTP/1.1 200 OK\r\nA: b\r\n\r\n")
    assert (head.version, head.status, head.reason, head.fields) == ("1.1", 200, "OK", [("A", "b")])
    with pytest.raises(Http11Error):
        parse_head(b"HTTP/1.1 200 OK\r\n")


# -- framing and keep-alive decisions ----------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "head_only", "headers", "te", "expected"),
    [
        (200, True, {"content-length": "5"}, 0, ("none", 0)),
        (204, False, {"content-length": "5"}, 0, ("none", 0)),
        (304, False, {"transfer-encoding": "chunked"}, 1, ("none", 0)),
        (101, False, {}, 0, ("none", 0)),
        (200, False, {"transfer-encoding": "Chunked", "content-length": "5"}, 1, ("chunked", 0)),
        (200, False, {"content-length": "5, 5"}, 0, ("length", 5)),
        (200, False, {"content-length": "007"}, 0, ("length", 7)),
        (200, False, {"content-length": "0"}, 0, ("none", 0)),
        (200, False, {}, 0, ("close", 0)),
    ],
)
def test_body_framing(
    status: int, head_only: bool, headers: dict[str, str], te: int, expected: tuple[str, int]
) -> None:
    assert body_framing(status, head_only, headers, te) == expected


@pytest.mark.parametrize(
    ("headers", "te"),
    [
        ({"content-length": "5, 6"}, 0),
        ({"content-length": "5,"}, 0),
        ({"content-length": "-5"}, 0),
        ({"content-length": "+5"}, 0),
        ({"content-length": "5 5"}, 0),
        ({"content-length": "1" * 21}, 0),
        ({"content-length": "\xb2"}, 0),
        ({"transfer-encoding": "gzip, chunked"}, 1),
        ({"transfer-encoding": "identity"}, 1),
        ({"transfer-encoding": "chunked, chunked"}, 2),
    ],
)
def test_body_framing_refuses(headers: dict[str, str], te: int) -> None:
    with pytest.raises(Http11Error) as info:
        body_framing(200, False, headers, te)
    assert info.value.rule == "framing"
    with pytest.raises(Http11Error):  # checked even when there is no body
        body_framing(204, True, headers, te)


def test_repeated_content_length_headers() -> None:
    assert parse(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\ncontent-length: 1\r\n\r\nx").body == [
        b"x"
    ]
    rejected(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nx", "framing")
    rejected(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n")


@pytest.mark.parametrize(
    ("version", "status", "headers", "framing", "expected"),
    [
        ("1.1", 200, {}, "length", True),
        ("1.1", 200, {"connection": "keep-alive"}, "chunked", True),
        ("1.1", 200, {"connection": "Keep-Alive, CLOSE"}, "length", False),
        ("1.1", 200, {}, "close", False),
        ("1.0", 200, {"connection": "keep-alive"}, "length", False),  # like h11
        ("1.1", 101, {}, "none", False),
        ("1.1", 200, {"transfer-encoding": "chunked", "content-length": "3"}, "chunked", False),
    ],
)
def test_keep_alive(
    version: str, status: int, headers: dict[str, str], framing: http11.Framing, expected: bool
) -> None:
    assert keep_alive(version, status, headers, framing) is expected


# -- bodies -----------------------------------------------------------------------------------

CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


def test_content_length_body_and_what_follows() -> None:
    p = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nab")
    assert (p.state, p.body) == (BODY, [b"ab"])
    p.feed(b"cHTTP")
    assert (p.state, p.body, p.trailing, p.keep_alive) == (DONE, [b"ab", b"c"], b"HTTP", False)
    p.feed(b"x" * (2 * MAX_HEAD))
    p.feed(b"y")
    assert len(p.trailing) == MAX_HEAD  # kept up to a bound
    p.eof()  # nothing to do once done
    exact = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc")
    assert (exact.state, exact.body, exact.trailing, exact.keep_alive) == (
        DONE,
        [b"abc"],
        b"",
        True,
    )


def test_head_and_empty_bodies_keep_what_follows() -> None:
    p = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nnext", head_only=True)
    assert (p.state, p.body, p.trailing) == (DONE, [], b"next")
    p = parse(b"HTTP/1.1 204 No Content\r\n\r\n")
    assert (p.state, p.trailing, p.keep_alive) == (DONE, b"", True)


def test_until_close_body() -> None:
    p = parse(b"HTTP/1.1 200 OK\r\n\r\nab")
    p.feed(b"cd")
    assert p.state == BODY
    p.eof()
    assert (p.state, b"".join(p.body), p.keep_alive) == (DONE, b"abcd", False)


def test_eof_too_early() -> None:
    for wire in (
        b"",
        b"HTTP/1.1 200",
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nab",
        CHUNKED + b"3\r\nab",
    ):
        rejected(wire, "incomplete", eof=True)


def test_chunked_body_with_extensions_and_trailers() -> None:
    wire = (
        CHUNKED
        + b'5;a=1;b="x y"\r\nhello\r\n1 \r\n \r\nA\r\n0123456789\r\n0\r\nT: 1\r\nU: 2\r\n\r\n'
    )
    for i in range(len(wire) + 1):
        p = ResponseParser()
        p.feed(wire[:i])
        if i < len(wire):
            p.feed(wire[i:])
        assert (p.state, b"".join(p.body)) == (DONE, b"hello 0123456789"), i
        assert p.trailers == [("T", "1"), ("U", "2")]
        assert p.keep_alive
    assert ResponseParser().trailers == []


@pytest.mark.parametrize(
    ("body", "rule"),
    [
        (b"0x3\r\nabc\r\n", "chunk-size"),
        (b"+3\r\nabc\r\n", "chunk-size"),
        (b"-3\r\nabc\r\n", "chunk-size"),
        (b"1_0\r\n", "chunk-size"),
        (b" 3\r\nabc\r\n", "chunk-size"),
        (b"3 ;x\r\nabc\r\n", "chunk-size"),  # h11 too: no whitespace before ";"
        (b"\r\nabc\r\n", "chunk-size"),
        (b"g\r\n", "chunk-size"),
        (b"1" * 17 + b"\r\n", "chunk-size"),
        (b"1;a\x00\r\nx\r\n", "chunk-ext"),
        (b"1;a\rb\r\nx\r\n", "chunk-ext"),
        (b"3\r\nabcXY", "chunk-size"),
        (b"3\r\nabc\rX", "chunk-size"),
        (b"3\r\nabc\n", "chunk-size"),
        (b"1\n", "bare-lf"),
        (b"0\r\nT: 1\n", "bare-lf"),
        (b"0\r\nT : 1\r\n\r\n", "header"),
        (b"0\r\nT: 1\r\n  folded\r\n\r\n", "obs-fold"),
    ],
)
def test_bad_chunking(body: bytes, rule: str) -> None:
    rejected(CHUNKED + body, rule)


def test_chunk_size_function() -> None:
    assert chunk_size(b"1A") == 26
    assert chunk_size(b"00ff;x=y") == 255
    assert chunk_size(b"ff \t") == 255
    assert chunk_size(b"f" * 16) == 2**64 - 1


def test_a_big_read_that_ends_inside_a_size_line_or_trailers_is_fine() -> None:
    # The length checks count the incomplete line (or trailer section) only, not the read.
    data = b"a" * (256 * 1024)
    big = CHUNKED + b"%x\r\n" % len(data) + data + b"\r\n"
    for tail, rest in [
        (b"1", b"0\r\nxxxxxxxxxxxxxxxx\r\n0\r\n\r\n"),
        (b"0;ext=" + b"e" * 100, b"\r\n\r\n"),
        (b"0\r\nT: 1\r\n", b"U: 2\r\n\r\n"),
        (b"0\r\nT: 1\r\nU: ", b"2\r\n\r\n"),
    ]:
        p = ResponseParser()
        p.feed(big + tail)
        assert p.state == BODY
        p.feed(rest)
        assert p.state == DONE
    rejected(CHUNKED + b"1;" + b"e" * MAX_LINE, "too-long")
    rejected(CHUNKED + b"0\r\nT: " + b"t" * MAX_HEAD, "too-long")


def test_lines_may_be_cut_at_their_cr() -> None:
    p = parse(CHUNKED + b"3\r\nabc\r")
    p.feed(b"\n0\r")
    p.feed(b"\n\r")
    p.feed(b"\n")
    assert (p.state, p.body) == (DONE, [b"abc"])
    p = parse(CHUNKED + b"3\r\nabc\r")
    with pytest.raises(Http11Error):
        p.feed(b"X")


def test_readers_directly() -> None:
    out: list[bytes] = []
    ends: list[bytes] = []
    reader = ContentLengthReader(3, out, ends.append)
    reader.feed(b"")
    reader.feed(b"abcd")
    assert (out, ends) == ([b"abc"], [b"d"])
    close = Http10Reader(out, ends.append)
    close.feed(b"")
    close.feed(b"x")
    close.eof()
    assert (out, ends) == ([b"abc", b"x"], [b"d", b""])
    chunked = ChunkedReader(out, ends.append)
    chunked.feed(b"0\r\n\r\n")
    with pytest.raises(Http11Error) as info:
        chunked.feed(b"1\r\nx\r\n")  # the parser never does this: it takes such bytes itself
    assert (info.value.rule, str(info.value)) == (
        "framing",
        "data after the end of the chunked body",
    )


# -- content codings ----------------------------------------------------------------------------


def encoded(coding: bytes, body: bytes, framing: str = "length") -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Encoding: " + coding + b"\r\n"
    if framing == "chunked":
        pieces = [body[i : i + 7] for i in range(0, len(body), 7)]
        return (
            head
            + b"Transfer-Encoding: chunked\r\n\r\n"
            + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)
            + b"0\r\n\r\n"
        )
    if framing == "close":
        return head + b"\r\n" + body
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


def decoded(wire: bytes, step: int = 0) -> ResponseParser:
    p = ResponseParser()
    for i in range(0, len(wire), step or len(wire)):
        p.feed(wire[i : i + (step or len(wire))])
    if p.state != DONE:
        p.eof()
    while p.backlog:
        p.pump()
    return p


TEXT = b"data: {'a': 1}\n\n" * 50


@pytest.mark.parametrize(
    ("coding", "data"),
    [
        (b"gzip", gzip.compress(TEXT)),
        (b"x-gzip", gzip.compress(TEXT)),
        (b"GZIP, identity", gzip.compress(TEXT)),
        (b"deflate", zlib.compress(TEXT)),
        (b"deflate", zlib.compress(TEXT)[2:-4]),  # raw deflate, as some servers send it
        (b"gzip", gzip.compress(TEXT[:300]) + gzip.compress(TEXT[300:])),  # two members
        (b"identity", TEXT),
    ],
)
@pytest.mark.parametrize("framing", ["length", "chunked", "close"])
@pytest.mark.parametrize("step", [0, 1, 5])
def test_content_codings(coding: bytes, data: bytes, framing: str, step: int) -> None:
    p = decoded(encoded(coding, data, framing), step)
    assert p.state == DONE
    assert b"".join(p.body) == TEXT


def test_empty_encoded_body_and_no_body() -> None:
    assert decoded(encoded(b"gzip", b"")).body == []
    p = parse(b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 4\r\n\r\n", True)
    assert p.state == DONE  # no body: the coding does not matter


@pytest.mark.parametrize(
    ("coding", "data", "message"),
    [
        (b"br", b"x", "unsupported content coding 'br'"),
        (b"gzip, deflate", b"x", "more than one content coding"),
        (b"gzip", b"not gzip at all", "gzip body is corrupt"),
        (b"gzip", gzip.compress(TEXT)[:-10], "gzip body is truncated"),
        (b"gzip", gzip.compress(TEXT) + b"junk", "gzip body is corrupt"),
        (b"deflate", zlib.compress(TEXT) + b"junk", "after the end of the deflate stream"),
        (b"deflate", b"\xff\xff\xff\xff", "deflate body is corrupt"),
    ],
)
def test_bad_content_codings(coding: bytes, data: bytes, message: str) -> None:
    with pytest.raises(Http11Error, match=message) as info:
        decoded(encoded(coding, data))
    assert info.value.rule == "encoding"


def test_deflate_wrapper_is_told_by_its_first_two_bytes() -> None:
    for data in (zlib.compress(TEXT), zlib.compress(TEXT)[2:-4]):
        wire = encoded(b"deflate", data)
        head = len(wire) - len(data)
        p = parse(wire[: head + 1])
        assert p.body == []
        p.feed(wire[head + 1 :])
        assert (p.state, b"".join(p.body)) == (DONE, TEXT)
    with pytest.raises(Http11Error, match="truncated"):
        parse(encoded(b"deflate", b"x"))  # one byte is not a deflate stream


def test_content_decoder_values() -> None:
    assert content_decoder(None) is None
    assert content_decoder("identity, ") is None
    decoder = content_decoder("deflate")
    assert decoder is not None
    assert decoder.coding == "deflate"
    assert decoder.finished  # nothing given yet


def test_a_zip_bomb_is_decoded_a_bounded_piece_at_a_time() -> None:
    bomb = gzip.compress(b"\0" * (64 * MAX_DECODED), 9)
    p = parse(encoded(b"gzip", bomb))
    pieces = [sum(map(len, p.body))]
    while p.backlog:
        p.body.clear()
        p.pump()
        pieces.append(sum(map(len, p.body)))
    assert p.state == DONE
    assert max(pieces) <= MAX_DECODED
    assert sum(pieces) == 64 * MAX_DECODED
    p.pump()  # nothing left: a no-op


def test_a_backlog_takes_more_input_without_decoding_it() -> None:
    bomb = gzip.compress(b"\0" * (4 * MAX_DECODED), 9)
    wire = encoded(b"gzip", bomb, "close")
    p = parse(wire[:-20])
    assert p.backlog
    p.feed(wire[-20:])  # kept for later: one feed decodes one bounded piece at most
    assert sum(map(len, p.body)) == MAX_DECODED
    p.eof()
    assert p.state == BODY  # the end is known, the decoding goes on
    total = MAX_DECODED
    while p.backlog:
        p.body.clear()
        p.pump()
        total += sum(map(len, p.body))
    assert (p.state, total) == (DONE, 4 * MAX_DECODED)


def test_bomb_cut_by_the_connection_is_truncated() -> None:
    bomb = gzip.compress(b"\0" * (4 * MAX_DECODED), 9)
    p = parse(encoded(b"gzip", bomb[:-12], "close"))
    p.eof()

    def drain() -> None:
        while p.backlog:
            p.pump()

    with pytest.raises(Http11Error, match="truncated"):
        drain()


def test_error_messages_are_bounded() -> None:
    error = rejected(b"HTTP/1.1 200 OK\r\n" + b"x" * 200 + b"\r\n\r\n", "header")
    assert len(str(error)) < 100


# -- what each error says (mutation testing: the text, not only the rule) ---------------------


@pytest.mark.parametrize(
    ("wire", "eof", "rule", "message"),
    [
        (b"HTTP/1.1 200 OK\nX: a\n\n", False, "bare-lf", "a line of the head ends in a bare LF"),
        (
            b"HTTP/1.1 200 OK\r\nX: a\nb: c\r\n\r\n",
            False,
            "bare-lf",
            "a line of the head ends in a bare LF",
        ),
        (
            b"HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n",
            False,
            "obs-fold",
            "obsolete folded header line b' b'",
        ),
        (
            b"HTTP/1.1 200 OK\r\n" + b"x" * 40 + b"\r\n\r\n",
            False,
            "header",
            "bad header line b'" + "x" * 40 + "'",
        ),
        (
            b"HTTP/1.1 200 OK\r\n" + b"x" * 41 + b"\r\n\r\n",
            False,
            "header",
            "bad header line b'" + "x" * 40 + "'...",
        ),
        (b"HTTP/1.1  200\r\n\r\n", False, "status", "bad status line b'HTTP/1.1  200'"),
        (b"HTTP/2.0 200 OK\r\n\r\n", False, "version", "not an HTTP/1.x response: HTTP/2.0"),
        (b"HTTP/1.1 099 x\r\n\r\n", False, "status", "bad status code 99"),
        (b"FTP/1.1", False, "status", "not an HTTP/1.x response: b'FTP/1.1'"),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\n",
            False,
            "framing",
            "conflicting Content-Length values",
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n",
            False,
            "framing",
            "bad Content-Length '-5'",
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: " + b"9" * 50 + b"\r\n\r\n",
            False,
            "framing",
            "bad Content-Length '" + "9" * 40 + "'",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            False,
            "framing",
            "unsupported Transfer-Encoding (only chunked is)",
        ),
        (CHUNKED + b"0x3\r\n", False, "chunk-size", "bad chunk-size line b'0x3'"),
        (CHUNKED + b"1" * 17 + b"\r\n", False, "chunk-size", "chunk size of 17 digits"),
        (CHUNKED + b"1;a\x00\r\n", False, "chunk-ext", "bad chunk extension b'1;a\\x00'"),
        (CHUNKED + b"3\r\nabcX", False, "chunk-size", "chunk data not followed by CRLF"),
        (
            CHUNKED + b"1;" + b"e" * MAX_LINE,
            False,
            "too-long",
            f"chunk-size line longer than {MAX_LINE} bytes",
        ),
        (CHUNKED + b"1\n", False, "bare-lf", "bare LF in a chunk-size line"),
        (
            CHUNKED + b"0\r\nT: " + b"t" * MAX_HEAD,
            False,
            "too-long",
            f"trailer section longer than {MAX_HEAD} bytes",
        ),
        (CHUNKED + b"0\r\nT: 1\n", False, "bare-lf", "bare LF in a trailer section"),
        (b"", True, "incomplete", "the connection ended before the response head"),
        (CHUNKED + b"1\r\n", True, "incomplete", "the connection ended inside a chunked body"),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\na",
            True,
            "incomplete",
            "the connection ended 2 bytes before the end of the body",
        ),
    ],
)
def test_error_messages_say_what_was_wrong(wire: bytes, eof: bool, rule: str, message: str) -> None:
    assert str(rejected(wire, rule, eof)) == message


# -- bounds and near misses (mutation testing: each limit at, and one past, its value) -------


def test_limits_are_inclusive() -> None:
    # A head of exactly MAX_HEAD bytes may wait for its end; one more byte is too long.
    start = b"HTTP/1.1 200 OK\r\nX: "
    p = parse(start + b"a" * (MAX_HEAD - len(start) - 1))
    p.feed(b"a")
    assert (p.state, len(p._head)) == (HEAD, MAX_HEAD)
    with pytest.raises(Http11Error, match="response head longer than"):
        p.feed(b"a")
    # A chunk-size line of exactly MAX_LINE bytes (held across reads) is fine, and so is a
    # held trailer section of exactly MAX_HEAD bytes.
    line = b"1;" + b"e" * (MAX_LINE - 2)
    p = parse(CHUNKED + line)
    p.feed(b"\r\nx\r\n0\r\n" + b"T: " + b"t" * (MAX_HEAD - 3))
    assert p.state == BODY
    p.feed(b"\r\n\r\n")
    assert (p.state, p.body, p.trailers) == (DONE, [b"x"], [("T", "t" * (MAX_HEAD - 3))])
    # Bytes after the body are kept up to exactly MAX_HEAD, whatever the reads.
    p = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx" + b"y" * (MAX_HEAD - 1))
    p.feed(b"z")
    p.feed(b"w")
    assert p.trailing == b"y" * (MAX_HEAD - 1) + b"z"


def test_content_length_digits_and_whitespace() -> None:
    assert body_framing(200, False, {"content-length": "9" * 20}, 0) == ("length", 10**20 - 1)
    assert body_framing(200, False, {"content-length": " 5\t, 5 "}, 0) == ("length", 5)
    for bad in ("5\xa0", "\x0b5", "X5", "5X"):  # only SP and HTAB are whitespace
        with pytest.raises(Http11Error, match="bad Content-Length"):
            body_framing(200, False, {"content-length": bad}, 0)
    with pytest.raises(Http11Error, match="bad Content-Length"):  # checked for HEAD too
        parse(b"HTTP/1.1 200 OK\r\nContent-Length: " + b"1" * 21 + b"\r\n\r\n", True)


def test_connection_tokens_are_split_on_commas_and_stripped_of_sp_and_htab_only() -> None:
    assert keep_alive("1.1", 200, {"connection": "upgrade,\t close \t"}, "length") is False
    assert keep_alive("1.1", 200, {"connection": "close\xa0"}, "length") is True  # like h11
    assert keep_alive("1.1", 200, {"connection": "closed"}, "length") is True
    assert keep_alive("1.1", 200, {"connection": "upgrade,close"}, "length") is False
    assert keep_alive("1.1", 200, {"connection": "a close"}, "length") is True  # one token
    p = parse(b"HTTP/1.1 200 OK\r\nConnection: x, close\r\nContent-Length: 1\r\n\r\nx")
    assert (p.state, p.keep_alive) == (DONE, False)


def test_chunk_data_that_looks_like_chunks_is_data() -> None:
    data = b"1\r\nx\r\n0\r\n\r\n"
    wire = CHUNKED + b"%x\r\n" % len(data) + data + b"\r\n0\r\n\r\n"
    for i in range(len(CHUNKED), len(wire) + 1):
        p = parse(wire[:i])
        p.feed(wire[i:])
        assert (p.state, b"".join(p.body), p.trailing) == (DONE, data, b""), i


@pytest.mark.parametrize(
    "body",
    [
        b"1\r\nx\r\r\n0\r\n\r\n",  # one byte too many before the CRLF
        b"2\r\nx\r\n0\r\n\r\n",  # one byte too few
        b"1\r\nxy\r\n0\r\n\r\n",
        b"1\r\nx\n\r\n0\r\n\r\n",
        b"1\r\nx\r\n\r\n",  # no last chunk: an empty size line
    ],
)
def test_chunks_of_the_wrong_size_are_refused_fed_whole_or_split(body: bytes) -> None:
    wire = CHUNKED + body

    def feed_split(i: int) -> None:
        p = ResponseParser()
        p.feed(wire[:i])
        p.feed(wire[i:])

    for i in range(len(CHUNKED), len(wire) + 1):
        with pytest.raises(Http11Error, match="chunk"):
            feed_split(i)


def test_chunked_body_pieces_are_the_chunks_and_nothing_empty() -> None:
    p = parse(CHUNKED + b"3\r\nabc\r\n2\r\nde\r\n")
    assert p.body == [b"abc", b"de"]
    p.feed(b"4\r\nfg")
    p.feed(b"hi")  # the chunk's data ends with the read
    p.feed(b"\r\n0\r\n\r\n")
    assert (p.state, p.body) == (DONE, [b"abc", b"de", b"fg", b"hi"])
    big = b"z" * 5000  # more than the sizes the fast path knows
    p = parse(CHUNKED + b"%x\r\n" % len(big) + big + b"\r\n" + b"1\r\ny\r\n")
    assert p.body == [big, b"y"]


def test_content_coding_names_in_errors_are_bounded() -> None:
    with pytest.raises(Http11Error) as info:
        content_decoder("gzip, " + "d" * 60)
    assert str(info.value) == "more than one content coding: " + repr("gzip, " + "d" * 34)
    with pytest.raises(Http11Error) as info:
        content_decoder(" \tX" + "y" * 60)
    assert str(info.value) == "unsupported content coding " + repr("x" + "y" * 39)
    for value in ("gzip\xa0", "gzip\x0b"):
        with pytest.raises(Http11Error, match="unsupported content coding"):
            content_decoder(value)


def test_a_two_byte_deflate_stream() -> None:
    raw = zlib.compress(b"")[2:-4]  # raw deflate of nothing: two bytes
    assert len(raw) == 2
    p = decoded(encoded(b"deflate", raw))
    assert (p.state, p.body) == (DONE, [])
    p = decoded(encoded(b"deflate", zlib.compress(b"")))
    assert (p.state, p.body) == (DONE, [])


def test_raw_deflate_that_starts_like_a_zlib_header_byte() -> None:
    # A stored block with a padding bit set: first byte 0x08, as a zlib CMF byte has; the
    # checksum over the first two bytes tells it is not one.
    raw = b"\x08\x01\x00\xfe\xffA\x03\x00"
    assert zlib.decompress(raw, -zlib.MAX_WBITS) == b"A"
    for step in (0, 1):
        p = decoded(encoded(b"deflate", raw), step)
        assert (p.state, b"".join(p.body)) == (DONE, b"A")


@pytest.mark.parametrize("coding", [b"gzip", b"deflate"])
@pytest.mark.parametrize("framing", ["close", "chunked"])
def test_an_empty_encoded_body_is_empty(coding: bytes, framing: str) -> None:
    p = decoded(encoded(coding, b"", framing))
    assert (p.state, p.body) == (DONE, [])


def test_chunk_size_whitespace_is_sp_and_htab_only() -> None:
    assert chunk_size(b"3 \t ") == 3
    for bad in (b"3\x0b", b"3\x0c", b"3X", b"3\r"):
        with pytest.raises(Http11Error) as info:
            chunk_size(bad)
        assert str(info.value) == f"bad chunk-size line {bad!r}"


@pytest.mark.parametrize("trailers", [b"", b"T: 1\r\n"])
def test_what_follows_trailers_in_the_same_read_is_trailing(trailers: bytes) -> None:
    after = b"HTTP/1.1 200 OK\r\n\r\n"  # another response, with its own empty line
    p = parse(CHUNKED + b"4\r\n\r\n\r\n\r\n0\r\n" + trailers + b"\r\n" + after)
    assert (p.state, p.body, p.trailing) == (DONE, [b"\r\n\r\n"], after)
    assert p.trailers == ([("T", "1")] if trailers else [])
    assert not p.keep_alive


def test_the_fast_path_size_table_is_every_lower_case_size_line_to_0xfff() -> None:
    # The first ChunkedReader fills it; a wrong entry would cut bodies at the wrong place.
    http11._SIZES.clear()
    p = parse(CHUNKED + b"a\r\n0123456789\r\n")
    assert p.body == [b"0123456789"]
    expected = {b"%x" % n: n for n in range(0x1000)}
    assert expected == http11._SIZES
    ends: list[bytes] = []
    ChunkedReader([], ends.append)  # filled once
    assert len(http11._SIZES) == 0x1000


def test_reads_that_start_with_a_whole_chunk_and_go_on() -> None:
    # The fast path (a read that starts with one whole chunk) hands what follows on, however
    # little: one byte of the next size line, or a whole next chunk.
    for rest in (b"0", b"1", b"1\r", b"1\r\ny\r\n", b"1\r\ny\r\n0\r\n"):
        p = parse(CHUNKED)
        p.feed(b"1\r\nx\r\n" + rest)
        p.feed(b"1\r\ny\r\n0\r\n\r\n"[len(rest) :] if rest != b"0" else b"\r\n\r\n")
        assert (p.state, b"".join(p.body)) == (DONE, b"x" if rest == b"0" else b"xy"), rest


def test_a_read_that_starts_with_the_crlf_of_the_last_chunk() -> None:
    p = parse(CHUNKED + b"3\r\nabc")
    p.feed(b"\r\n1\r\nx\r\n0\r\n\r\n")
    assert (p.state, p.body) == (DONE, [b"abc", b"x"])
    p = parse(CHUNKED + b"3\r\nabc")
    with pytest.raises(Http11Error, match="chunk data not followed by CRLF"):
        p.feed(b"\r\n1\r\nxYZ0\r\n\r\n")


def test_a_101_with_nothing_after_it_is_not_kept_alive() -> None:
    p = parse(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: ws\r\n\r\n")
    assert (p.status, p.state, p.trailing, p.keep_alive) == (101, DONE, b"", False)


def test_x_gzip_is_gzip() -> None:
    decoder = content_decoder("x-gzip")
    assert decoder is not None
    assert decoder.coding == "gzip"
    two = gzip.compress(TEXT[:300]) + gzip.compress(TEXT[300:])
    assert b"".join(decoded(encoded(b"x-gzip", two)).body) == TEXT
    with pytest.raises(Http11Error) as info:
        decoded(encoded(b"x-gzip", b"not gzip at all"))
    assert str(info.value) == "the gzip body is corrupt"


def test_body_framing_refuses_two_transfer_encoding_headers_whatever_they_say() -> None:
    # (The parser joins repeated headers, so it never passes "chunked" with a count of 2.)
    with pytest.raises(Http11Error, match="unsupported Transfer-Encoding"):
        body_framing(200, False, {"transfer-encoding": "chunked"}, 2)


def test_a_new_parser_and_one_after_only_an_interim_response_have_nothing_yet() -> None:
    for p in (ResponseParser(), parse(b"HTTP/1.1 100 Continue\r\nX: 1\r\n\r\n")):
        assert (p.state, p.status, p.reason, p.version, p.fields, p.headers) == (
            HEAD,
            0,
            "",
            "",
            [],
            {},
        )
        assert (p.keep_alive, p.body, p.trailing, p.trailers, p.backlog) == (
            False,
            [],
            b"",
            [],
            False,
        )
        assert p.head_only is False
