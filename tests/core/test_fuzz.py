"""Rule 4 of the reliability issue: fuzz the sans-I/O path the client runs, bytes to Completion.

HTTP/1.1 framing (``ResponseParser``) → SSE decoder → assembler, as ``_stream.py`` wires them
(a non-2xx body or a body that is not an event stream is read whole within its limit, as
``Endpoint.read_all`` does, then ``status_error`` / ``Assembler.from_response``). Inputs:
random bytes, random bodies behind a valid head, random SSE-like token soups, and the
recordings (``recordings/*.http``) mutated (bytes flipped, inserted, deleted, duplicated,
deep JSON nesting and over-long lines spliced in): whole responses, and bodies framed again
as valid chunks (so the edits reach the decoder and the assembler), each cut into random
reads.

What must hold, for every input:

- only ``Http11Error`` (framing: the transports map it to ``TransportError("protocol")`` and
  the client to ``ProtocolError``) or our ``InferError`` subclasses come out;
- no SSE payload is longer than ``max_event_bytes``, the decoder never holds more than that of
  one event, a whole body is never kept past its limit, and no ``ProtocolError.raw`` is
  longer than 64 Ki characters.

CI runs a bounded number of examples per test; ``nox -s fuzz`` (``LLAMACLIENT_FUZZ_EXAMPLES``)
runs many and prints how many ran.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devtools.recording import load
from llamaclient import Assembler, HTTPStatusError, InferError, ProtocolError
from llamaclient._protocol.http11 import HEAD, Http11Error, ResponseParser
from llamaclient._protocol.info import props_from, slots_from
from llamaclient._protocol.sse import SSEDecoder
from llamaclient._protocol.status import status_error
from llamaclient._types.errors import RAW_KEPT
from llamaclient._types.events import ChatEvent

EXAMPLES = int(os.environ.get("LLAMACLIENT_FUZZ_EXAMPLES", "0")) or None
FUZZ = settings(
    max_examples=EXAMPLES or 150,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
if EXAMPLES:  # long runs: no example database to grow
    FUZZ = settings(FUZZ, database=None)
RECORDINGS = sorted(Path(__file__).parents[2].glob("recordings/*.http"))
RESPONSES = [load(path) for path in RECORDINGS]

MAX_EVENT = 1024  # small limits, so the fuzzer crosses them
MAX_BODY = 4096
MAX_ERROR = 512

COUNTS: Counter[str] = Counter()  # outcome per test, printed at the end (nox -s fuzz)


@pytest.fixture(scope="module", autouse=True)
def _report() -> Iterator[None]:
    yield
    total = sum(v for k, v in COUNTS.items() if k.endswith(":examples"))
    print(f"\nfuzz: {total} examples in all")
    for key in sorted(COUNTS):
        print(f"  {key}: {COUNTS[key]}")


# -- the pipeline ------------------------------------------------------------------------------
@dataclass
class Run:
    """One response through the sans-I/O path, as the client runs it."""

    max_event: int = MAX_EVENT
    parser: ResponseParser = field(default_factory=ResponseParser)
    decoder: SSEDecoder | None = None
    asm: Assembler | None = None
    whole: list[bytes] | None = None  # a body read whole (non-2xx, or not an event stream)
    limit: int = 0
    events: list[ChatEvent] = field(default_factory=list)

    def feed(self, data: bytes) -> None:
        parser = self.parser
        parser.feed(data)
        while True:
            self._take()
            if not parser.backlog:
                return
            parser.pump()

    def end(self) -> object:
        self.parser.eof()
        while self.parser.backlog:
            self._take()
            self.parser.pump()
        self._take()
        if self.decoder is not None and self.asm is not None:
            for payload in self.decoder.flush():
                self._push(payload)
            return self.asm.finish()
        if self.whole is None:
            return None  # a response without a body we would read
        data = b"".join(self.whole)
        status = self.parser.status
        if status >= 300:
            return status_error(status, data, self.parser.headers.get("location"))
        return Assembler.from_response(data)

    def _take(self) -> None:
        parser = self.parser
        if parser.state == HEAD:
            return
        if self.decoder is None and self.whole is None:
            self._start()
        body = parser.body[:]
        parser.body.clear()  # in place: the body reader appends to this very list
        for piece in body:
            if self.whole is not None:
                self._keep(piece)
                continue
            assert self.decoder is not None
            for payload in self.decoder.feed(piece):
                self._push(payload)
            self._check_decoder()

    def _start(self) -> None:
        status = self.parser.status
        kind = self.parser.headers.get("content-type", "").lower()
        if status < 300 and "text/event-stream" in kind:
            self.decoder = SSEDecoder(self.max_event)
            self.asm = Assembler()
        else:
            self.whole = []
            self.limit = MAX_BODY if status < 300 else MAX_ERROR

    def _keep(self, piece: bytes) -> None:
        """``Endpoint.read_all``'s bound."""
        assert self.whole is not None
        self.whole.append(piece)
        size = sum(map(len, self.whole))
        if size > self.limit:
            self.whole = []
            raise ProtocolError(f"body over {self.limit}", piece)

    def _push(self, payload: bytes) -> None:
        assert len(payload) <= self.max_event
        assert self.asm is not None
        self.events += self.asm.push(payload)

    def _check_decoder(self) -> None:
        decoder = self.decoder
        assert decoder is not None
        held = sum(map(len, decoder._line)) + sum(len(d) + 1 for d in decoder._data)
        assert held <= self.max_event
        assert sum(map(len, decoder._raw)) <= self.max_event


