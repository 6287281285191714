"""ChatTurn's shared phases and context, at the edges the other suites leave open (found by
mutation testing, ``devtools/mutation.py turn``): what a pool's chosen server brings to the
turn, the backoff as ``Retrying`` shows it, the loading wait's refusals in a row, what the
cancel's answer teaches, the cleanup after a failover, the exact errors. Synchronous."""

from __future__ import annotations

from typing import Any

import pytest

from llamaclient import (
    Assembler,
    ChatRequest,
    ConnectError,
    InferError,
    ProtocolError,
    Retrying,
    Routed,
    StalledError,
    StreamClosedEarlyError,
    ThinkingOverrunError,
    UserMessage,
)
from llamaclient._turn.budget import Budget
from llamaclient._turn.commands import (
    Admit,
    Call,
    Close,
    Command,
    Done,
    Free,
    Leave,
    Route,
    Send,
    Sleep,
)
from llamaclient._turn.failures import typed_error
from llamaclient._turn.known import Known
from llamaclient._turn.machine import ChatTurn
from llamaclient._turn.phase import Routing, TurnError
from llamaclient._turn.plan import Plan, Target
from tests.support import streams
from tests.support.streams import ROLE, chunk, timings
from tests.turn.script import (
    Answer,
    CallAnswer,
    Fail,
    Server,
    answer,
    config,
    drive,
    status,
    turn,
)

LOADING = (503, b'{"error":{"code":503,"message":"Loading model"}}')
CONTROL = "/v1/chat/completions/control"
WHOLE = b'{"id":"r","choices":[{"finish_reason":"stop","message":{"content":"hi"}}]}'


def thinking(n: int) -> list[dict[str, Any]]:
    out = [chunk(ROLE)]
    out += [chunk({"reasoning_content": f"r{i} "}, timings=timings(i + 1)) for i in range(n)]
    return [*out, chunk({"content": "ok"}, timings=timings(n + 1)), chunk({}, "stop")]


def plain() -> Known:
    known = Known()
    known.router = False  # no look at /models
    return known


# -- a pool's server ------------------------------------------------------------------------
def chosen(**conf: Any) -> tuple[Target, Routed]:
    limited = conf.pop("limited", False)
    target = Target(config(**conf), plain(), b"{}", 0, limited=limited)
    return target, Routed("http://s0", None, "new session")


def test_the_chosen_servers_model_is_the_turns_model() -> None:
    """The turn was planned without a model; the pool's server names one: a router's look
    asks for it."""
    target, event = chosen(model="m")
    target.known = Known()
    loaded: CallAnswer = (200, b'{"data":[{"id":"m","status":{"value":"loaded"}}]}')
    looks = {"/models": [loaded]}
    run = drive(turn(pooled=True), Server(routes=[(target, event)], calls=looks))
    assert run.paths() == ["/models", "/v1/chat/completions"]
    assert target.known.router is True
    assert run.done.completion is not None


def test_a_chosen_server_under_a_shared_limit_takes_a_place_first() -> None:
    run = drive(turn(pooled=True), Server(routes=[chosen(limited=True)]))
    assert [c for c in run.commands if isinstance(c, Admit | Free)] == [Admit(0, -1), Free()]
    assert run.done.completion is not None


def test_the_chosen_servers_thinking_budget_caps_the_turn() -> None:
    target, event = chosen(thinking_budget=2, model="")
    server = Server(
        [answer(thinking(5))],
        calls={CONTROL: [(200, b'{"success":true}')]},
        routes=[(target, event)],
    )
    run = drive(turn(pooled=True), server)
    assert CONTROL in run.paths()
    assert run.done.completion is not None
    assert run.done.completion.thinking_capped is True


def test_a_budget_never_reached_leaves_the_turn_uncapped() -> None:
    request = ChatRequest([UserMessage("q")], thinking_budget=100)
    t = turn(request, known=plain())
    run = drive(t, Server([answer(thinking(2))]))
    assert run.done.completion is not None
    assert run.done.completion.thinking_capped is False
    assert t.thinking_capped is False


def test_the_overrun_says_exactly_how_far_and_that_the_server_refused() -> None:
    request = ChatRequest([UserMessage("q")], thinking_budget=2)
    server = Server([answer(thinking(9))], {CONTROL: [(500, b"")]})
    run = drive(turn(request, conf=config(thinking_grace=3), known=plain()), server)
    error = run.done.error
    assert isinstance(error, ThinkingOverrunError)
    assert str(error) == (
        "reasoning went on for 6 tokens past a budget of 2 (the server refused to end it)"
    )
    accepted = Server([answer(thinking(9))], {CONTROL: [(200, b'{"success":true}')]})
    capped = drive(turn(request, conf=config(thinking_grace=3), known=plain()), accepted)
    assert str(capped.done.error) == "reasoning went on for 6 tokens past a budget of 2"


# -- backoff and the loading wait -----------------------------------------------------------
def test_retrying_shows_the_backoff_in_whole_milliseconds() -> None:
    conf = config(retry_backoff=1.5, retry_max_backoff=60.0, max_retries=1)
    run = drive(turn(conf=conf), Server([status(503, b"busy", **{"retry-after": "3"}), answer()]))
    [sleep] = run.sent(Sleep)
    [retrying] = [e for e in run.events if isinstance(e, Retrying)]
    assert sleep.seconds >= 1.0
    assert retrying.after_ms == int(sleep.seconds * 1000)
    assert (retrying.attempt, retrying.error) == (1, "HTTP 503")


