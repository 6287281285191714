"""The pool's Balancer at the edges the other suites leave open (found by mutation testing,
``devtools/mutation.py turn2``): hibernation's bookkeeping (which sessions are idle, a
session that sleeps gives its slot up, one that wakes gets one back), and the route of a
request without a session (the most free slots, then the fewest requests of ours, then the
fewest sessions, then the first server), also when a session's own slot is busy."""

from __future__ import annotations

from llamaclient._turn.balancer import Balancer, Route, weight


def one_server(slots: int) -> Balancer:
    b = Balancer(1)
    b.servers[0].slots = slots
    return b


def run(b: Balancer, session: str | None, route: Route, start: float, end: float | None) -> None:
    """A request of ``session`` on ``route`` from ``start`` (``end`` None: still running)."""
    b.start(session, route)
    if end is not None:
        b.finish(session, route, end)
    assert start <= (end if end is not None else start)


# -- hibernation ----------------------------------------------------------------------------
def hibernating() -> Balancer:
    """On one server of 4 slots: ``a`` (slot 0) ended at 10, ``b`` (slot 1) is running,
    ``c`` (slot 2) ended at 15, ``d`` (no slot of its own) ended at 0."""
    b = one_server(4)
    run(b, "a", Route(0, 0, "new session"), 0.0, 10.0)
    run(b, "b", Route(0, 1, "new session"), 0.0, None)
    run(b, "c", Route(0, 2, "new session"), 0.0, 15.0)
    b.servers[0].owners.add(3)  # slot 3 is someone else's: "d" gets none of its own
    run(b, "d", Route(0, 3, "new session"), 0.0, 0.0)
    return b


def test_idle_sessions_have_a_slot_of_their_own_nothing_in_flight_and_waited_long_enough() -> None:
    b = hibernating()
    assert b.idle(20.0, 10.0) == [("a", 0, 0)]  # exactly 10 s: idle
    assert b.idle(25.0, 10.0) == [("a", 0, 0), ("c", 0, 2)]
    assert b.idle(19.9, 10.0) == []


def test_a_session_that_sleeps_gives_its_slot_up_once() -> None:
    b = hibernating()
    server = b.servers[0]
    assert (server.sessions, server.owners) == (4, {0, 1, 2, 3})
    b.sleep("a")
    assert (server.sessions, server.owners) == (3, {1, 2, 3})
    assert b.idle(100.0, 10.0) == [("c", 0, 2)]  # no slot of its own any more
    b.sleep("a")  # again: nothing more to give up
    assert (server.sessions, server.owners) == (3, {1, 2, 3})
    new = b.route("e", None, 100.0)
    assert new == Route(0, 0, "new session")  # the slot it gave up is free for another


def test_a_sleeping_session_wakes_on_a_slot_of_its_own_to_restore_into() -> None:
    b = hibernating()
    server = b.servers[0]
    b.sleep("a")
    routed, restore = b.wake("a", Route(0, None, "sticky"))
    assert (routed, restore) == (Route(0, 0, "sticky"), True)
    assert (server.sessions, server.owners) == (4, {0, 1, 2, 3})
    b.finish("a", routed, 30.0)
    assert b.idle(40.0, 10.0) == [("a", 0, 0), ("c", 0, 2)]  # its slot again
    assert b.wake("a", Route(0, None, "sticky")) == (Route(0, None, "sticky"), False)  # awake
    assert server.sessions == 4


def test_a_session_wakes_on_the_slot_its_route_names() -> None:
    b = hibernating()
    b.sleep("c")
    assert b.wake("c", Route(0, 2, "sticky")) == (Route(0, 2, "sticky"), True)
    assert b.servers[0].owners == {0, 1, 2, 3}
    other = one_server(4)
    run(other, "a", Route(0, 0, "new session"), 0.0, 1.0)
    other.sleep("a")
    assert other.wake("a", Route(0, 2, "sticky")) == (Route(0, 2, "sticky"), True)
    assert other.servers[0].owners == {2}


