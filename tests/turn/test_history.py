"""Why a turn's prompt cache fell short (issue 25 part 2): the session's previous turn is
remembered; the next turn's first ``Progress`` says what the server reused, and when that
is more than a sliding-window model's 5 tokens short of the previous prompt, a
``CacheMiss`` follows it, with the reason looked for in order: another server, another
pinned slot, the first message or setting that differs, the window (nothing differs, at most
5 short), else evicted. The
Completion's ``cache`` report holds the same, and always the prompt and what was reused."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from llamaclient import (
    AssistantMessage,
    CacheMiss,
    CacheReport,
    ChatMessage,
    ChatRequest,
    Completion,
    Confidence,
    Content,
    Progress,
    Reasoning,
    SystemMessage,
    ToolCall,
    ToolSchema,
    UserMessage,
)
from llamaclient._turn.history import CacheWatch, History, Past, explain, miss
from llamaclient._turn.known import Known
from llamaclient._turn.plan import Target
from llamaclient._types.events import ChatEvent, Routed
from llamaclient.testing import _wire as wire
from tests.support.streams import ROLE, chunk, timings
from tests.turn.script import Answer, Run, Server, config, drive, stream_body, turn
from tests.turn.script import answer as streamed

SYSTEM = SystemMessage("You are a careful agent.")
FIRST: list[ChatMessage] = [SYSTEM, UserMessage("Read notes.txt.")]
TOOLS = (ToolSchema("read_file"), ToolSchema("write_file"))


def answer(prompt: int, cache: int) -> Answer:
    """A streamed answer (thinking "Let me look.", then "Done.") of a ``prompt``-token
    prompt, ``cache`` of it reused."""
    return Answer(
        body=[
            stream_body(
                [
                    chunk(ROLE, prompt_progress=wire.progress(prompt, cache, cache, 0)),
                    chunk({"reasoning_content": "Let me look."}),
                    chunk(
                        {"content": "Done."},
                        timings=timings(1, cache=cache, prompt=prompt - cache),
                    ),
                    chunk({}, "stop", timings=timings(2, cache=cache, prompt=prompt - cache)),
                ]
            )
        ]
    )


def run_turn(
    history: History,
    messages: list[Any],
    prompt: int,
    cache: int,
    *,
    session: str | None = "s",
    base_url: str = "http://x",
    **fields: Any,
) -> Run:
    request = ChatRequest(messages, session=session, tools=fields.pop("tools", TOOLS), **fields)
    conf = config(base_url=base_url)
    return drive(turn(request, conf=conf, history=history), Server([answer(prompt, cache)]))


def completion_of(result: Run) -> Completion:
    completion = result.done.completion
    assert completion is not None
    return completion


def first_turn(history: History) -> list[Any]:
    """The session's first turn (100 prompt tokens); the messages of the next, echoed."""
    done = completion_of(run_turn(history, FIRST, 100, 0))
    return [*FIRST, done.message(), UserMessage("Now write out.txt.")]


def misses(result: Run) -> list[CacheMiss]:
    return [e for e in result.events if isinstance(e, CacheMiss)]


def test_exact_echo_that_reuses_the_previous_prompt_has_no_miss() -> None:
    history = History()
    second = run_turn(history, first_turn(history), 140, 100)
    assert misses(second) == []
    assert completion_of(second).cache == CacheReport(prompt=140, reused=100, expected=100)


def test_the_miss_follows_the_first_progress_and_comes_before_the_answer() -> None:
    history = History()
    second = run_turn(history, first_turn(history), 140, 0)
    kinds = [type(e) for e in second.events]
    assert kinds[:3] == [Progress, CacheMiss, Reasoning]
    assert Content in kinds
    [event] = misses(second)
    assert (event.expected, event.reused, event.reason) == (100, 0, "evicted")
    report = completion_of(second).cache
    assert report == CacheReport(140, 0, 100, "evicted", event.detail)
    assert report.shortfall == 100


def test_a_request_without_a_session_gets_the_plain_report_and_no_event() -> None:
    history = History()
    first = completion_of(run_turn(history, FIRST, 100, 0, session=None))
    messages = [*FIRST, first.message(), UserMessage("go")]
    second = run_turn(history, messages, 140, 0, session=None)
    assert misses(second) == []
    assert completion_of(second).cache == CacheReport(140, 0)


def test_five_tokens_short_is_the_sliding_window_and_no_event() -> None:
    history = History()
    second = run_turn(history, first_turn(history), 140, 95)
    assert misses(second) == []
    report = completion_of(second).cache
    assert report is not None
    assert (report.reason, report.shortfall) == ("window", 5)
    history = History()
    six_short = run_turn(history, first_turn(history), 140, 94)
    assert [(m.expected, m.reused, m.reason) for m in misses(six_short)] == [(100, 94, "evicted")]


