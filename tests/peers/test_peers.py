"""Streams other projects recorded from real servers, checked against what their tests assert.

Each recording is a body file copied byte for byte from another project's repository, and a
TOML file beside it: where it comes from (repository, path, commit, the test that replays it),
what that test asserts, and what we expect (``[expected]``). Where llamaclient's documented
semantics differ from that project's, ``notes`` says how and ``[expected]`` holds our outcome;
where we get a dialect wrong, ``xfail`` says why and ``[expected]`` keeps the peer's outcome
(see ``README.md``).

For every recording:

1. the body goes through ``SSEDecoder`` and ``Assembler`` whole, one read per event, one read
   per byte, and split in two reads at every byte: the payloads, and the events and outcome
   they fold into, are the same each way;
2. the Client replays it from the fault server on both transports (one HTTP chunk per event,
   and the whole body in one chunk): the same events and the same Completion or error;
3. the outcome is the one ``[expected]`` says.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest

from llamaclient import Assembler, ChatEvent, Completion, InferError
from llamaclient._protocol.sse import ErrorData, SSEDecoder
from tests.conftest import CHAT, ClientFactory, drain, user
from tests.support.faultserver import FaultServer, stream

HERE = Path(__file__).parent
DONE = b"data: [DONE]\n\n"
HEX40 = re.compile(r"^[0-9a-f]{40}$")
OUTCOMES = {"Completion", "ServerError", "ProtocolError", "StreamClosedEarlyError"}


@dataclass(frozen=True)
class Recording:
    name: str  # project/file stem
    spec: dict[str, Any]
    body: bytes  # the response body as the project's test serves it

    @property
    def expected(self) -> dict[str, Any]:
        expected: dict[str, Any] = self.spec["expected"]
        return expected


def served(source: bytes, framing: str) -> bytes:
    """The body the project's test serves: ``sse`` files are served as they are; ``lines``
    files (the Vercel AI SDK's ``*.chunks.txt``) hold one chunk per line, and its tests serve
    each non-blank line as ``data: <line>\\n\\n``, then ``data: [DONE]\\n\\n``."""
    if framing == "sse":
        return source
    assert framing == "lines", framing
    lines = [line for line in source.decode().split("\n") if line.strip()]
    return "".join(f"data: {line}\n\n" for line in lines).encode() + DONE


def load(path: Path) -> Recording:
    spec = tomllib.loads(path.read_text())
    source = (path.parent / spec["body"]).read_bytes()
    name = f"{path.parent.name}/{path.stem}"
    return Recording(name, spec, served(source, spec["framing"]))


RECORDINGS = [load(path) for path in sorted(HERE.glob("*/*.toml"))]


def each(*, xfail: bool = False) -> list[Any]:
    """The recordings as parameters; with ``xfail`` the known defects are marked strict."""
    params = []
    for recording in RECORDINGS:
        reason = recording.spec.get("xfail")
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if xfail and reason else []
        params.append(pytest.param(recording, id=recording.name, marks=marks))
    return params


# -- decoding and folding -------------------------------------------------------------------
def payloads(reads: Iterable[bytes]) -> list[bytes]:
    decoder = SSEDecoder()
    out: list[bytes] = []
    for read in reads:
        out += decoder.feed(read)
    return out + decoder.flush()


def typed(datas: list[bytes]) -> list[tuple[bool, bytes]]:
    """Payloads with their kind: an ``event: error`` payload is not a plain one."""
    return [(isinstance(data, ErrorData), bytes(data)) for data in datas]


def events_of(body: bytes) -> list[bytes]:
    """The body cut after each blank line: one piece per event, as a server writes them."""
    pieces = [piece + b"\n\n" for piece in body.split(b"\n\n")]
    pieces[-1] = pieces[-1][:-2]
    return [piece for piece in pieces if piece]


class Outcome(msgspec.Struct, frozen=True):
    events: list[ChatEvent]
    completion: Completion | None
    error: dict[str, Any] | None


def described(error: BaseException) -> dict[str, Any]:
    return {
        "outcome": type(error).__name__,
        "text": str(error),
        "message": getattr(error, "message", None),
        "code": getattr(error, "code", None),
        "type": getattr(error, "type", None),
        "partial": getattr(error, "partial", None),
    }


def fold(datas: list[bytes]) -> Outcome:
    """What the Assembler makes of the payloads, read the way the stream reads them (nothing
    after ``[DONE]``, nothing after an error)."""
    asm = Assembler()
    events: list[ChatEvent] = []
    try:
        for data in datas:
            events += asm.push(data)
            if asm.is_done:
                break
        return Outcome(events, asm.finish(), None)
    except InferError as exc:
        return Outcome(events, None, described(exc))


# -- the files are what they say -------------------------------------------------------------
def test_the_suite_holds_30_recordings_from_3_projects() -> None:
    assert len(RECORDINGS) >= 30
    assert len({r.spec["provenance"]["repository"] for r in RECORDINGS}) >= 3


@pytest.mark.parametrize("recording", each())
def test_each_recording_names_its_source_and_is_byte_exact(recording: Recording) -> None:
    source = recording.spec["provenance"]
    for key in ("repository", "path", "commit", "test", "asserts", "sha256"):
        assert source.get(key), key
    assert HEX40.match(source["commit"])
    body_file = HERE / recording.name.split("/")[0] / recording.spec["body"]
    digest = hashlib.sha256(body_file.read_bytes()).hexdigest()
    assert digest == source["sha256"]
    if recording.name.startswith("openai-python/"):  # inline-snapshot names a file by its hash
        assert source["path"].endswith(f"/{digest}.bin")
    assert recording.expected["outcome"] in OUTCOMES


# -- 1. every split folds the same -----------------------------------------------------------
@pytest.mark.parametrize("recording", each())
def test_every_split_of_the_body_folds_the_same(recording: Recording) -> None:
    body = recording.body
    whole = payloads([body])
    assert whole, "a recording with no payload"
    expected = fold(whole)
    per_event = payloads(events_of(body))
    per_byte = payloads(body[i : i + 1] for i in range(len(body)))
    assert typed(per_event) == typed(whole)
    assert typed(per_byte) == typed(whole)
    assert fold(per_event) == expected
    assert fold(per_byte) == expected
    for cut in range(1, len(body)):
        assert typed(payloads([body[:cut], body[cut:]])) == typed(whole), cut


# -- 2. the Client, on both transports --------------------------------------------------------
@pytest.mark.anyio
@pytest.mark.parametrize("chunking", ["per-event", "whole"])
@pytest.mark.parametrize("recording", each())
async def test_the_client_replays_it_on_both_transports(
    recording: Recording, chunking: str, server: FaultServer, make_client: ClientFactory
) -> None:
    body = recording.body
    pieces = events_of(body) if chunking == "per-event" else [body]
    server.route("POST", CHAT, stream(pieces))
    chat = make_client().chat(user())
    events, error = await drain(chat)
    expected = fold(payloads([body]))
    assert events == expected.events
    if expected.error is None:
        assert error is None, error
        assert chat.completion == expected.completion
    else:
        assert error is not None
        assert described(error) == expected.error


# -- 3. the outcome is the one the peer's test asserts (or our documented one) --------------
def as_expected(got: Completion | None, want: dict[str, Any]) -> None:
    assert got is not None
    if "id" in want:
        assert got.id == want["id"]
    if "model" in want:
        assert got.model == want["model"]
    assert got.content == want.get("content")
    assert got.reasoning_content == want.get("reasoning")
    if "reasoning_field" in want:
        assert got.reasoning_field == want["reasoning_field"]
    assert got.finish_reason == want.get("finish_reason")
    calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in got.tool_calls]
    assert calls == want.get("tool_calls", [])
    usage = (got.usage.prompt_tokens, got.usage.completion_tokens, got.usage.cached_tokens)
    wanted = tuple(want.get(k) for k in ("prompt_tokens", "completion_tokens", "cached_tokens"))
    assert usage == wanted


@pytest.mark.parametrize("recording", each(xfail=True))
def test_the_outcome_is_what_the_peer_asserts(recording: Recording) -> None:
    outcome = fold(payloads([recording.body]))
    expected = recording.expected
    if expected["outcome"] == "Completion":
        assert outcome.error is None, outcome.error
        as_expected(outcome.completion, expected)
        return
    assert outcome.error is not None, outcome.completion
    error = outcome.error
    assert error["outcome"] == expected["outcome"]
    for key in ("message", "code", "type"):
        if key in expected["error"]:
            assert error[key] == expected["error"][key], key
    if "text_starts" in expected["error"]:
        assert error["text"].startswith(expected["error"]["text_starts"])
    if expected.get("partial") is None:
        assert error["partial"] is None
    else:
        as_expected(error["partial"], expected["partial"])