def test_a_session_that_cannot_wake_where_it_slept_restores_nothing() -> None:
    b = Balancer(2)
    for server in b.servers:
        server.slots = 1
    run(b, "a", Route(0, 0, "new session"), 0.0, 1.0)
    b.sleep("a")
    assert b.wake("a", Route(1, None, "failover")) == (Route(1, None, "failover"), False)
    assert b.wake(None, Route(0, None, "new session")) == (Route(0, None, "new session"), False)
    assert b.wake("nobody", Route(0, 0, "sticky")) == (Route(0, 0, "sticky"), False)
    run(b, "x", Route(0, 0, "new session"), 2.0, None)  # another session took the slot
    assert b.wake("a", Route(0, None, "sticky")) == (Route(0, None, "sticky"), False)
    assert b.servers[0].sessions == 2  # it is one of the server's sessions again, unpinned
    assert b.wake("a", Route(0, None, "sticky")) == (Route(0, None, "sticky"), False)
    assert b.servers[0].sessions == 2


# -- a request without a session ------------------------------------------------------------
def three(slots: int = 2) -> Balancer:
    b = Balancer(3)
    for server in b.servers:
        server.slots = slots
    return b


def test_without_a_session_the_most_free_slots_win() -> None:
    b = three()
    b.servers[0].saw([True, False], 0.0)
    b.servers[2].saw([True, True], 0.0)
    assert b.route(None, None, 0.0) == Route(1, 0, "new session")
    b.servers[1].saw([True, True], 0.0)
    b.servers[0].saw([True, True], 0.0)
    assert b.route(None, None, 0.0) == Route(0, 0, "new session")  # none free: still routed


def test_then_the_fewest_requests_of_ours() -> None:
    b = three(slots=4)
    for _ in range(2):
        b.start(None, Route(0, None, "new session"))
    b.start(None, Route(1, None, "new session"))
    b.start(None, Route(2, None, "new session"))
    # Every server has 4 - (its unpinned requests) free slots: 2, 3, 3; then ours: 1, 1.
    b.start(None, Route(2, 3, "new session"))  # server 2: slot 3 busy too (2 free, 2 ours)
    b.servers[1].saw([True, False, False, False], 0.0)  # server 1: 2 free, 1 of ours
    assert [len(s.free_slots()) for s in b.servers] == [2, 2, 2]
    assert b.route(None, 5, 0.0) == Route(1, 5, "new session")


def test_then_the_fewest_sessions_then_the_first() -> None:
    b = three(slots=8)
    run(b, "a", Route(0, 0, "new session"), 0.0, 1.0)
    run(b, "b", Route(0, 1, "new session"), 0.0, 1.0)
    run(b, "c", Route(2, 0, "new session"), 0.0, 1.0)
    assert b.route(None, 6, 2.0) == Route(1, 6, "new session")
    run(b, "d", Route(1, 0, "new session"), 2.0, 3.0)
    assert b.route(None, 6, 4.0) == Route(1, 6, "new session")  # 1 and 2 tie: the first
    run(b, "e", Route(1, 1, "new session"), 4.0, 5.0)
    assert b.route(None, 6, 6.0) == Route(2, 6, "new session")


def test_without_a_session_a_server_that_is_down_or_not_allowed_is_left_out() -> None:
    b = three()
    b.servers[1].failed(0.0)
    assert b.route(None, None, 0.1) == Route(0, 0, "new session")
    assert b.route(None, None, 0.1, allowed=(1, 2)) == Route(2, 0, "new session")
    assert b.route(None, None, 0.1, allowed=(1,)) is None
    assert b.route(None, None, 10.0, allowed=(1,)) == Route(1, 0, "new session")  # back up


def test_a_session_whose_slot_is_busy_moves_only_to_a_free_slot_elsewhere() -> None:
    """``slot busy``: the server with a free slot (another than its own), else it stays."""
    b = three(slots=1)
    run(b, "a", Route(0, 0, "new session"), 0.0, 1.0)
    b.servers[0].saw([True], 10.0)  # someone else's request on its slot
    b.servers[1].saw([True], 10.0)
    assert b.route("a", None, 10.0) == Route(2, 0, "slot busy")
    b.servers[2].saw([True], 10.0)
    assert b.route("a", None, 10.0) == Route(0, 0, "sticky")  # nowhere free: it waits
    b.servers[2].saw([False], 10.0)
    b.servers[2].failed(10.0)
    assert b.route("a", None, 10.1) == Route(0, 0, "sticky")
    assert b.route("a", None, 10.1, allowed=(0, 1)) == Route(0, 0, "sticky")