def test_a_change_is_named_before_the_window() -> None:
    history = History()
    messages = first_turn(history)
    messages[0] = SystemMessage("edited")
    report = completion_of(run_turn(history, messages, 140, 99)).cache
    assert report is not None
    assert (report.reason, report.shortfall) == ("messages", 1)
    one = completion_of(run_turn(History(), FIRST, 1, 0)).cache
    assert one == CacheReport(1, 0)


def test_one_token_short_says_one_token() -> None:
    history = History()
    report = completion_of(run_turn(history, first_turn(history), 140, 99)).cache
    assert report is not None
    assert report.detail.startswith("1 token short: ")


def test_an_older_answer_changed_since_the_previous_turn_is_named() -> None:
    history = History()
    second = completion_of(run_turn(history, first_turn(history), 140, 100))
    third = [*first_turn(History()), second.message(), UserMessage("And then?")]
    third[2] = AssistantMessage(content="Done.")  # turn 1's answer, its thinking dropped
    [event] = misses(run_turn(history, third, 180, 20))
    assert (event.reason, event.expected) == ("messages", 140)
    assert event.detail == (
        "messages[2] (assistant): its reasoning_content differs from the previous turn's "
        "(an answer not sent back as it came: keep completion.message())"
    )


def test_another_server_is_the_first_reason() -> None:
    history = History()
    messages = first_turn(history)
    messages[0] = SystemMessage("edited")  # also a change, but the server comes first
    second = run_turn(history, messages, 140, 0, base_url="http://other")
    [event] = misses(second)
    assert event.reason == "server"
    assert "http://x" in event.detail
    assert "http://other" in event.detail


def test_another_pinned_slot_is_the_next_reason() -> None:
    history = History()
    done = completion_of(run_turn(history, FIRST, 100, 0, slot=0))
    messages = [*FIRST, done.message(), UserMessage("go")]
    [event] = misses(run_turn(history, messages, 140, 0, slot=1))
    assert event.reason == "slot"
    assert event.detail == "the previous turn ran on slot 0, this one on slot 1"


@pytest.mark.parametrize(
    ("change", "reason", "detail"),
    [
        (
            lambda m: [SystemMessage("You are a sloppy agent."), *m[1:]],
            "messages",
            "messages[0] (system): its content differs from the previous turn's "
            "(an edited system prompt)",
        ),
        (
            lambda m: [*m[:2], AssistantMessage(content="Done."), *m[3:]],
            "messages",
            "messages[2] is not the previous answer as it came: its reasoning_content differs "
            "(send completion.message() back)",
        ),
        (
            lambda m: [m[0], UserMessage("Read notes.txt!"), *m[2:]],
            "messages",
            "messages[1] (user): its content differs from the previous turn's",
        ),
        (
            lambda m: [m[0], AssistantMessage("hi"), *m[2:]],
            "messages",
            "messages[1] is an assistant message where the previous turn had a user one",
        ),
        (
            lambda m: [m[0]],
            "messages",
            "the request has 1 messages where the previous turn's and its answer were 3: "
            "messages[1:] were dropped or compacted",
        ),
    ],
)
def test_the_first_message_that_differs_is_named(change: Any, reason: str, detail: str) -> None:
    history = History()
    messages = first_turn(history)
    assert messages[2] == AssistantMessage(content="Done.", reasoning_content="Let me look.")
    [event] = misses(run_turn(history, change(messages), 140, 0))
    assert (event.reason, event.detail) == (reason, detail)


@pytest.mark.parametrize(
    ("fields", "reason", "detail"),
    [
        (
            {"tools": (TOOLS[1], TOOLS[0])},
            "tools",
            "the same tools in another order: ['write_file', 'read_file'] "
            "(was ['read_file', 'write_file'])",
        ),
        (
            {"tools": (*TOOLS, ToolSchema("delete"))},
            "tools",
            "the tool list changed: added ['delete']",
        ),
        ({"tools": TOOLS[:1]}, "tools", "the tool list changed: removed ['write_file']"),
        (
            {"tools": (ToolSchema("read_file", "reads a file"), TOOLS[1])},
            "tools",
            "tool 'read_file' changed (its description or parameters)",
        ),
        ({"thinking": True}, "settings", "thinking was off in the previous turn, on in this one"),
        (
            {"extra": {"chat_template_kwargs": {"x": 1}}},
            "settings",
            "chat_template_kwargs differ from the previous turn's",
        ),
    ],
)
def test_a_changed_tool_list_or_setting_is_named(
    fields: dict[str, Any], reason: str, detail: str
) -> None:
    history = History()
    [event] = misses(run_turn(history, first_turn(history), 140, 0, **fields))
    assert (event.reason, event.detail) == (reason, detail)