def test_refusals_while_the_model_loads_count_only_in_a_row() -> None:
    """An answer from ``/health`` (even a 503) resets the count: only ``max_retries``
    refusals in a row mean the server died."""
    health = [Fail("connect"), (503, b""), Fail("connect"), (503, b""), Fail("connect"), (200, b"")]
    run = drive(
        turn(conf=config(max_retries=1)),
        Server([status(*LOADING), answer()], calls={"/health": health}),  # type: ignore[dict-item]
    )
    assert run.done.completion is not None
    died = [Fail("connect"), Fail("connect")]
    dead = drive(
        turn(conf=config(max_retries=1)),
        Server([status(*LOADING), answer()], calls={"/health": died}),  # type: ignore[dict-item]
    )
    assert isinstance(dead.done.error, ConnectError)


# -- closing --------------------------------------------------------------------------------
def stopped_while_streaming(cancel: tuple[int, bytes]) -> tuple[Known, list[Command]]:
    known = Known()
    t = turn(known=known)
    cut = Answer(body=[*answer().body[:2]])
    run = drive(t, Server([cut], calls={"/v1/stream": [cancel]}), stop_after=2)
    return known, run.commands


@pytest.mark.parametrize("code", [404, 405, 501])
def test_a_cancel_the_server_has_no_route_for_means_no_resume(code: int) -> None:
    known, commands = stopped_while_streaming((code, b""))
    assert any(isinstance(c, Call) and c.method == "DELETE" for c in commands)
    assert known.resume is False


@pytest.mark.parametrize("code", [204, 406, 500, 502])
def test_other_answers_to_a_cancel_teach_nothing(code: int) -> None:
    known, commands = stopped_while_streaming((code, b""))
    assert any(isinstance(c, Call) and c.method == "DELETE" for c in commands)
    assert known.resume is None


def test_an_input_after_done_is_named_exactly() -> None:
    t = turn()
    t.stop()
    assert t.command == Done()
    with pytest.raises(TurnError) as caught:
        t.performed()
    assert str(caught.value) == (
        "an input after Done() while the turn is closing (Done(completion=None, error=None))"
    )


# -- routing again --------------------------------------------------------------------------
def test_what_was_released_before_routing_again_is_not_released_twice() -> None:
    """The response and the slot line held on the first server are released once, before
    the pool routes again; what the turn does on the next server holds nothing of them."""
    t = turn(pooled=True)
    t.routed(Target(config(), plain(), b"{}", 0), Routed("http://s0", None, "new session"))
    t.opened(503, lambda name: None)  # an error answer: the response is held
    ctx = t.context
    ctx.joined = 2
    t._go(Routing(ctx, 0))  # as a failover from that state
    assert t.command == Close()
    second = Target(config(), plain(), b"{}", 1)
    server = Server(
        [Fail("connect", "refused")],
        routes=[(second, Routed("http://s1", None, "failover")), Fail("connect", "none left")],
    )
    run = drive(t, server)
    assert [c for c in run.commands if not isinstance(c, Send)] == [
        Close(),
        Leave(2),
        Route(0),
        Route(1),
        Done(None, run.done.error),
    ]
    assert isinstance(run.done.error, ConnectError)


# -- the mapper and the budget, as units ----------------------------------------------------
@pytest.mark.parametrize(
    ("kind", "error"),
    [("stall", StalledError), ("protocol", ProtocolError), ("read", StreamClosedEarlyError)],
)
def test_the_error_of_a_broken_stream_carries_the_partial_given(
    kind: str, error: type[InferError]
) -> None:
    partial = Assembler.from_response(WHOLE)
    got = typed_error(kind, "boom", "stream", timeout=1.0, partial=partial)
    assert type(got) is error
    assert got.partial is partial


def test_an_overrun_carries_the_reasoning_so_far_capped_or_not() -> None:
    asm = Assembler()
    for payload in streams.payloads(thinking(4)[:5], done=False):  # still reasoning
        asm.push(payload)
    budget = Budget(2, 1)
    assert budget.after(asm) == "ask"  # (past the budget: the end is asked for once)
    over = budget.overrun(asm)
    assert over.partial == asm.partial(False)
    assert over.partial is not None
    assert over.partial.reasoning_content == "r0 r1 r2 r3 "
    budget.capped = True
    assert budget.overrun(asm).partial == asm.partial(True)
    assert str(budget.overrun(asm)) == "reasoning went on for 4 tokens past a budget of 2"


def test_a_turn_made_for_a_pools_server_knows_it_and_leaves_it_when_unreachable() -> None:
    """A turn given its server up front (no routing first) is on it: a refused connection
    before any output sends it back to the pool, leaving that server out."""
    plan = Plan(ChatRequest([UserMessage("q")]), conversation_id="c0ffee")
    t = ChatTurn(plan, Target(config(), plain(), b"{}", 1))
    assert t.server == 1
    t.failed("connect", "refused")
    assert t.command == Route(1)
    assert t.phase == "routing"
