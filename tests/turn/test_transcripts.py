"""ChatTurn's whole conversation with its driver, line by line, for one scenario of each
phase: every command with every field, every input fed back, every event, and how the turn
ended (the error's type and text). The expected transcripts are in ``transcripts.txt``, read
by eye when they change: they are the protocol between the machine and its driver, written
out. ``LLAMACLIENT_TRANSCRIPTS=write pytest tests/turn/test_transcripts.py`` rewrites them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from llamaclient import ChatRequest, ImagePart, UserMessage
from llamaclient._turn.commands import Command, Done, Read
from llamaclient._turn.known import Known
from llamaclient._turn.machine import ChatTurn
from llamaclient._turn.plan import Target
from llamaclient._types.events import Routed
from tests.support import streams
from tests.support.streams import ROLE, chunk, timings
from tests.turn.script import (
    FIRE,
    JSON,
    Answer,
    Fail,
    Server,
    _feed,
    answer,
    config,
    split_events,
    status,
    stream_body,
    turn,
)

FILE = Path(__file__).with_name("transcripts.txt")
LOADING = (503, b'{"error":{"code":503,"message":"Loading model"}}')


def models(*entries: tuple[str, str]) -> tuple[int, bytes]:
    data = [{"id": n, "aliases": [], "status": {"value": s}} for n, s in entries]
    return 200, msgspec.json.encode({"data": data})


def shown(value: Any) -> str:
    """A command or an event as one line: its type, then every field."""
    if isinstance(value, BaseException):
        return f"{type(value).__name__}({str(value)!r})"
    fields = getattr(value, "__struct_fields__", ())
    parts = []
    for name in fields:
        field = getattr(value, name)
        if field is None and name in ("logprobs", "confidence"):
            continue  # only with top_logprobs asked for
        if isinstance(field, bytes) and len(field) > 60:
            field = field[:60] + b"..."
        parts.append(f"{name}={shown(field) if isinstance(field, BaseException) else field!r}")
    return f"{type(value).__name__}({', '.join(parts)})"


def transcript(t: ChatTurn, server: Server, stop_after: int | None = None) -> list[str]:
    lines: list[str] = []
    from collections import deque

    body: deque[Any] = deque()
    for fed in range(500):
        command: Command = t.command
        if isinstance(command, Done):
            ended = command.completion or command.error
            lines.append(f"done {shown(ended) if ended is not None else 'stopped'}")
            if command.error is not None and command.error.partial is not None:
                partial = command.error.partial
                lines.append(f"  partial {partial.content!r} {partial.reasoning_content!r}")
            return lines
        if fed == stop_after:
            t.stop()
            lines.append("stop")
            continue
        if not isinstance(command, Read):
            lines.append(f"> {shown(command)}")
        events = _feed(t, command, server, body)
        lines += [f"  = {shown(e)}" for e in events]
    raise AssertionError("the turn did not end")


def pinned(**fields: Any) -> ChatRequest:
    return ChatRequest([UserMessage("q")], slot=1, **fields)


def a_router() -> Known:
    return Known()


SCENARIOS: dict[str, Callable[[], list[str]]] = {
    "plain stream": lambda: transcript(turn(), Server()),
    "no resume": lambda: transcript(turn(conversation_id=None), Server()),
    "retry after busy statuses": lambda: transcript(
        turn(conf=config(max_retries=2)),
        Server([status(503), status(429, b"", **{"retry-after": "1"}), answer()]),
    ),
    "retries run out": lambda: transcript(turn(conf=config(max_retries=1)), Server([status(502)])),
    "status boundaries": lambda: (
        transcript(turn(), Server([status(299, b"{}")]))
        + transcript(turn(), Server([status(300, b"moved")]))
        + transcript(turn(), Server([status(400, b"{}")]))
        + transcript(turn(), Server([status(401, b"{}")]))
    ),
    "whole answer": lambda: transcript(
        turn(),
        Server(
            [
                Answer(
                    200,
                    JSON,
                    [b'{"id":"r","choices":[{"finish_reason":"stop","message":{"content":"hi"}}]}'],
                )
            ]
        ),
    ),
    "loading": lambda: transcript(
        turn(),
        Server([Answer(503, JSON, [LOADING[1]]), answer()], {"/health": [(503, b""), (200, b"")]}),
    ),
    "loading dies": lambda: transcript(
        turn(conf=config(max_retries=1)),
        Server(
            [Answer(503, JSON, [LOADING[1]])],
            {"/health": [Fail("timeout"), Fail("connect", "refused")]},
        ),
    ),
    "loading times out": lambda: transcript(
        turn(),
        Server([Answer(503, JSON, [LOADING[1]])], {"/health": [(503, b"")]}, sleeps=["woke", FIRE]),
    ),
    "refused then exhausted": lambda: transcript(
        turn(conf=config(max_retries=1)), Server([Fail("connect", "refused")])
    ),
    "timeout and protocol before the head": lambda: (
        transcript(turn(), Server([Fail("timeout", "late")]))
        + transcript(turn(), Server([Fail("protocol", "garbage")]))
    ),
    "error body breaks": lambda: (
        transcript(turn(), Server([Answer(500, JSON, [Fail("stall", "slow")])]))
        + transcript(turn(), Server([Answer(502, JSON, [Fail("read", "cut")])]))
        + transcript(
            turn(conf=config(max_error_body_bytes=4)), Server([status(500, b"0123456789")])
        )
    ),
    "unanswered, resumed from zero": lambda: transcript(
        turn(), Server([Fail("read", "closed"), answer()])
    ),
    "unanswered, no session: sent again": lambda: transcript(
        turn(),
        Server(
            [Fail("read", "closed"), status(404, b"File Not Found"), answer()],
            {"/v1/streams/lookup": [(200, b"")]},
        ),
    ),
    "unanswered, no resume here": lambda: transcript(
        turn(),
        Server([Fail("read", "closed"), status(404, b"")], {"/v1/streams/lookup": [(404, b"")]}),
    ),
    "cut and resumed": lambda: transcript(
        turn(),
        Server(
            [Answer(body=[stream_body(streams.answer_only())[:300], Fail("read", "cut")])],
            session=stream_body(streams.answer_only()),
        ),
    ),
    "cut, route answers 405": lambda: transcript(
        turn(),
        Server(
            [Answer(body=[stream_body(streams.answer_only())[:300], Fail("stall", "cut")])],
            resumes=[status(405, b"")],
        ),
    ),
    "cut, session gone": lambda: transcript(
        turn(),
        Server(
            [Answer(body=[stream_body(streams.answer_only())[:700], Fail("read", "cut")])],
            resumes=[status(404, b"gone")],
            calls={"/v1/streams/lookup": [(200, b"")]},
        ),
    ),
    "cut, reconnect fails": lambda: transcript(
        turn(conf=config(max_retries=2)),
        Server(
            [Answer(body=[stream_body(streams.answer_only())[:700], Fail("read", "cut")])],
            resumes=[Fail("connect", "refused")] * 3,
        ),
    ),
    "reattach": lambda: transcript(
        turn(body=None, reattach=True, offset=5), Server(session=stream_body(streams.answer_only()))
    ),
    "media": lambda: transcript(
        turn(ChatRequest([UserMessage([ImagePart(url="u")])]), media=frozenset({"vision"})),
        Server(calls={"/props": [(200, b'{"modalities":{"vision":false}}')]}),
    ),
    "router: look, load, watch": lambda: transcript(
        turn(conf=config(model="m")),
        Server(
            calls={
                "/models": [
                    models(("m", "unloaded")),
                    models(("m", "loading")),
                    models(("m", "loaded")),
                ],
                "/models/load": [(200, b"")],
            }
        ),
    ),
    "router: a failed load": lambda: transcript(
        turn(conf=config(model="m")),
        Server(
            calls={
                "/models": [models(("m", "unloaded")), models(("m", "unloaded"))],
                "/models/load": [(500, b'{"error":{"message":"no"}}')],
            }
        ),
    ),
    "router: the look is retried": lambda: transcript(
        turn(conf=config(model="m", max_retries=1)),
        Server(calls={"/models": [Fail("connect", "refused"), Fail("timeout")]}),
    ),
    "router: load errors": lambda: (
        transcript(
            turn(conf=config(model="m")),
            Server(
                calls={
                    "/models": [models(("m", "unloaded"))],
                    "/models/load": [Fail("connect", "refused")],
                }
            ),
        )
        + transcript(
            turn(conf=config(model="m")),
            Server(
                calls={
                    "/models": [models(("m", "unloaded")), Fail("read", "cut")],
                    "/models/load": [(200, b"")],
                }
            ),
        )
        + transcript(
            turn(conf=config(model="m")),
            Server(calls={"/models": [models(("m", "loading")), (500, b"")]}),
        )
    ),
    "slot line, busy, wait": lambda: transcript(
        turn(pinned()),
        Server(
            calls={"/slots": [(200, b'[{"is_processing":false},{"is_processing":true}]')]},
            lines=[1, 0],
        ),
    ),
    "slot busy, no wait, ours": lambda: transcript(
        turn(pinned(wait=False)),
        Server(calls={"/slots": [(200, b'[{},{"is_processing":true}]'), (400, b"")]}, released=1.0),
    ),
    "slot busy, no wait, theirs": lambda: transcript(
        turn(pinned(wait=False)),
        Server(calls={"/slots": [(200, b'[{},{"is_processing":true}]')]}, released=1.49),
    ),
    "thinking budget": lambda: transcript(
        turn(ChatRequest([UserMessage("q")], thinking_budget=1), conf=config(thinking_grace=1)),
        Server(
            [
                Answer(
                    body=split_events(
                        stream_body(
                            [chunk(ROLE)]
                            + [
                                chunk({"reasoning_content": f"r{i}"}, timings=timings(i + 1))
                                for i in range(4)
                            ]
                        )
                    )
                )
            ],
            {"/v1/chat/completions/control": [(200, b'{"success":true}')]},
        ),
    ),
    "admission: queued, then a place": lambda: transcript(
        turn(ChatRequest([UserMessage("q")], priority=2), limited=True),
        Server(places=[3, 3, 1, 0]),
    ),
    "admission: no place in time": lambda: transcript(
        turn(limited=True), Server(places=[2, Fail("timeout", "no place within 1.0 s")])
    ),
    "stopped while streaming": lambda: transcript(
        turn(), Server(calls={"/v1/stream": [(404, b"")]}), stop_after=3
    ),
    "a pool's failover": lambda: transcript(
        turn(pooled=True),
        Server(
            [Fail("connect", "refused"), answer()],
            routes=[
                (
                    Target(config(base_url="http://s0"), Known(), b"{}", 0),
                    Routed("http://s0", None, "new session"),
                ),
                (
                    Target(config(base_url="http://s1"), Known(), b"{}", 1),
                    Routed("http://s1", None, "failover"),
                ),
            ],
        ),
    ),
}


def _all() -> str:
    out = []
    for name, run in SCENARIOS.items():
        out.append(f"## {name}")
        out += run()
        out.append("")
    return "\n".join(out)


def _sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return {parts[i]: parts[i + 1].strip() for i in range(1, len(parts), 2)}


if os.environ.get("LLAMACLIENT_TRANSCRIPTS") == "write":  # pragma: no cover
    FILE.write_text(_all())


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_turn_says_and_does_exactly_what_its_transcript_says(name: str) -> None:
    expected = _sections(FILE.read_text())[name]
    got = "\n".join(SCENARIOS[name]())
    assert got == expected