def test_a_session_stays_when_its_own_server_has_the_only_free_slot() -> None:
    b = Balancer(2)
    for server in b.servers:
        server.slots = 2
    run(b, "a", Route(0, 0, "new session"), 0.0, 1.0)
    b.servers[0].saw([True, False], 10.0)  # its slot busy, the other one free
    b.servers[1].saw([True, True], 10.0)
    assert b.route("a", None, 10.0) == Route(0, 0, "sticky")


def test_a_request_that_names_its_slot_stays_on_it_even_when_busy() -> None:
    b = three(slots=1)
    run(b, "a", Route(0, 0, "new session"), 0.0, 1.0)
    b.servers[0].saw([True], 10.0)
    assert b.route("a", 0, 10.0) == Route(0, 0, "sticky")


NAMES = ["http://10.0.0.1:8080", "http://10.0.0.2:8080", "http://10.0.0.3:8080"]


def test_a_failover_follows_each_sessions_own_order_and_keeps_a_named_slot() -> None:
    for i in range(40):
        session = f"agent-{i}"
        b = Balancer(3, names=NAMES)
        for server in b.servers:
            server.slots = 4
        first = b.route(session, None, 0.0)
        assert first is not None
        run(b, session, first, 0.0, 0.0)
        b.servers[first.server].failed(0.0)
        order = sorted(range(3), key=lambda k: weight(session, NAMES[k]), reverse=True)
        assert b.route(session, 3, 0.1) == Route(order[1], 3, "failover"), session


# -- looking first, and a server's backoff --------------------------------------------------
def test_a_look_is_needed_for_a_busy_pinned_slot_the_request_names_or_the_sessions_own() -> None:
    b = one_server(2)
    run(b, "a", Route(0, 0, "new session"), 0.0, 1.0)
    assert not b.needs_look("a", None, 10.0)
    b.servers[0].saw([False, True], 10.0)
    assert not b.needs_look("a", None, 10.0)  # its own slot is free
    assert b.needs_look("a", 1, 10.0)  # the slot it names is not
    b.servers[0].saw([True, False], 10.0)
    assert b.needs_look("a", None, 10.0)
    assert not b.needs_look("a", 1, 10.0)


def test_a_server_back_from_its_backoff_is_looked_at_from_that_very_moment() -> None:
    b = Balancer(2)
    for server in b.servers:
        server.slots = 1
    run(b, "a", Route(0, 0, "new session"), 0.0, 0.0)
    b.servers[1].failed(0.0)  # out for 0.5 s
    assert not b.needs_look("a", None, 0.4)
    assert b.needs_look("a", None, 0.5)


def test_each_failure_in_a_row_doubles_the_backoff_up_to_its_cap() -> None:
    state = Balancer(1).servers[0]
    outs = []
    for start in (0.0, 10.0, 20.0, 30.0, 40.0, 100.0, 200.0, 300.0, 400.0):
        state.failed(start)
        assert state.down_until is not None
        outs.append(state.down_until - start)
    assert outs == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    state.recovered()
    assert state.up(0.0)
    state.failed(1000.0)
    assert state.down_until == 1000.5  # counted from the first again
    assert not state.up(1000.49)
    assert state.up(1000.5)


# -- the counts a route is chosen by ----------------------------------------------------------
def test_the_rendezvous_weight_is_the_same_in_every_process_and_version() -> None:
    """Placements must agree across processes (and releases): the weight is pinned."""
    assert weight("agent-0", "http://10.0.0.1:8080") == 15322052890879672040
    assert weight("s", "http://a") == 1158039374822878505


def first_choice_zero() -> str:
    return next(
        s
        for s in (f"agent-{i}" for i in range(100))
        if max(range(3), key=lambda k: weight(s, NAMES[k])) == 0
    )


def bounded() -> Balancer:
    b = Balancer(3, names=NAMES)
    for server in b.servers:
        server.slots = 8
    return b