def _cut(data: bytes, cuts: list[int]) -> Iterator[bytes]:
    last = 0
    for cut in sorted({c % (len(data) + 1) for c in cuts}):
        if cut > last:
            yield data[last:cut]
            last = cut
    if last < len(data):
        yield data[last:]


def run(data: bytes, cuts: list[int], name: str, max_event: int = MAX_EVENT) -> object:
    """The outcome of ``data`` cut at ``cuts``: a result or the error; anything else fails."""
    COUNTS[f"{name}:examples"] += 1
    pipeline = Run(max_event=max_event)
    outcome = _outcome(pipeline, data, cuts)
    COUNTS[f"{name}:{type(outcome).__name__}"] += 1
    if isinstance(outcome, ProtocolError):
        assert len(outcome.raw) <= RAW_KEPT
    if isinstance(outcome, HTTPStatusError):
        assert len(outcome.body) <= MAX_ERROR
    return outcome


def _outcome(pipeline: Run, data: bytes, cuts: list[int]) -> object:
    try:
        for piece in _cut(data, cuts):
            pipeline.feed(piece)
        return pipeline.end()
    except (Http11Error, InferError) as exc:  # anything else fails the test
        return exc


# -- inputs ------------------------------------------------------------------------------------
cuts = st.lists(st.integers(0, 1 << 20), max_size=12)

HEADS = [
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n",
    b"HTTP/1.1 500 Internal Server Error\r\nConnection: close\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\n\r\n",
]
SSE_CLOSE = HEADS[1]

TOKENS = [
    b"data: ",
    b"data:",
    b"\n",
    b"\n\n",
    b"\r\n",
    b"\r",
    b": ping\n",
    b"event: x\n",
    b"id: 1\n",
    b"retry: 5\n",
    b"{",
    b"}",
    b"[",
    b"]",
    b'"',
    b":",
    b",",
    b"null",
    b"0",
    b'"index"',
    b'"id"',
    b'"c1"',
    b'"choices"',
    b'"delta"',
    b'"content"',
    b'"reasoning_content"',
    b'"tool_calls"',
    b'"function"',
    b'"name"',
    b'"arguments"',
    b'"finish_reason"',
    b'"stop"',
    b'"tool_calls"',
    b'"error"',
    b'"timings"',
    b'"usage"',
    b"[DONE]",
    b"\xef\xbb\xbf",
    b"\xff",
    b"[" * 1500,
    b'{"a":' * 800,
    b"x" * 1500,
    b'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n',
    b'data: {"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a",'
    b'"function":{"name":"f","arguments":"{"}}]}}]}\n\n',
    b'data: {"id":"c1","choices":[{"index":0,"finish_reason":"stop","delta":{}}]}\n\n',
    b"data: [DONE]\n\n",
]
soups = st.lists(st.sampled_from(TOKENS), max_size=40).map(b"".join)


