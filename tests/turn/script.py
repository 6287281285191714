"""A synchronous driver for ``ChatTurn``: a scripted server answers the turn's commands,
with no I/O, no clock and no event loop (the machine is pure, so its tests are too).

``Server`` holds what the server does: ``sends``, the answers to successive ``Send``
commands (an :class:`Answer`, or a :class:`Fail` for a transport failure); ``calls``, the
answers to the small exchanges, by path (a list per path, the last one repeating; a tuple
``(status, body)``, a ``Fail``, or ``FIRE``: the armed timer runs out first); ``sleeps``,
what each ``Sleep`` ends in (``WOKE`` by default, or ``FIRE``); ``lines``, what each
``Line`` reports. ``drive`` runs a turn to its end and keeps everything it did.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from llamaclient import ChatRequest, Config, UserMessage
from llamaclient._turn.commands import (
    Admit,
    Arm,
    Call,
    Close,
    Command,
    Done,
    Drain,
    Free,
    Leave,
    Line,
    Read,
    ReadAll,
    Route,
    Send,
    Sleep,
)
from llamaclient._turn.known import Known
from llamaclient._turn.machine import ChatTurn
from llamaclient._turn.plan import Plan, Target
from llamaclient._types.events import ChatEvent, Routed
from tests.support import streams

SSE = {"content-type": "text/event-stream"}
JSON = {"content-type": "application/json"}


@dataclass(frozen=True)
class Fail:
    """A transport failure of ``kind``."""

    kind: str = "read"
    message: str = "the connection broke"


FIRE = "fire"  # the armed timer runs out before the call or the sleep ends
WOKE = "woke"


@dataclass
class Answer:
    """One response: its head, then its body as the reads hand it out (a ``Fail`` among the
    pieces breaks the connection there)."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: dict(SSE))
    body: list[bytes | Fail] = field(default_factory=list)

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


def stream_body(payloads: Iterable[dict[str, Any] | str], done: bool = True) -> bytes:
    texts = [p if isinstance(p, str) else msgspec.json.encode(p).decode() for p in payloads]
    if done:
        texts.append("[DONE]")
    return b"".join(f"data: {t}\n\n".encode() for t in texts)


def answer(chunks: list[dict[str, Any]] | None = None, **kw: Any) -> Answer:
    """A 200 event stream of ``chunks`` (default: a plain answer), one read per event."""
    body = stream_body(chunks if chunks is not None else streams.answer_only())
    return Answer(body=split_events(body), **kw)


def status(code: int, body: bytes = b"", **headers: str) -> Answer:
    """A JSON answer of ``code`` (an error, or any answer that is not a stream)."""
    return Answer(code, {"content-type": "application/json", **headers}, [body])


def split_events(body: bytes) -> list[bytes | Fail]:
    return [piece + b"\n\n" for piece in body.split(b"\n\n") if piece]


CallAnswer = tuple[int, bytes] | Fail | str


@dataclass
class Server:
    sends: list[Answer | Fail] = field(default_factory=lambda: [answer()])
    calls: dict[str, list[CallAnswer]] = field(default_factory=dict)
    sleeps: list[str] = field(default_factory=list)
    lines: list[int] = field(default_factory=lambda: [0])
    released: float | None = None
    routes: list[tuple[Target, Routed] | Fail] = field(default_factory=list)
    places: list[int | Fail] = field(default_factory=lambda: [0])  # Admit: the places ahead
    session: bytes | None = None  # the server's session buffer: GET /v1/stream replays it
    resumes: list[Answer | Fail] = field(default_factory=list)  # before the session is used

    def __post_init__(self) -> None:
        # The answers are consumed as the turn asks: copies, so a script given twice (a
        # parametrized test run again) starts from the beginning each time.
        self.sends = list(self.sends)
        self.calls = {path: list(answers) for path, answers in self.calls.items()}
        self.sleeps, self.lines = list(self.sleeps), list(self.lines)
        self.routes, self.resumes = list(self.routes), list(self.resumes)
        self.places = list(self.places)

    def send(self, command: Send | None = None) -> Answer | Fail:
        if command is not None and command.path.startswith("/v1/stream?"):
            if self.resumes:
                return self.resumes.pop(0)
            if self.session is not None:
                offset = int(command.path.rpartition("&from=")[2])
                return Answer(body=[self.session[offset:]])
        return self.sends.pop(0) if len(self.sends) > 1 else self.sends[0]

    def call(self, command: Call) -> CallAnswer:
        path = command.path.split("?")[0]
        answers = self.calls.get(path)
        if answers is None:
            return (404, b"File Not Found")
        return answers.pop(0) if len(answers) > 1 else answers[0]


@dataclass
class Run:
    events: list[ChatEvent]
    commands: list[Command]
    done: Done
    partials: list[Any]  # the turn's partial after every input

    def sent(self, kind: type[Command] = Send) -> list[Any]:
        return [c for c in self.commands if isinstance(c, kind)]

    def paths(self) -> list[str]:
        return [c.path for c in self.commands if isinstance(c, Send | Call)]