def test_a_pools_turn_moved_to_another_server_says_so() -> None:
    history = History()
    messages = first_turn(history)
    moved = Target(config(base_url="http://s1"), Known(), b"{}", 1)
    request = ChatRequest(messages, session="s", tools=TOOLS)
    result = drive(
        turn(request, pooled=True, history=history),
        Server([answer(140, 0)], routes=[(moved, Routed("http://s1", None, "failover"))]),
    )
    [event] = misses(result)
    assert event.reason == "server"


def test_the_history_forgets_the_least_recently_used_session_first() -> None:
    history = History(max_sessions=2)
    for session in ("a", "b", "c"):
        run_turn(history, FIRST, 100, 0, session=session)
    assert history.previous("a") is None
    assert history.previous("b") is not None
    assert history.previous("c") is not None


def test_a_failed_turn_is_not_remembered() -> None:
    history = History()
    request = ChatRequest(FIRST, session="s")
    drive(turn(request, history=history), Server([Answer(500, {}, [b"{}"])]))
    assert history.previous("s") is None


def test_a_turn_without_timings_is_not_remembered() -> None:
    """Nothing to count the next turn's reuse against (a server that sends no timings)."""
    history = History()
    request = ChatRequest(FIRST, session="s")
    chunks = [chunk(ROLE), chunk({"content": "Hi"}), chunk({}, "stop")]
    run = drive(turn(request, history=history), Server([streamed(chunks)]))
    assert run.done.completion is not None
    assert run.done.completion.timings is None
    assert history.previous("s") is None


def test_the_watch_passes_batches_without_progress_untouched_until_the_first() -> None:
    past = Past(ChatRequest(FIRST, session="s"), AssistantMessage("a"), 100, "http://x")
    now = (ChatRequest(FIRST, session="s"), "http://x")
    watch = CacheWatch(past, lambda: now)
    plain: list[ChatEvent] = [Content("a"), Content("b")]
    assert watch(plain) is plain
    assert not watch.done
    short: list[ChatEvent] = [Content("c"), Progress(200, 10, 10, 1.0)]
    shown = watch(short)
    assert watch.done
    assert [type(e).__name__ for e in shown] == ["Content", "Progress", "CacheMiss"]
    later: list[ChatEvent] = [Progress(200, 10, 200, 2.0)]
    assert watch(later) is later  # one report a turn


def test_explain_and_miss_at_their_edges() -> None:
    request = ChatRequest(FIRST, session="s", tools=TOOLS)
    past = Past(request, AssistantMessage("a"), 100, "http://x")
    assert explain(None, request, "http://x", 50, 10) == CacheReport(50, 10)
    exact = explain(past, request, "http://x", 150, 100)
    assert (exact.reason, exact.shortfall, miss(exact)) == (None, 0, None)
    assert explain(past, request, "http://x", 150, 120).shortfall == 0  # more than expected
    assert miss(explain(past, request, "http://x", 150, 95)) is None  # 5: the window
    sixth = miss(explain(past, request, "http://x", 150, 94))
    assert sixth is not None
    assert (sixth.expected, sixth.reused) == (100, 94)
    assert CacheReport(1, 1).shortfall == 0


def test_a_tool_calls_confidence_is_not_a_change_it_is_never_sent() -> None:
    call = ToolCall("c1", "read_file", '{"path": "a"}')
    sure = msgspec.structs.replace(call, confidence={"path": Confidence(0.5, 0.5, 1)})
    request = ChatRequest(FIRST, session="s")
    past = Past(request, AssistantMessage(None, tool_calls=(sure,)), 100, "http://x")
    rebuilt = [*FIRST, AssistantMessage(None, tool_calls=(call,)), UserMessage("next")]
    report = explain(past, ChatRequest(rebuilt, session="s"), "http://x", 150, 50)
    assert report.reason != "messages", report.detail
    edited = msgspec.structs.replace(call, arguments='{"path": "b"}')
    changed = [*FIRST, AssistantMessage(None, tool_calls=(edited,)), UserMessage("next")]
    report = explain(past, ChatRequest(changed, session="s"), "http://x", 150, 50)
    assert "messages[" in report.detail


def test_an_answer_of_another_class_with_the_same_fields_is_no_change() -> None:
    """The server sees the same JSON: the cache was evicted, not the history edited."""

    class KeptAnswer(AssistantMessage, frozen=True):
        """An application's own answer type: the same fields, another class."""

    past = Past(ChatRequest(FIRST, session="s"), AssistantMessage("Done."), 100, "http://x")
    request = ChatRequest([*FIRST, KeptAnswer("Done."), UserMessage("Again.")], session="s")
    assert explain(past, request, "http://x", 140, 0).reason == "evicted"
