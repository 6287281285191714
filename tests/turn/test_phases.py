"""ChatTurn as a whole: what the driver reads of it, stopping at any point, the end of a
turn, a pool's routing and failover, misuse by a driver, and the one place a transport
failure becomes a typed error. Synchronous."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from llamaclient import (
    ChatRequest,
    Config,
    ConnectError,
    Content,
    InferError,
    ProtocolError,
    Routed,
    StalledError,
    StreamClosedEarlyError,
    UserMessage,
    WaitTimeoutError,
)
from llamaclient._protocol.body import thinking_limit
from llamaclient._turn.budget import Budget, control_body
from llamaclient._turn.commands import READ, Close, Done, Leave, Route, Send
from llamaclient._turn.failures import typed_error
from llamaclient._turn.known import Known
from llamaclient._turn.phase import TurnError
from llamaclient._turn.plan import Target
from tests.turn.script import Answer, Fail, Server, answer, config, drive, turn


def test_what_the_driver_reads_follows_the_turn() -> None:
    t = turn()
    assert (t.phase, t.done, t.closing, t.outcome, t.completion, t.error) == (
        "sending the chat",
        False,
        False,
        None,
        None,
        None,
    )
    assert t.partial() is None
    assert t.generating is False
    t.opened(200, {"content-type": "text/event-stream"}.get)
    assert (t.phase, t.command, t.generating, t.offset) == ("streaming", READ, True, 0)
    t.data(answer().body[1])  # type: ignore[arg-type]
    assert t.offset > 0
    assert t.partial() is not None
    t.stop()
    assert (t.closing, t.outcome, t.phase) == (True, None, "closing")
    assert t.command == Close()
    assert not t.thinking_capped
    assert t.server is None
    assert t.context.plan.conversation_id == "c0ffee"


def test_the_partial_seen_leaves_out_what_the_consumer_has_not_taken() -> None:
    from llamaclient._turn.machine import EMPTY

    t = turn()
    assert t.partial_seen(()) is EMPTY  # nothing arrived yet
    t.opened(200, {"content-type": "text/event-stream"}.get)
    events = t.data(b"".join(answer().body[:4]))  # type: ignore[arg-type]
    assert events == [Content("Hi"), Content("!\n")]
    assert t.partial_seen(events[1:]).content == "Hi"


@pytest.mark.parametrize("after", range(12))
def test_stopped_after_any_input_the_turn_closes_quietly(after: int) -> None:
    server = Server([answer()], calls={"/v1/stream": [(204, b"")]})
    run = drive(turn(), server, stop_after=after)
    assert run.done.error is None
    assert len(run.sent(Send)) <= 1
    if run.done.completion is None and after >= 1:  # the chat may have started: cancelled
        assert "/v1/stream?conv_id=c0ffee" in run.paths()


def test_stop_while_closing_changes_nothing_and_done_takes_no_input() -> None:
    t = turn()
    t.failed("connect", "refused")  # a retry's backoff
    t.stop()
    assert t.command == Done()
    t.stop()
    assert t.command == Done()
    with pytest.raises(TurnError, match="an input after Done"):
        t.performed()


def test_an_input_the_command_does_not_expect_is_a_driver_bug() -> None:
    t = turn()
    with pytest.raises(TurnError, match=r"data\(\) while the turn is sending the chat"):
        t.data(b"x")
    feeds: list[Callable[[], object]] = [
        lambda: t.body(b""),
        lambda: t.answered(200, b""),
        lambda: t.woke(),
        lambda: t.fired("load"),
        lambda: t.line(0),
        lambda: t.performed(),
        lambda: t.routed(Target(config(), Known(), b""), Routed("s", None, "sticky")),
        lambda: t.admitted(0),
    ]
    for feed in feeds:
        with pytest.raises(TurnError):
            feed()


def test_a_phase_refuses_every_input_it_does_not_expect() -> None:
    t = turn()
    t.failed("connect", "refused")  # backing off: only woke() is expected
    feeds: list[Callable[[], object]] = [
        lambda: t.opened(200, lambda name: None),
        lambda: t.failed("read", "x"),
        lambda: t.body(b"", False),
    ]
    for feed in feeds:
        with pytest.raises(TurnError, match="while the turn is backing off"):
            feed()
    r = turn()
    r.opened(200, {"content-type": "text/event-stream"}.get)
    r.failed("read", "cut")  # resuming: the broken response is closed first
    r.performed()
    with pytest.raises(TurnError, match="body"):
        r.body(b"", False)  # no status yet: nothing to have a body


def test_a_turn_that_ended_keeps_what_it_ended_with() -> None:
    run = drive(turn(), Server())
    assert run.done.completion is not None
    failed = drive(turn(), Server([Fail("protocol")]))
    assert isinstance(failed.done.error, ProtocolError)


# -- a pool's turn --------------------------------------------------------------------------
def target(server: int, url: str = "http://s") -> Target:
    return Target(config(base_url=url), Known(), b"{}", server)


def test_a_pools_turn_routes_first_and_shows_where() -> None:
    event = Routed("http://s0", 1, "new session")
    run = drive(turn(pooled=True), Server(routes=[(target(0), event)]))
    assert run.commands[0] == Route(None)
    assert run.events[0] == event
    assert run.done.completion is not None


def test_a_server_that_cannot_be_reached_before_output_is_left_for_another() -> None:
    """Decided on the typed error and the turn's state: a ConnectError before the chat may
    have started. The first server's slot line is left first."""
    from llamaclient import ChatRequest, UserMessage

    request = ChatRequest([UserMessage("q")], slot=0)
    first = (target(0), Routed("http://s0", 0, "new session"))
    then = (target(1), Routed("http://s1", None, "failover"))
    server = Server(
        [Fail("connect", "refused"), answer()],
        routes=[first, then],
        calls={"/slots": [(200, b"[]")]},
    )
    run = drive(turn(request, pooled=True), server)
    moves = [c for c in run.commands if isinstance(c, Route | Leave)]
    assert moves == [Route(None), Leave(0), Route(0), Leave(0)]  # s0's line, then s1's
    assert [e for e in run.events if isinstance(e, Routed)] == [first[1], then[1]]
    assert Content("Hi") in run.events
    assert not any(type(e).__name__ == "Retrying" for e in run.events)  # no retry on s0


