"""ChatTurn as the driver sees it, at the edges the other suites leave open (found by
mutation testing, ``devtools/mutation.py turn``): the partial a consumer has seen when it
stops mid-batch, and the message of each input a phase does not expect. Synchronous."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from llamaclient import ProtocolError, Routed
from llamaclient._turn.known import Known
from llamaclient._turn.machine import ChatTurn
from llamaclient._turn.phase import TurnError
from llamaclient._turn.plan import Target
from llamaclient._types.events import ChatEvent, Content, Reasoning, ToolCallDelta
from tests.support import streams
from tests.support.streams import ROLE, chunk, timings
from tests.turn.script import SSE, Fail, Server, config, drive, stream_body, turn


def _call(index: int, arguments: str, name: str | None = None) -> dict[str, Any]:
    piece: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if name is not None:
        piece["id"] = f"{name}-id"
        piece["type"] = "function"
        piece["function"] = {"name": name, "arguments": arguments}
    return {"tool_calls": [piece]}


# Reasoning, content, then three tool calls: the first in one piece, the second in three (its
# first piece with arguments already), the third named in a piece without arguments, then
# its arguments, then a piece with none.
MIXED = [
    chunk(ROLE),
    chunk({"reasoning_content": "Let "}, timings=timings(1)),
    chunk({"reasoning_content": "me see."}, timings=timings(2)),
    chunk({"content": "Look"}, timings=timings(3)),
    chunk({"content": "ing."}, timings=timings(4)),
    chunk(_call(0, '{"a": 1}', "first"), timings=timings(5)),
    chunk(_call(1, '{"b"', "second"), timings=timings(6)),
    chunk(_call(1, ": "), timings=timings(7)),
    chunk(_call(1, "2}"), timings=timings(8)),
    chunk(_call(2, "", "third"), timings=timings(9)),
    chunk(_call(2, "{}"), timings=timings(10)),
    chunk(_call(2, ""), timings=timings(11)),
]


def _streamed(chunks: list[dict[str, Any]]) -> tuple[ChatTurn, list[ChatEvent]]:
    """A turn that got ``chunks`` in one read (one batch of events)."""
    t = turn()
    t.opened(200, {"content-type": "text/event-stream"}.get)
    events = t.data(stream_body(chunks, done=False))
    return t, events


def _shown(seen: list[ChatEvent]) -> tuple[str | None, str | None, list[tuple[str, str, str]]]:
    """What ``seen`` shows: the content, the reasoning and the calls (a call is shown from
    its first piece on)."""
    content = "".join(e.text for e in seen if isinstance(e, Content)) or None
    reasoning = "".join(e.text for e in seen if isinstance(e, Reasoning)) or None
    calls: list[list[str]] = []
    for e in seen:
        if isinstance(e, ToolCallDelta):
            if e.name is not None:
                calls.append([e.id or "", e.name, e.arguments])
            else:
                calls[e.index][2] += e.arguments
    return content, reasoning, [(i, n, a) for i, n, a in calls]


@pytest.mark.parametrize(
    "chunks",
    [MIXED, streams.tool_calls(), streams.answer_only()],
    ids=["mixed", "no content", "no reasoning"],
)
def test_the_partial_seen_is_what_the_taken_events_show_at_every_cut_of_a_batch(
    chunks: list[dict[str, Any]],
) -> None:
    t, events = _streamed(chunks)
    for taken in range(len(events) + 1):
        partial = t.partial_seen(events[taken:])
        content, reasoning, calls = _shown(events[:taken])
        assert partial.content == content, taken
        assert partial.reasoning_content == reasoning, taken
        assert [(c.id, c.name, c.arguments) for c in partial.tool_calls] == calls, taken
        assert partial.id == t.partial().id  # type: ignore[union-attr]


def test_the_partial_seen_with_nothing_unseen_is_the_partial() -> None:
    t, events = _streamed(MIXED)
    assert sum(isinstance(e, ToolCallDelta) for e in events) == 7
    assert t.partial_seen(()) == t.partial()
    assert t.partial_seen([]) == t.partial()


def _target() -> Target:
    return Target(config(), Known(), b"{}")


INPUTS: list[tuple[str, Callable[[ChatTurn], object]]] = [
    ("data", lambda t: t.data(b"x")),
    ("opened", lambda t: t.opened(200, lambda name: None)),
    ("body", lambda t: t.body(b"")),
    ("answered", lambda t: t.answered(200, b"")),
    ("failed", lambda t: t.failed("read", "x")),
    ("woke", lambda t: t.woke()),
    ("fired", lambda t: t.fired("load")),
    ("line", lambda t: t.line(0)),
    ("performed", lambda t: t.performed()),
    ("routed", lambda t: t.routed(_target(), Routed("s", None, "sticky"))),
    ("admitted", lambda t: t.admitted(0)),
]


@pytest.mark.parametrize(("name", "feed"), INPUTS, ids=[n for n, _ in INPUTS])
def test_an_unexpected_input_is_named_with_the_phase_and_its_command(
    name: str, feed: Callable[[ChatTurn], object]
) -> None:
    """The driver bug's message names the input, the phase and what the turn asked for."""
    t = turn()
    if name == "woke":
        t.opened(200, SSE.get)  # streaming: only data() and failed()
    else:
        t.failed("connect", "refused")  # backing off: only woke()
    expected = f"{name}() while the turn is {t.phase} ({t.command!r})"
    with pytest.raises(TurnError) as caught:
        feed(t)
    assert str(caught.value) == expected


def test_the_outcome_while_closing_is_what_the_turn_ends_with() -> None:
    """``outcome`` (read while the turn closes) is the Completion, or the error: the same
    object ``Done`` then carries."""
    t = turn()
    outcomes: list[object] = []
    run = drive(t, Server(), each=lambda turn, events: outcomes.append(turn.outcome))
    assert run.done.completion is not None
    assert outcomes[-1] is run.done.completion
    f = turn()
    ends: list[object] = []
    failed = drive(
        f, Server([Fail("protocol")]), each=lambda turn, events: ends.append(turn.outcome)
    )
    assert isinstance(failed.done.error, ProtocolError)
    assert ends[-1] is failed.done.error
    assert f.outcome is failed.done.error
