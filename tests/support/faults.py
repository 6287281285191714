"""The fault matrix: named misbehaviours of a server, each with the exact outcome a client
must show, as data (``FAULTS``), for the matrix tests, the key-leak tests and the soak.

A fault's ``scripts`` are the answers to successive ``POST /v1/chat/completions`` (the last
one repeats); in a script, ``bytes`` items are written to the socket as they are (one write
each, no HTTP framing added: heads and chunks are spelt out byte for byte), other items are
fault-server steps (:class:`Sleep`, :class:`Hold`, :class:`Close`, :class:`Reset`, ...).
:func:`render` turns a script into fault-server steps, whole or one byte per write.

The expected outcome is the same on every transport unless ``httpx`` says otherwise (the
two HTTP stacks disagree on a few inputs where HTTP/1.1 leaves room; each is named).
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from llamaclient import (
    AuthenticationError,
    ContextOverflowError,
    HTTPStatusError,
    InferError,
    ProtocolError,
    Retrying,
    ServerError,
    StalledError,
    StreamClosedEarlyError,
    Waiting,
    WaitTimeoutError,
)
from tests.support.faultserver import (
    DONE,
    PING,
    Close,
    Hold,
    Json,
    Raw,
    Reset,
    Response,
    Sleep,
    Step,
    chat_chunk,
    chat_chunks,
    error_body,
    error_event,
    sse,
)

__all__ = ["FAULTS", "KEY", "Fault", "Outcome", "by_name", "render"]

KEY = "sk-LEAKCHECK-7f3a9c2e5b1d8f4a6c0e"
"""The recognisable API key every fault can be run with."""

Wire: TypeAlias = bytes | Step
Script: TypeAlias = Sequence[Wire]

# -- the bytes -------------------------------------------------------------------------------
STATUS_OK = b"HTTP/1.1 200 OK\r\n"
SSE_HEADERS = (
    b"Server: llama.cpp\r\nContent-Type: text/event-stream\r\nConnection: close\r\n"
)
CHUNKED = b"Transfer-Encoding: chunked\r\n"
HEAD = STATUS_OK + SSE_HEADERS + CHUNKED + b"\r\n"
END = b"0\r\n\r\n"

# role + "Hel", "lo", finish (stop), [DONE]: small events (no timings), so dripping is cheap.
EVENTS = chat_chunks(["Hel", "lo"], timings=False, usage=False)
E0, E1, FINISH, _ = EVENTS
SSE_BODY = b"".join(EVENTS)


def chunk(data: bytes) -> bytes:
    """One HTTP chunk."""
    return b"%x\r\n" % len(data) + data + b"\r\n"


def chunked(*events: bytes) -> bytes:
    return b"".join(chunk(e) for e in events)


BODY = chunked(*EVENTS) + END


def head(*lines: bytes, status: bytes = STATUS_OK, te: bool = True) -> bytes:
    """A response head: ``lines`` (each with its CRLF) after llama-server's headers."""
    return status + SSE_HEADERS + (CHUNKED if te else b"") + b"".join(lines) + b"\r\n"


def with_length(body: bytes, *lines: bytes) -> bytes:
    return head(b"Content-Length: %d\r\n" % len(body), *lines, te=False) + body


def content(text: str, **fields: Any) -> bytes:
    return sse(chat_chunk({"content": text}, **fields))


def deep(n: int) -> bytes:
    return b"[" * n + b"]" * n


LOADING = {"error": {"message": "Loading model", "type": "unavailable_error", "code": 503}}
CONTEXT = {
    "error": {
        "code": 400,
        "message": "request (9000 tokens) exceeds the available context size (4096 tokens)",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": 9000,
        "n_ctx": 4096,
    }
}
ELSEWHERE = "http://127.0.0.1:9/v1/chat/completions"


