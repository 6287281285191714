"""Why a turn's prompt cache fell short, and the admission line, at the edges the other
suites leave open (found by mutation testing, ``devtools/mutation.py turn2``): the exact
words of each reason, thinking turned off, a slot pinned on one turn only, a tool list with
tools both added and removed; one place ahead in the limiter's line. Synchronous."""

from __future__ import annotations

import pytest

from llamaclient import CacheReport, ChatRequest, Queued, ToolSchema, UserMessage
from llamaclient._turn.commands import Admit
from llamaclient._turn.history import History, Past, explain
from llamaclient._types.messages import AssistantMessage, ChatMessage, SystemMessage
from tests.support import streams
from tests.turn.script import Server, answer, drive, stream_body, turn

FIRST: list[ChatMessage] = [SystemMessage("You are a careful agent."), UserMessage("Go.")]
ANSWER = AssistantMessage("Done.")
NEXT: list[ChatMessage] = [*FIRST, ANSWER, UserMessage("Again.")]
TOOLS = (ToolSchema("read_file"), ToolSchema("write_file"))


def report(reused: int, *, past: dict[str, object], now: dict[str, object]) -> CacheReport:
    """This turn's report (140 prompt tokens, ``reused`` of them) against a previous turn of
    100 on ``http://x``; ``past``/``now``: the two requests' own fields."""
    before = Past(ChatRequest(FIRST, session="s", **past), ANSWER, 100, "http://x")  # type: ignore[arg-type]
    request = ChatRequest(NEXT, session="s", **now)  # type: ignore[arg-type]
    return explain(before, request, "http://x", 140, reused)


def test_a_few_tokens_short_with_nothing_changed_is_the_window_in_those_words() -> None:
    got = report(95, past={}, now={})
    assert (got.reason, got.detail) == (
        "window",
        "5 tokens short: a sliding-window model re-processes the end of the previous prompt "
        "(its checkpoint), by design",
    )
    one = report(99, past={}, now={})
    assert one.detail.startswith("1 token short: a sliding-window")


def test_more_short_with_nothing_changed_is_evicted_in_those_words() -> None:
    got = report(0, past={}, now={})
    assert (got.reason, got.detail) == (
        "evicted",
        "the messages and settings are the previous turn's, so the server no longer had "
        "them: its slot served another prompt since, or another backend took the turn",
    )


@pytest.mark.parametrize(
    ("past", "now"), [({"slot": 0}, {}), ({}, {"slot": 1}), ({"slot": 1}, {"slot": 1})]
)
def test_a_slot_pinned_on_one_turn_only_is_no_other_slot(
    past: dict[str, object], now: dict[str, object]
) -> None:
    assert report(0, past=past, now=now).reason == "evicted"


def test_thinking_turned_off_is_named_that_way_round() -> None:
    got = report(0, past={"thinking": True}, now={"thinking": False})
    assert (got.reason, got.detail) == (
        "settings",
        "thinking was on in the previous turn, off in this one",
    )
    kwargs = {"extra": {"chat_template_kwargs": {"x": 1}}}
    same = report(0, past={"thinking": False, **kwargs}, now={"thinking": True, **kwargs})
    assert same.detail == "thinking was off in the previous turn, on in this one"


def test_tools_both_added_and_removed_are_both_named() -> None:
    got = report(0, past={"tools": TOOLS}, now={"tools": (TOOLS[0], ToolSchema("delete"))})
    assert (got.reason, got.detail) == (
        "tools",
        "the tool list changed: added ['delete'], removed ['write_file']",
    )


# -- admission ------------------------------------------------------------------------------
def test_one_place_ahead_from_the_start_is_shown() -> None:
    run = drive(turn(limited=True), Server(places=[1, 1, 0]))
    assert [e for e in run.events if isinstance(e, Queued)] == [Queued(1)]
    admits = [c for c in run.commands if isinstance(c, Admit)]
    assert admits == [Admit(0, -1), Admit(0, 1), Admit(0, 1)]
    assert run.done.completion is not None


def test_a_reattached_turn_teaches_the_history_nothing() -> None:
    """It has no request of its own (another process sent it): nothing to remember it by."""
    history = History()
    request = ChatRequest([UserMessage("q")], session="s")
    t = turn(request, body=None, reattach=True, history=history)
    run = drive(t, Server(session=stream_body(streams.reasoning_answer())))
    assert run.done.completion is not None
    assert run.done.completion.cache is not None  # a report it could have been kept by
    assert history.previous("s") is None
    same = drive(turn(request, history=history), Server([answer(streams.reasoning_answer())]))
    assert same.done.completion is not None
    assert history.previous("s") is not None  # (a turn of its own is remembered)