def drive(
    turn: ChatTurn,
    server: Server,
    *,
    stop_after: int | None = None,
    each: Callable[[ChatTurn, Sequence[ChatEvent]], None] | None = None,
    limit: int = 10_000,
) -> Run:
    """Run ``turn`` against ``server`` to ``Done`` (``stop_after``: the user stops it once
    that many inputs were fed). ``each`` sees the turn after every input."""
    events: list[ChatEvent] = []
    commands: list[Command] = []
    partials: list[Any] = []
    body: deque[bytes | Fail] = deque()
    fed = 0
    for _ in range(limit):
        command = turn.command
        commands.append(command)
        if isinstance(command, Done):
            return Run(events, commands, command, partials)
        if stop_after is not None and fed == stop_after:
            turn.stop()
            fed += 1
            continue
        out = _feed(turn, command, server, body)
        fed += 1
        events += out
        partials.append(turn.partial())
        if each is not None:
            each(turn, out)
    raise AssertionError(f"the turn did not end in {limit} steps: {commands[-5:]}")


def _feed(
    turn: ChatTurn, command: Command, server: Server, body: deque[bytes | Fail]
) -> Sequence[ChatEvent]:
    feed = _FEEDS.get(type(command))
    if feed is not None:
        events: Sequence[ChatEvent] = feed(turn, command, server, body)
        return events
    if isinstance(command, Drain):
        body.clear()
    assert isinstance(command, Drain | Close | Arm | Leave | Free), command
    return turn.performed()


def _send(turn: ChatTurn, command: Any, server: Server, body: deque[bytes | Fail]) -> Any:
    sent = server.send(command)
    if isinstance(sent, Fail):
        return turn.failed(sent.kind, sent.message)
    body.clear()
    body.extend(sent.body)
    return turn.opened(sent.status, sent.header)


def _read(turn: ChatTurn, command: Any, server: Server, body: deque[bytes | Fail]) -> Any:
    piece = body.popleft() if body else b""
    if isinstance(piece, Fail):
        return turn.failed(piece.kind, piece.message)
    return turn.data(piece)


def _sleep(turn: ChatTurn, command: Any, server: Server, body: deque[bytes | Fail]) -> Any:
    ends = server.sleeps.pop(0) if server.sleeps else WOKE
    return turn.fired(command.bound or "load") if ends == FIRE else turn.woke()


def _line(turn: ChatTurn, command: Any, server: Server, body: deque[bytes | Fail]) -> Any:
    ahead = server.lines.pop(0) if len(server.lines) > 1 else server.lines[0]
    return turn.line(ahead, server.released if ahead == 0 else None)


def _admit(turn: ChatTurn, command: Any, server: Server, body: deque[bytes | Fail]) -> Any:
    places = server.places
    got = places.pop(0) if len(places) > 1 else places[0]
    return turn.failed(got.kind, got.message) if isinstance(got, Fail) else turn.admitted(got)


def _route(turn: ChatTurn, command: Any, server: Server, body: deque[bytes | Fail]) -> Any:
    routed = server.routes.pop(0)
    if isinstance(routed, Fail):
        return turn.failed(routed.kind, routed.message)
    return turn.routed(*routed)


_FEEDS: dict[type, Callable[[ChatTurn, Any, Server, deque[bytes | Fail]], Any]] = {
    Send: _send,
    Read: _read,
    ReadAll: lambda turn, command, server, body: _read_all(turn, command, body),
    Call: lambda turn, command, server, body: _call(turn, command, server),
    Sleep: _sleep,
    Line: _line,
    Admit: _admit,
    Route: _route,
}


def _read_all(turn: ChatTurn, command: ReadAll, body: deque[bytes | Fail]) -> Sequence[ChatEvent]:
    pieces: list[bytes] = []
    while body:
        piece = body.popleft()
        if isinstance(piece, Fail):
            return turn.failed(piece.kind, piece.message)
        pieces.append(piece)
    data = b"".join(pieces)
    return turn.body(data[: command.limit], len(data) > command.limit)


def _call(turn: ChatTurn, command: Call, server: Server) -> Sequence[ChatEvent]:
    got = server.call(command)
    if isinstance(got, Fail):
        return turn.failed(got.kind, got.message)
    if got == FIRE:
        return turn.fired(command.bound or "load")
    assert isinstance(got, tuple)
    status, data = got
    return turn.answered(status, data[: command.limit] if command.limit else data)


def config(**fields: Any) -> Config:
    base = {
        "base_url": "http://x",
        "retry_backoff": 0.01,
        "retry_max_backoff": 0.02,
        "load_timeout": 5.0,
    }
    return Config(**{**base, **fields})


def turn(
    request: ChatRequest | None = None,
    *,
    conf: Config | None = None,
    known: Known | None = None,
    body: bytes | None = b"{}",
    **plan: Any,
) -> ChatTurn:
    """A turn of ``request`` (default: one user message) under ``conf``; resume is on
    (a conversation id) unless ``conversation_id=None`` is given."""
    request = request or ChatRequest([UserMessage("hi")])
    plan.setdefault("conversation_id", "c0ffee")
    plan.setdefault("jitter", random.Random(7))  # the same backoffs on every run
    limited = plan.pop("limited", False)
    target = Target(conf or config(), known or Known(), body, limited=limited)
    return ChatTurn(Plan(request, **plan), target)
