"""ChatTurn fed real llama-server exchanges (``recordings/*.http``), with no client and no
I/O: each recorded response goes in as the server sent it (its own chunks), whole, and cut
in two at every byte; the events and the Completion (or the typed error) are the same every
time, and they are the Assembler's fold of the recorded payloads. A recorded cut stream and
its resumed rest (``GET /v1/stream`` from the byte offset) make one turn, cut at every byte
of the first part: nothing lost or repeated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devtools.recording import Recording, load
from llamaclient import (
    Assembler,
    ChatEvent,
    ChatRequest,
    Completion,
    ContextOverflowError,
    HTTPStatusError,
    Resuming,
    ServerError,
    UnsupportedInputError,
    UserMessage,
    Waiting,
)
from llamaclient._turn.commands import Send
from tests.turn.script import Answer, Fail, Server, config, drive, turn

DIRECTORY = Path(__file__).parents[2] / "recordings"
RECORDINGS = {p.stem: load(p) for p in sorted(DIRECTORY.glob("*.http"))}
STREAMED = [
    name
    for name, r in RECORDINGS.items()
    if r.request_line.startswith("POST /v1/chat/completions ") and r.status == 200
    and name != "resumed_cut"  # cut by the client: the resume test below
]
EVERY_BYTE = {"tool_call", "inband_error"}  # the rest: around every event boundary


def cuts(name: str, body: bytes) -> list[int]:
    """Where to cut ``body`` in two: at every byte, or around every event's end (the bytes
    where SSE framing decides) and every 29th byte in between (2-3 ms a drive)."""
    if name in EVERY_BYTE:
        return list(range(1, len(body)))
    ends = [i for i in range(len(body)) if body.startswith(b"\n\n", i)]
    near = {i + d for i in ends for d in (-1, 0, 1, 2, 3)} | set(range(1, len(body), 29))
    return sorted(c for c in near if 0 < c < len(body))
REFUSED = {
    "context_overflow": ContextOverflowError,
    "image_unsupported": UnsupportedInputError,
    "validation_error": HTTPStatusError,
    "validation_error_500": HTTPStatusError,
}


def recorded(r: Recording, pieces: list[bytes]) -> Answer:
    headers = {name.lower(): value for name, value in r.headers}
    return Answer(status=r.status, headers=headers, body=list(pieces))


def assembled(r: Recording) -> tuple[list[ChatEvent], Completion | None, ServerError | None]:
    asm, events = Assembler(), []
    try:
        for event in r.sse_events():
            events += asm.push(event.removeprefix(b"data: "))
    except ServerError as error:
        return events, None, error
    return events, asm.finish(), None


def outcome(run: object) -> tuple[object, ...]:
    done = run.done  # type: ignore[attr-defined]
    error = done.error
    shown = None if error is None else (type(error), str(error), error.partial)
    return run.events, done.completion, shown  # type: ignore[attr-defined]


def test_the_recordings_hold_the_streams_this_suite_needs() -> None:
    assert len(STREAMED) >= 10
    assert {"tool_call", "two_tool_calls", "inband_error", "reasoning_answer"} <= {*STREAMED}


@pytest.mark.parametrize("name", STREAMED)
def test_a_recorded_stream_is_the_assemblers_fold_however_it_is_cut(name: str) -> None:
    r = RECORDINGS[name]
    events, completion, error = assembled(r)
    whole = drive(turn(conf=config(thinking_budget=None)), Server([recorded(r, r.chunks)]))
    assert whole.events == events
    assert whole.done.completion == completion
    if error is not None:
        assert isinstance(whole.done.error, ServerError)
        assert whole.done.error.partial == error.partial
    assert outcome(drive(turn(), Server([recorded(r, [r.body])]))) == outcome(whole)
    for cut in cuts(name, r.body):
        pieces = [r.body[:cut], r.body[cut:]]
        assert outcome(drive(turn(), Server([recorded(r, pieces)]))) == outcome(whole), cut


@pytest.mark.parametrize(("name", "error"), sorted(REFUSED.items()))
def test_a_recorded_refusal_is_its_typed_error_and_nothing_is_shown(
    name: str, error: type[Exception]
) -> None:
    r = RECORDINGS[name]
    run = drive(turn(), Server([recorded(r, r.chunks)]))
    assert run.events == []
    assert isinstance(run.done.error, error)
    if isinstance(run.done.error, HTTPStatusError):
        assert run.done.error.status == r.status
        assert run.done.error.body == r.body.decode()


def test_a_recorded_loading_answer_is_waited_out_then_the_stream_goes() -> None:
    loading, then = RECORDINGS["loading_503"], RECORDINGS["tool_call"]
    server = Server(
        [recorded(loading, loading.chunks), recorded(then, then.chunks)],
        calls={"/health": [(loading.status, loading.body), (200, b'{"status":"ok"}')]},
    )
    run = drive(turn(), server)
    events, completion, _ = assembled(then)
    assert run.events == [Waiting(slot_busy=False), *events]
    assert run.done.completion == completion
    assert len(run.sent(Send)) == 2


def test_a_recorded_cut_and_its_resumed_rest_are_one_turn_wherever_the_cut_falls() -> None:
    """The recorded rest starts at the recorded cut's offset; cut earlier, the server's
    session (its buffer: the whole body) replays from wherever the turn stopped reading."""
    cut, rest = RECORDINGS["resumed_cut"], RECORDINGS["resumed_rest"]
    body = cut.body + rest.body
    assert int(rest.meta["from"]) == len(cut.body)
    whole = Assembler()
    expected: list[ChatEvent] = []
    for event in body.split(b"\n\n"):
        if event.startswith(b"data: "):
            expected += whole.push(event[6:])
    completion = whole.finish()
    headers = {name.lower(): value for name, value in cut.headers}
    for at in range(1, len(cut.body) + 1):
        server = Server([Answer(200, headers, [body[:at], Fail("read", "cut")])], session=body)
        run = drive(turn(), server)
        assert [e for e in run.events if not isinstance(e, Resuming)] == expected, at
        assert [e.offset for e in run.events if isinstance(e, Resuming)] == [at]
        assert run.done.completion == completion, at


def test_the_servers_overflow_carries_the_numbers_the_preflight_gives() -> None:
    """The recorded ``exceed_context_size_error``: the prompt and the slot's context from
    the server's error, ``max_tokens`` from the request (else the config)."""
    r = RECORDINGS["context_overflow"]
    request = ChatRequest([UserMessage("x")], max_tokens=77)
    run = drive(turn(request), Server([recorded(r, r.chunks)]))
    error = run.done.error
    assert isinstance(error, ContextOverflowError)
    body = json.loads(r.body)["error"]
    assert (error.n_prompt_tokens, error.n_ctx) == (body["n_prompt_tokens"], body["n_ctx"])
    assert (error.max_tokens, error.preflight) == (77, False)
    unset = drive(turn(conf=config(max_tokens=33)), Server([recorded(r, r.chunks)])).done.error
    assert isinstance(unset, ContextOverflowError)
    assert unset.max_tokens == 33
