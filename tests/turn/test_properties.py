"""ChatTurn under any interleaving of inputs: whatever the server, the network, the timers
and the user do (each command answered by any input of its kind, or the user stopping at
any point), the turn ends in exactly one of a Completion, a typed ``InferError``, or a
quiet stop; at every step its partial is the fold of the events delivered so far; and once
output was delivered, the chat is never sent again."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import msgspec
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from llamaclient import (
    ChatRequest,
    Completion,
    Config,
    Content,
    InferError,
    Reasoning,
    Routed,
    ToolCallDelta,
    UserMessage,
)
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
from llamaclient._turn.plan import Target
from llamaclient._types.events import ChatEvent
from tests.support import streams
from tests.turn.script import config, stream_body, turn

EXAMPLES = int(os.environ.get("LLAMACLIENT_FUZZ_EXAMPLES", "150"))
BODIES = [stream_body(make()) for make in streams.ALL.values()]
KINDS = ["connect", "disconnected", "timeout", "protocol", "read", "stall"]
STATUSES = [200] * 8 + [404, 405, 429, 500, 502, 503]  # mostly a stream, to reach its end
ANSWERS = [
    b"",
    b'{"success":true}',
    b'{"error":{"code":503,"message":"Loading model"}}',
    b'[{"id":0,"is_processing":true}]',
    b'{"data":[{"id":"m","status":{"value":"loading"}}]}',
    b'{"data":[{"id":"m","status":{"value":"loaded"}}]}',
    b'{"modalities":{"vision":false}}',
    b"not json",
]
HEADERS = [{"content-type": "text/event-stream"}] * 6 + [{"content-type": "application/json"}, {}]


def fold(events: list[ChatEvent]) -> tuple[str, str, list[str]]:
    calls: list[str] = []
    for e in events:
        if isinstance(e, ToolCallDelta):
            if e.index == len(calls):
                calls.append("")
            calls[e.index] += e.arguments
    text = "".join(e.text for e in events if isinstance(e, Content))
    thought = "".join(e.text for e in events if isinstance(e, Reasoning))
    return text, thought, calls


def shown(partial: Completion | None) -> tuple[str, str, list[str]]:
    if partial is None:
        return "", "", []
    calls = [c.arguments for c in partial.tool_calls]
    return partial.content or "", partial.reasoning_content or "", calls


class Chaos:
    """Answers each command with an input of its kind, drawn by hypothesis."""

    def __init__(
        self, data: st.DataObject, conf: Config, request: ChatRequest, limited: bool
    ) -> None:
        self.draw = data.draw
        self.body = b""  # what the open response still has
        self.conf, self.request, self.limited = conf, request, limited  # for a pool's route

    def feed(self, t: ChatTurn, command: Command) -> Any:
        feeders: dict[type, Callable[[ChatTurn, Any], Any]] = {
            Send: self._send,
            Read: self._read,
            ReadAll: self._read_all,
            Call: self._call,
            Sleep: self._sleep,
            Line: self._line,
            Route: self._route,
            Admit: self._admit,
        }
        feeder = feeders.get(type(command))
        if feeder is None:
            assert isinstance(command, Drain | Close | Arm | Leave | Free), command
            return t.performed()
        return feeder(t, command)

    def _fail(self, t: ChatTurn) -> Any:
        return t.failed(self.draw(st.sampled_from(KINDS)), "fault")

    def _send(self, t: ChatTurn, command: Send) -> Any:
        if self.draw(st.integers(0, 9)) == 0:
            return self._fail(t)
        self.body = self.draw(st.sampled_from(BODIES))
        status = self.draw(st.sampled_from(STATUSES))
        headers = self.draw(st.sampled_from(HEADERS))
        return t.opened(status, headers.get)

    def _read(self, t: ChatTurn, command: Read) -> Any:
        choice = self.draw(st.integers(0, 29))
        if choice == 0 or not self.body:
            return self._fail(t) if choice == 0 else t.data(b"")
        if choice == 1:
            return t.data(self.draw(st.binary(min_size=1, max_size=20)))  # garbage
        cut = self.draw(st.integers(1, len(self.body)))
        piece, self.body = self.body[:cut], self.body[cut:]
        return t.data(piece)

    def _read_all(self, t: ChatTurn, command: ReadAll) -> Any:
        if self.draw(st.integers(0, 4)) == 0:
            return self._fail(t)
        data = self.draw(st.sampled_from([*ANSWERS, self.body]))
        return t.body(data[: command.limit], len(data) > command.limit)

    def _call(self, t: ChatTurn, command: Call) -> Any:
        choice = self.draw(st.integers(0, 6))
        if choice == 0:
            return self._fail(t)
        if choice == 1 and command.bound is not None:
            return t.fired(command.bound)
        status = self.draw(st.sampled_from([200, 200, 404, 500, 503]))
        return t.answered(status, self.draw(st.sampled_from(ANSWERS)))

    def _sleep(self, t: ChatTurn, command: Sleep) -> Any:
        if command.bound is not None and self.draw(st.booleans()):
            return t.fired(command.bound)
        return t.woke()

    def _line(self, t: ChatTurn, command: Line) -> Any:
        ahead = self.draw(st.integers(0, max(command.ahead, 2)))
        return t.line(ahead, self.draw(st.sampled_from([None, 0.2, 2.0])))

    def _route(self, t: ChatTurn, command: Route) -> Any:
        """A pool's choice: one of two servers (not the one that failed), or none left."""
        servers = [i for i in (0, 1) if i != command.failed]
        event("routed again" if command.failed is not None else "routed")
        if self.draw(st.integers(0, 5)) == 0:
            return t.failed("connect", "no server of the pool is up")
        index = self.draw(st.sampled_from(servers))
        target = Target(self.conf, Known(), b"{}", index, self.request, self.limited)
        return t.routed(target, Routed(f"http://s{index}", None, "new session"))

    def _admit(self, t: ChatTurn, command: Admit) -> Any:
        """The shared limit: a place, some turns still ahead, or no place in time."""
        choice = self.draw(st.integers(0, 5))
        event("admission")
        if choice == 0:
            return t.failed("timeout", "no place within 1 s")
        return t.admitted(0 if choice > 2 else self.draw(st.integers(1, 3)))