def test_once_the_chat_may_have_started_it_never_moves() -> None:
    first = (target(0), Routed("http://s0", None, "new session"))
    cut = Answer(body=[*answer().body[:2], Fail("read")])
    run = drive(turn(pooled=True, conversation_id=None), Server([cut], routes=[first]))
    assert isinstance(run.done.error, StreamClosedEarlyError)
    assert [c for c in run.commands if isinstance(c, Route)] == [Route(None)]


def test_no_server_left_is_a_connect_error() -> None:
    run = drive(turn(pooled=True), Server(routes=[Fail("connect", "no server of the pool is up")]))
    assert isinstance(run.done.error, ConnectError)
    assert str(run.done.error) == "no server of the pool is up"


def test_a_pools_turn_that_held_a_response_closes_it_before_routing_again() -> None:
    from llamaclient._turn.phase import Routing

    t = turn()
    t.opened(503, lambda name: None)
    ctx = t.context
    ctx.joined = 2
    routing = Routing(ctx, 0)
    assert routing.command == Close()
    assert routing.performed().command == Leave(2)
    assert routing.performed().command == Route(0)


# -- the one mapper -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kind", "where", "error", "text"),
    [
        ("timeout", "call", WaitTimeoutError, "GET /x: no answer within 5.0 s"),
        ("timeout", "open", WaitTimeoutError, "no response headers within 5.0 s"),
        ("stall", "stream", StalledError, "no bytes for 5.0 s while streaming"),
        ("stall", "body", StalledError, "no bytes for 5.0 s while reading a response body"),
        ("read", "call", ConnectError, "GET /x: boom"),
        ("protocol", "stream", ProtocolError, "the response broke HTTP/1.1 framing (boom)"),
        ("protocol", "open", ProtocolError, "the response is not valid HTTP/1.1 (boom)"),
        ("connect", "open", ConnectError, "boom"),
        ("read", "open", StreamClosedEarlyError, "no response: boom"),
        ("read", "stream", StreamClosedEarlyError, "the stream broke: boom"),
    ],
)
def test_each_kind_at_each_place_has_one_typed_error(
    kind: str, where: str, error: type[InferError], text: str
) -> None:
    got = typed_error(kind, "boom", where, timeout=5.0, what="GET /x")  # type: ignore[arg-type]
    assert type(got) is error
    assert str(got) == text


def test_the_key_is_hidden_in_every_error_of_a_chain_each_once() -> None:
    from llamaclient._turn.secret import hide_key

    key = "sk-0123456789abcdef"
    inner = ConnectError(f"refused ({key})")
    outer = StreamClosedEarlyError(f"no response: {key}")
    outer.__cause__ = outer.__context__ = inner  # the same error twice in the chain
    hide_key(outer, key)
    assert (str(outer), str(inner)) == ("no response: ***", "refused (***)")


def test_the_budget_of_a_request_and_of_a_config() -> None:
    def limit(requested: int | None, configured: int | None) -> int | None:
        config = Config("http://x", thinking_budget=configured)
        return thinking_limit(config, ChatRequest([UserMessage("hi")], thinking_budget=requested))

    assert limit(None, None) is None
    assert limit(0, 100) is None  # 0 turns the config's off
    assert limit(None, 100) == 100
    assert limit(7, 100) == 7
    assert Budget.of(None, 9) is None
    budget = Budget.of(100, 9)
    assert budget is not None
    assert (budget.limit, budget.grace, budget.server) == (100, 9, 109)  # the server's backstop
    proxied = Budget.of(100, 9, proxied=True)
    assert proxied is not None
    assert proxied.server == 100  # no control call through the proxy: the server's own
    assert control_body("id", "") == b'{"id":"id","action":"reasoning_end"}'