@FUZZ
@given(data=st.binary(max_size=3000), cuts=cuts)
def test_random_bytes(data: bytes, cuts: list[int]) -> None:
    run(data, cuts, "random-bytes")
    run(b"HTTP/1.1 " + data, cuts, "random-bytes")


@FUZZ
@given(head=st.sampled_from(HEADS), body=st.binary(max_size=3000), cuts=cuts)
def test_random_bodies_behind_a_valid_head(head: bytes, body: bytes, cuts: list[int]) -> None:
    run(head + body, cuts, "random-body")


@FUZZ
@given(soup=soups, cuts=cuts, max_event=st.sampled_from([64, MAX_EVENT, 1 << 20]))
def test_sse_token_soup(soup: bytes, cuts: list[int], max_event: int) -> None:
    run(SSE_CLOSE + soup, cuts, "sse-soup", max_event)


def _mutate(draw: st.DrawFn, data: bytearray) -> bytes:
    """1 to 4 random edits of ``data``."""
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "dup", "splice", "truncate"]))
        at = draw(st.integers(0, len(data)))
        if op == "flip" and at < len(data):
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 64))]
        elif op == "dup":
            data[at:at] = data[at : at + draw(st.integers(1, 400))]
        elif op == "splice":
            data[at:at] = draw(st.sampled_from([*TOKENS[-8:], b"\r\n", b"0\r\n\r\n"]))
        elif op == "truncate":
            del data[at:]
    return bytes(data)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A recorded response (head and framing included) with random edits."""
    return _mutate(draw, bytearray(draw(st.sampled_from(RESPONSES)).raw_response))


@st.composite
def reframed(draw: st.DrawFn) -> bytes:
    """A recorded body with random edits, framed again as valid chunks behind the
    recording's status and content type: the edits reach the SSE decoder and assembler."""
    rec = draw(st.sampled_from(RESPONSES))
    body = _mutate(draw, bytearray(rec.body))
    kind = dict((k.lower(), v) for k, v in rec.headers).get("content-type", "text/plain")
    head = f"HTTP/1.1 {rec.status} {rec.reason}\r\nContent-Type: {kind}\r\n"
    out = [head.encode("latin-1"), b"Transfer-Encoding: chunked\r\n\r\n"]
    for piece in _cut(body, draw(cuts)):
        out.append(b"%x\r\n%s\r\n" % (len(piece), piece))
    out.append(b"0\r\n\r\n")
    return b"".join(out)


@FUZZ
@given(data=reframed(), cuts=cuts)
def test_reframed_mutated_bodies(data: bytes, cuts: list[int]) -> None:
    run(data, cuts, "reframed-body")


@FUZZ
@given(data=mutated(), cuts=cuts)
def test_mutated_recordings(data: bytes, cuts: list[int]) -> None:
    run(data, cuts, "mutated-recording")


@pytest.mark.parametrize("path", RECORDINGS, ids=[p.stem for p in RECORDINGS])
def test_recordings_pass_whole_and_cut(path: Path) -> None:
    """The unmutated recordings, for contrast: answers are Completions, errors typed."""
    recording = load(path)
    if recording.request_line.startswith("GET /props"):  # not chat answers: typed info
        assert props_from(json.loads(recording.body)).total_slots > 0
        return
    if recording.request_line.startswith("GET /slots"):
        assert slots_from(json.loads(recording.body))
        return
    data = recording.raw_response
    whole = run(data, [], "recording", max_event=1 << 20)
    for step in (1, 7, 100):
        again = run(data, list(range(0, len(data), step)), "recording", max_event=1 << 20)
        assert type(again) is type(whole)
        assert repr(again) == repr(whole)
    if recording.meta.get("cut") == "true":  # cut mid-body on purpose: the framing says so
        assert isinstance(whole, Http11Error), whole
        return
    assert not isinstance(whole, Http11Error), whole
    assert not isinstance(whole, ProtocolError), whole


def test_a_framing_error_reaches_the_user_as_a_protocol_error() -> None:
    """Http11Error never escapes the client: the transports raise TransportError("protocol"),
    which the stream turns into ProtocolError (see tests/client/test_bounds.py)."""
    outcome = run(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", [], "unit")
    assert isinstance(outcome, Http11Error)