# -- the table -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    """What the client shows: ``error`` (None: a Completion), the content of the Completion
    or of the error's ``partial`` (None: no partial), the HTTP status of an
    ``HTTPStatusError``."""

    error: type[InferError] | None
    content: str | None = None
    status: int | None = None


@dataclass(frozen=True)
class Fault:
    name: str
    scripts: Sequence[Script]
    outcome: Outcome
    posts: int = 1  # POSTs the server receives
    events: tuple[type[object], ...] = ()  # the events other than text, in order
    drip: bool = True  # also run with the bytes written one at a time
    config: Mapping[str, Any] = field(default_factory=dict)
    httpx: Outcome | None = None  # when httpx's stack sees it otherwise
    why: str = ""
    kind: str = ""  # head, framing, sse, json, timing, status, redirect, secret

    def outcome_on(self, transport: str) -> Outcome:
        return self.httpx if transport == "httpx" and self.httpx is not None else self.outcome


OK = Outcome(None, "Hello")


def P(content: str | None = None) -> Outcome:
    return Outcome(ProtocolError, content)


def S(content: str | None = None) -> Outcome:
    return Outcome(StreamClosedEarlyError, content)


def H(status: int, error: type[InferError] | None = None) -> Outcome:
    if error is None:  # a refused key has its own HTTPStatusError
        error = AuthenticationError if status in (401, 403) else HTTPStatusError
    return Outcome(error, None, status)


def _head_faults() -> list[Fault]:
    cases: list[tuple[str, Script, Outcome, dict[str, Any]]] = [
        ("bad_status_line", [b"HTTP/1.1 OK\r\n" + SSE_HEADERS + CHUNKED + b"\r\n" + BODY],
         P(), {}),
        ("not_http", [b"SSH-2.0-OpenSSH_9.6\r\n\r\n"], P(), {}),
        ("status_non_numeric", [head(status=b"HTTP/1.1 2OO OK\r\n") + BODY], P(), {}),
        ("status_two_digits", [head(status=b"HTTP/1.1 20 OK\r\n") + BODY], P(), {}),
        ("status_four_digits", [head(status=b"HTTP/1.1 2000 OK\r\n") + BODY], P(), {}),
        ("http2_version", [head(status=b"HTTP/2 200 OK\r\n") + BODY], P(), {}),
        ("nul_in_header", [head(b"X-Note: a\x00b\r\n") + BODY], P(), {}),
        ("bare_cr_in_header", [head(b"X-Note: a\rb\r\n") + BODY], P(), {}),
        # RFC 9112 5.2 lets a user agent unfold obs-fold; h11 does, ours refuses it.
        ("obs_fold", [head(b"X-Note: a\r\n b\r\n") + BODY], P(), {"httpx": OK}),
        ("space_before_colon", [head(b"X-Note : a\r\n") + BODY], P(), {}),
        ("duplicate_content_length",
         [with_length(SSE_BODY, b"Content-Length: %d\r\n" % len(SSE_BODY))], OK, {}),
        ("conflicting_content_length",
         [with_length(SSE_BODY, b"Content-Length: %d\r\n" % (len(SSE_BODY) + 7))], P(), {}),
        ("content_length_and_chunked", [head(b"Content-Length: 5\r\n") + BODY], OK, {}),
        ("unknown_transfer_encoding",
         [STATUS_OK + SSE_HEADERS + b"Transfer-Encoding: x-rot13\r\n\r\n" + SSE_BODY], P(), {}),
        ("chunked_twice", [head(b"Transfer-Encoding: chunked\r\n") + BODY], P(), {}),
        ("negative_content_length", [head(b"Content-Length: -1\r\n", te=False) + SSE_BODY],
         P(), {}),
        ("cut_in_first_read", [b"HTTP/1.1 200 O", Close()], S(), {}),
        ("reset_in_head", [STATUS_OK + b"Server: lla", Reset()], S(), {}),
        ("huge_head", [head(b"X-Big: " + b"a" * 200_000 + b"\r\n") + BODY], P(),
         {"drip": False}),
        ("interim_100_continue", [b"HTTP/1.1 100 Continue\r\n\r\n" + HEAD + BODY], OK, {}),
    ]
    return [Fault("head_" + name, [script], outcome, kind="head", **extra)
            for name, script, outcome, extra in cases]


def _framing_faults() -> list[Fault]:
    first = HEAD + chunk(E0)  # "Hel" is in before the fault
    half = b"%x\r\n" % len(E1) + E1[:10]
    gz = gzip.compress(SSE_BODY)
    deflated = zlib.compress(SSE_BODY)
    packer = zlib.compressobj(wbits=31)  # gzip, flushed after each event, never finished
    truncated = b"".join(packer.compress(e) + packer.flush(zlib.Z_SYNC_FLUSH) for e in (E0, E1))
    cases: list[tuple[str, Script, Outcome, dict[str, Any]]] = [
        ("chunk_size_0x", [first + b"0x9b\r\n" + E1[:0x9b]], P("Hel"), {}),
        ("chunk_size_plus", [first + b"+9b\r\n" + E1[:0x9b]], P("Hel"), {}),
        ("chunk_size_underscore", [first + b"9_b\r\n" + E1[:0x9b]], P("Hel"), {}),
        # h11 reads up to 20 hex digits, so it then waits for 2**80 bytes that never come.
        ("chunk_size_20_digits", [first + b"f" * 20 + b"\r\n"], P("Hel"),
         {"httpx": S("Hel")}),
        ("missing_crlf_after_data", [first + b"%x\r\n" % len(E1) + E1 + b"XX" + chunk(FINISH)],
         P("Hello"), {}),
        ("cut_mid_chunk", [first + half, Close()], S("Hel"), {}),
        # A RST drops what the client has not read yet (TCP): the pause lets it read first,
        # or the partial would depend on how far behind the reader was.
        ("reset_mid_chunk", [first + half, Sleep(0.2), Reset()], S("Hel"), {}),
        ("cut_in_size_line", [first + b"1", Close()], S("Hel"), {}),
        ("cut_before_terminator", [HEAD + chunked(E0, E1), Close()], S("Hello"), {}),
        ("bytes_after_body", [HEAD + BODY + b"HTTP/1.1 200 OK\r\n\r\nsurprise"], OK, {}),
        ("chunk_extensions", [HEAD + b"".join(
            b"%x;a=b\r\n" % len(e) + e + b"\r\n" for e in EVENTS) + END], OK, {}),
        ("trailers", [HEAD + chunked(*EVENTS) + b"0\r\nX-Trailer: 1\r\n\r\n"], OK, {}),
        ("gzip_body", [head(b"Content-Encoding: gzip\r\n") + chunk(gz) + END], OK, {}),
        ("deflate_body", [head(b"Content-Encoding: deflate\r\n") + chunk(deflated) + END],
         OK, {}),
        ("corrupt_gzip", [head(b"Content-Encoding: gzip\r\n") + BODY], P(), {}),
        ("truncated_gzip", [head(b"Content-Encoding: gzip\r\n") + chunk(truncated) + END],
         P("Hello"), {}),
        ("unknown_content_encoding", [head(b"Content-Encoding: x-snappy\r\n") + BODY], P(), {}),
        ("content_length_short",
         [head(b"Content-Length: 5000\r\n", te=False) + E0 + E1, Close()], S("Hello"), {}),
        ("read_until_close", [head(te=False) + SSE_BODY, Close()], OK, {}),
    ]
    return [Fault("framing_" + name, [script], outcome, kind="framing", **extra)
            for name, script, outcome, extra in cases]


def _sse_faults() -> list[Fault]:
    def lines(sep: bytes) -> bytes:
        return SSE_BODY.replace(b"\n", sep)

    big = "x" * 1_000_000
    cases: list[tuple[str, Script, Outcome, dict[str, Any]]] = [
        ("cr_only_lines", [HEAD + chunk(lines(b"\r")) + END], OK, {}),
        ("crlf_lines", [HEAD + chunk(lines(b"\r\n")) + END], OK, {}),
        ("bom", [HEAD + chunk(b"\xef\xbb\xbf" + SSE_BODY) + END], OK, {}),
        ("last_event_without_blank_line",
         [HEAD + chunked(E0, E1, FINISH.rstrip(b"\n")) + END], OK, {}),
        ("event_fields", [HEAD + chunked(
            b"event: message\n" + E0, b"event: other\ndata: not json\n\n", E1, FINISH, DONE
        ) + END], OK, {}),
        ("comments", [HEAD + chunked(b": hello\n", E0, PING, b":ping\n\n", E1, FINISH, DONE)
                      + END], OK, {}),
        ("id_and_retry_fields", [HEAD + chunked(b"id: 1\nretry: 10\n" + E0, E1, FINISH, DONE)
                                 + END], OK, {}),
        ("multi_line_data", [HEAD + chunked(E0.replace(b',"', b',\ndata: "', 1), E1, FINISH,
                                            DONE) + END], OK, {}),
        ("huge_line", [HEAD + chunked(E0, content(big), FINISH, DONE) + END],
         Outcome(None, "Hel" + big), {"drip": False}),
        ("only_pings_then_end", [HEAD + chunked(PING, PING) + END], S(), {}),
    ]
    return [Fault("sse_" + name, [script], outcome, kind="sse", **extra)
            for name, script, outcome, extra in cases]


def _json_faults() -> list[Fault]:
    def after_hel(*events: bytes) -> Script:
        return [HEAD + chunked(E0, *events) + END]

    finish_x = sse(chat_chunk({}, finish_reason="x_unknown"))
    cases: list[tuple[str, Script, Outcome, dict[str, Any]]] = [
        ("truncated", after_hel(b'data: {"choices":[{"delta":{"content":"x"\n\n'), P("Hel"), {}),
        ("nested_1000_arrays", after_hel(b"data: " + deep(1000) + b"\n\n"), P("Hel"), {}),
        # Deeper than any recursion limit: msgspec gives up (RecursionError), never untyped.
        ("nested_100000_in_a_field", after_hel(
            b'data: {"choices":[],"object":"chat.completion.chunk","x":' + deep(100_000)
            + b"}\n\n", E1, FINISH, DONE), P("Hel"), {"drip": False}),
        ("number_payload", after_hel(b"data: 42\n\n"), P("Hel"), {}),
        ("null_payload", after_hel(b"data: null\n\n"), P("Hel"), {}),
        ("array_payload", after_hel(b"data: []\n\n"), P("Hel"), {}),
        ("unknown_finish_reason", after_hel(E1, finish_x, DONE), P("Hello"), {}),
        ("choices_n2", after_hel(content("x", index=1)), P("Hel"), {}),
        ("invalid_utf8", after_hel(b'data: {"choices":[{"index":0,"delta":{"content":"\xff"}}]}'
                                   b"\n\n"), P("Hel"), {}),
        ("in_band_error", after_hel(error_event("Compute error.")), Outcome(ServerError, "Hel"),
         {}),
        ("data_after_done", after_hel(E1, FINISH, DONE, content("late")), OK, {}),
    ]
    return [Fault("json_" + name, [script], outcome, kind="json", **extra)
            for name, script, outcome, extra in cases]


def _timing_faults() -> list[Fault]:
    drip: list[Wire] = [HEAD, chunk(E0), b"%x\r\n" % len(E1)]
    for byte in E1:
        drip += [bytes([byte]), Sleep(0.004)]
    drip += [b"\r\n" + chunked(FINISH, DONE) + END]
    pings: list[Wire] = [HEAD, chunk(E0)]
    for _ in range(8):
        pings += [Sleep(0.1), chunk(PING)]
    pings += [chunked(E1, FINISH, DONE) + END]
    fast = {"stall_timeout": 0.3, "wait_timeout": 0.3}
    cases: list[tuple[str, Script, Outcome, dict[str, Any]]] = [
        ("silence_before_headers", [Hold()], Outcome(WaitTimeoutError), {}),
        ("silence_after_headers", [HEAD, Hold()], Outcome(StalledError), {}),
        ("silence_mid_stream", [HEAD + chunked(E0, E1), Hold()], Outcome(StalledError, "Hello"),
         {}),
        ("one_byte_drip", drip, OK, {"drip": False}),
        ("pings_longer_than_the_stall_timeout", pings, OK, {"drip": False}),
        ("finish_then_silence", [HEAD + chunked(E0, E1, FINISH), Hold()], OK, {}),
        ("done_then_held_open", [HEAD + chunked(*EVENTS), Hold()], OK, {}),
        ("headers_slower_than_the_stall_timeout", [Sleep(0.4), HEAD + BODY], OK,
         {"config": {"stall_timeout": 0.3, "wait_timeout": 2.0}}),
    ]
    return [Fault("timing_" + name, [script], outcome, kind="timing",
                  **{"config": fast, **extra})
            for name, script, outcome, extra in cases]


def _status_faults() -> list[Fault]:
    ok: Script = [HEAD + BODY]

    def answer(code: int, body: bytes = b"", *lines: bytes) -> bytes:
        reason = {401: b"Unauthorized", 404: b"Not Found", 429: b"Too Many Requests",
                  500: b"Internal Server Error", 502: b"Bad Gateway",
                  503: b"Service Unavailable", 504: b"Gateway Timeout",
                  400: b"Bad Request"}[code]
        return (b"HTTP/1.1 %d %s\r\nServer: llama.cpp\r\nContent-Type: application/json; "
                b"charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n%s\r\n%s"
                % (code, reason, len(body), b"".join(lines), body))

    def envelope(code: int, message: str) -> bytes:
        return json.dumps(error_body(code, message)).encode()

    cases: list[tuple[str, Sequence[Script], Outcome, int, tuple[type[object], ...]]] = [
        ("401", [[answer(401, envelope(401, "Invalid API Key"))]], H(401), 1, ()),
        ("404", [[answer(404, envelope(404, "File Not Found"))]], H(404), 1, ()),
        ("429_retry_after_then_ok", [[answer(429, b"", b"Retry-After: 1\r\n")], ok], OK, 2,
         (Retrying,)),
        ("429_twice", [[answer(429, b"", b"Retry-After: 0\r\n")]], H(429), 2, (Retrying,)),
        ("500_plain", [[answer(500, b"upstream crashed")]], H(500), 1, ()),
        ("500_envelope", [[answer(500, envelope(500, "Unknown reasoning format"))]], H(500),
         1, ()),
        ("502_then_ok", [[answer(502)], ok], OK, 2, (Retrying,)),
        ("502_twice", [[answer(502)]], H(502), 2, (Retrying,)),
        ("503_loading_then_ok", [[Json(503, LOADING)], ok], OK, 2, (Waiting,)),
        ("503_other_twice", [[answer(503, envelope(503, "busy"))]], H(503), 2, (Retrying,)),
        ("504_then_ok", [[answer(504)], ok], OK, 2, (Retrying,)),
        ("400_exceed_context", [[Json(400, CONTEXT)]], H(400, ContextOverflowError), 1, ()),
    ]
    faults = [Fault("status_" + name, scripts, outcome, posts=posts, events=events,
                    kind="status") for name, scripts, outcome, posts, events in cases]
    for code in (301, 302, 307, 308):
        redirect = Response(code, b"", content_type=None, headers={"Location": ELSEWHERE})
        faults.append(Fault(f"redirect_{code}", [[redirect]], H(code), kind="redirect"))
    return faults


def _secret_faults() -> list[Fault]:
    """A server (or a proxy) that quotes the request, the API key included, back."""
    bearer = f"Bearer {KEY}".encode()
    body = json.dumps(error_body(401, f"invalid key: Bearer {KEY}")).encode()
    cases: list[tuple[str, Script, Outcome]] = [
        ("echoed_in_401_body", [Response(401, body, content_type="application/json")], H(401)),
        ("echoed_in_location", [Response(307, b"", content_type=None,
                                         headers={"Location": f"{ELSEWHERE}?key={KEY}"})],
         H(307)),
        ("echoed_in_bad_header", [head(b"X-Echo: " + bearer + b"\x00\r\n") + BODY], P()),
        ("echoed_in_status_line", [b"HTTP/1.1 2" + bearer + b"\r\n\r\n"], P()),
        ("echoed_in_in_band_error", [HEAD + chunked(E0, error_event(f"bad auth {KEY}")) + END],
         Outcome(ServerError, "Hel")),
        ("echoed_in_bad_json", [HEAD + chunked(E0, b'data: {"auth":"' + bearer + b'"\n\n')
                                + END], P("Hel")),
        ("echoed_in_bad_chunk_size", [HEAD + chunk(E0) + bearer + b"\r\n"], P("Hel")),
    ]
    return [Fault("secret_" + name, [script], outcome, kind="secret")
            for name, script, outcome in cases]


FAULTS: tuple[Fault, ...] = (
    *_head_faults(), *_framing_faults(), *_sse_faults(), *_json_faults(), *_timing_faults(),
    *_status_faults(), *_secret_faults(),
)
_BY_NAME = {fault.name: fault for fault in FAULTS}
assert len(_BY_NAME) == len(FAULTS), "fault names must be unique"


def by_name(name: str) -> Fault:
    return _BY_NAME[name]


def render(script: Script, *, drip: bool = False) -> list[Step]:
    """Fault-server steps for ``script``: each ``bytes`` item as one raw write, or one write
    per byte with ``drip``."""
    steps: list[Step] = []
    for item in script:
        if isinstance(item, bytes):
            if drip:
                steps += [Raw(item[i : i + 1]) for i in range(len(item))]
            else:
                steps.append(Raw(item))
        else:
            steps.append(item)
    return steps