def test_one_request_in_flight_puts_a_new_session_past_its_first_server() -> None:
    """The mean with this session is 2/3, the bound x 1.25 rounded up 1: its first server
    would hold 2."""
    b = bounded()
    session = first_choice_zero()
    b.start(None, Route(0, None, "new session"))
    route = b.route(session, None, 0.0)
    assert route is not None
    assert route.server != 0


def test_a_first_server_just_within_the_bound_is_kept() -> None:
    """Two of ours on it, one on each other: the mean with this session 5/3, the bound 3;
    with this one it holds exactly 3."""
    b = bounded()
    session = first_choice_zero()
    for server, count in ((0, 2), (1, 1), (2, 1)):
        for _ in range(count):
            b.start(None, Route(server, None, "new session"))
    route = b.route(session, None, 0.0)
    assert route is not None
    assert route.server == 0


def test_a_deferring_server_without_a_free_slot_is_left_for_one_with_a_free_slot() -> None:
    b = Balancer(3, names=NAMES, epsilon=10.0)  # no load bound here
    for server in b.servers:
        server.slots = 2
    session = first_choice_zero()
    b.servers[0].deferred = 3
    b.servers[0].saw([True, True], 0.0)
    route = b.route(session, None, 0.0)
    assert route is not None
    assert route.server != 0


def test_a_new_session_keeps_the_slot_its_request_names() -> None:
    b = one_server(4)
    assert b.route("a", 3, 0.0) == Route(0, 3, "new session")


def test_servers_without_names_still_share_the_sessions_out() -> None:
    b = Balancer(3)
    for server in b.servers:
        server.slots = 8
    servers = set()
    for i in range(30):
        route = b.route(f"agent-{i}", None, 0.0)
        assert route is not None
        servers.add(route.server)
    assert servers == {0, 1, 2}


def test_a_new_sessions_own_slot_is_a_free_one() -> None:
    b = one_server(3)
    b.servers[0].saw([True, False, False], 0.0)
    assert b.route("a", None, 0.0) == Route(0, 1, "new session")
    b.start(None, Route(0, 1, "new session"))  # a pinned request of ours on slot 1
    assert b.route("a", None, 0.0) == Route(0, 2, "new session")


def test_two_requests_on_one_slot_keep_it_taken_until_both_end() -> None:
    b = one_server(2)
    route = Route(0, 0, "new session")
    b.start(None, route)
    b.start(None, route)
    b.finish(None, route, 1.0)
    assert not b.servers[0].slot_free(0)
    assert b.route("x", None, 1.0) == Route(0, 1, "new session")
    b.finish(None, route, 2.0)
    assert b.servers[0].slot_free(0)
    assert b.route("x", None, 2.0) == Route(0, 0, "new session")


def test_unpinned_requests_of_ours_take_free_slots_first() -> None:
    b = Balancer(2)
    for server in b.servers:
        server.slots = 2
    b.start(None, Route(0, None, "new session"))  # server 0: 1 free, one of ours
    b.servers[1].saw([True, False], 0.0)  # server 1: 1 free, none of ours
    assert b.route(None, 9, 0.0) == Route(1, 9, "new session")
    assert [len(s.free_slots()) for s in b.servers] == [1, 1]


def test_a_slot_another_session_owns_is_not_given_to_a_second_one() -> None:
    b = one_server(2)
    run(b, "a", Route(0, 0, "new session"), 0.0, 1.0)
    run(b, "b", Route(0, 0, "new session"), 1.0, 2.0)  # pinned to a's slot by its request
    assert b.route("b", None, 3.0) == Route(0, None, "sticky")
    assert b.route("a", None, 3.0) == Route(0, 0, "sticky")


def test_a_session_with_two_requests_in_flight_is_busy_until_both_end() -> None:
    b = one_server(2)
    route = Route(0, 0, "new session")
    b.start("a", route)
    b.start("a", route)
    b.finish("a", route, 1.0)
    assert b.idle(100.0, 10.0) == []
    b.finish("a", route, 2.0)
    assert b.idle(100.0, 10.0) == [("a", 0, 0)]