REQUESTS = [
    ChatRequest([UserMessage("q")]),
    ChatRequest([UserMessage("q")], slot=0, wait=False),
    ChatRequest([UserMessage("q")], thinking_budget=1),
]


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    request=st.sampled_from(REQUESTS),
    resume=st.booleans(),
    model=st.sampled_from(["", "m"]),
    stop_at=st.one_of(st.none(), st.integers(0, 40)),
    pooled=st.booleans(),
    limited=st.booleans(),
)
def test_any_interleaving_ends_in_one_outcome_and_keeps_the_partial_exact(
    data: st.DataObject,
    request: ChatRequest,
    resume: bool,
    model: str,
    stop_at: int | None,
    pooled: bool,
    limited: bool,
) -> None:
    """Plain turns, a pool's (routed, and routed again after a server could not be reached)
    and turns under a shared limit (admitted, queued or timed out)."""
    conf = config(model=model, max_retries=2)
    conversation = "c" if resume else None
    t = turn(request, conf=conf, conversation_id=conversation, pooled=pooled, limited=limited)
    chaos = Chaos(data, conf, request, limited)
    delivered: list[ChatEvent] = []
    output = False
    for step in range(400):
        command = t.command
        if isinstance(command, Done):
            break
        if step == stop_at or step == 300:
            t.stop()
            continue
        if output and isinstance(command, Send):
            assert command.method != "POST", "the chat was sent again after output"
        delivered += chaos.feed(t, command)
        output = output or any(
            isinstance(e, Content | Reasoning | ToolCallDelta) for e in delivered
        )
        assert shown(t.partial()) == fold(delivered)
    done = t.command
    assert isinstance(done, Done), done
    ended = "completion" if done.completion else type(done.error).__name__ if done.error else "stop"
    event(f"ended: {ended}")
    event(f"output delivered: {output}")
    assert not (done.completion is not None and done.error is not None)
    if done.error is not None:
        assert isinstance(done.error, InferError)
        assert shown(done.error.partial) == fold(delivered)
    if done.completion is not None:
        assert shown(done.completion) == fold(delivered)
    msgspec.json.encode(delivered)  # every event is a plain, encodable value
