"""The pool's Balancer (pure bookkeeping): the routes it gives in the corners the pool tests
(``tests/client/test_pool.py``) do not reach."""

from __future__ import annotations

from llamaclient._turn.balancer import Balancer, Route, weight


def test_a_session_whose_server_is_not_allowed_for_this_request_goes_elsewhere() -> None:
    balancer = Balancer(2)
    for server in balancer.servers:
        server.slots = 1
    balancer.start("a", Route(0, 0, "new session"))
    route = balancer.route("a", None, 0.0, allowed=(1,))
    assert route == Route(1, 0, "new session")


def test_an_explicit_slot_is_kept_on_a_fresh_route() -> None:
    balancer = Balancer(1)
    balancer.servers[0].slots = 4
    assert balancer.route(None, 3, 0.0) == Route(0, 3, "new session")


def test_a_session_without_a_slot_of_its_own_leaves_no_owner_behind() -> None:
    balancer = Balancer(2, max_sessions=1)  # slots unknown: nobody owns one
    balancer.start("a", Route(0, None, "new session"))
    balancer.start("b", Route(1, None, "new session"))  # "a" is forgotten
    assert balancer.session_server("a") is None
    assert [s.owners for s in balancer.servers] == [set(), set()]


# -- rendezvous hashing with bounded load -----------------------------------------------------
NAMES = ["http://10.0.0.1:8080", "http://10.0.0.2:8080", "http://10.0.0.3:8080"]
SESSIONS = [f"agent-{i}" for i in range(3000)]


def balancer(names: list[str] = NAMES) -> Balancer:
    made = Balancer(len(names), names=names)
    for server in made.servers:
        server.slots = 2
    return made


def placed(b: Balancer, sessions: list[str], now: float = 0.0) -> dict[str, int]:
    """Where each new session goes, one at a time (each turn over before the next)."""
    where = {}
    for session in sessions:
        route = b.route(session, None, now)
        assert route is not None
        b.start(session, route)
        b.finish(session, route, now)
        where[session] = route.server
    return where


def test_two_processes_put_every_session_on_the_same_server_sharing_nothing() -> None:
    """Two balancers (two processes, or one restarted), different arrival orders."""
    first = placed(balancer(), SESSIONS)
    second = placed(balancer(), list(reversed(SESSIONS)))
    assert first == second
    shares = [list(first.values()).count(i) / len(SESSIONS) for i in range(3)]
    assert all(0.3 < share < 0.37 for share in shares), shares


def test_a_server_that_leaves_moves_only_its_own_sessions() -> None:
    before = placed(balancer(), SESSIONS)
    fewer = placed(balancer(NAMES[:2]), SESSIONS)
    moved = [s for s in SESSIONS if before[s] != fewer.get(s, -1)]
    assert all(before[s] == 2 for s in moved)  # only the leaving server's sessions move
    assert len(moved) / len(SESSIONS) <= 1 / 3 + 0.04
    joined = placed(balancer([*NAMES, "http://10.0.0.4:8080"]), SESSIONS)
    moved = [s for s in SESSIONS if before[s] != joined[s]]
    assert all(joined[s] == 3 for s in moved)  # only to the joining server
    assert len(moved) / len(SESSIONS) <= 1 / 4 + 0.04


def test_a_server_over_the_load_bound_is_skipped() -> None:
    """Its first choice holds 3 of our requests (the mean with this one: 4/3; the bound,
    x 1.25 rounded up: 2): the next server in the session's order."""
    b = balancer()
    session = next(s for s in SESSIONS if placed(balancer(), [s])[s] == 0)
    for _ in range(3):
        b.start(None, Route(0, None, "new session"))
    route = b.route(session, None, 0.0)
    assert route is not None
    assert route.server != 0
    order = sorted(range(3), key=lambda i: weight(session, NAMES[i]), reverse=True)
    assert route.server == order[1]


def test_busy_slots_count_as_load_everyone_elses_too() -> None:
    b = balancer()
    session = next(s for s in SESSIONS if placed(balancer(), [s])[s] == 0)
    b.servers[0].saw([True, True], 0.0)  # another process's requests
    route = b.route(session, None, 0.0)
    assert route is not None
    assert route.server != 0


def test_a_server_deferring_requests_takes_no_new_session_while_another_has_a_free_slot() -> None:
    b = balancer()
    session = next(s for s in SESSIONS if placed(balancer(), [s])[s] == 0)
    b.servers[0].deferred = 2
    route = b.route(session, None, 0.0)
    assert route is not None
    assert route.server != 0
    for server in b.servers[1:]:
        server.saw([True, True], 0.0)  # every other slot busy: deferring or not, all alike
    b.servers[0].saw([True, True], 0.0)
    route = b.route(session, None, 0.0)
    assert route is not None
    assert route.server == 0


def test_a_continuing_conversation_new_to_this_process_goes_to_its_rendezvous_server() -> None:
    """A restarted process's sessions come back with their history: over the load bound,
    deferring, everyone's slots busy there, each still goes where its cache is (a new
    conversation in the same state goes elsewhere), and is not pinned to a slot that may not
    hold it: llama-server finds the prefix in a slot or its host-RAM cache."""
    b = balancer()
    session = next(s for s in SESSIONS if placed(balancer(), [s])[s] == 0)
    for _ in range(3):
        b.start(None, Route(0, None, "new session"))
    b.servers[0].saw([True, True], 0.0)
    b.servers[0].deferred = 2
    fresh = b.route(session, None, 0.0)
    assert fresh is not None
    assert fresh.server != 0
    route = b.route(session, None, 0.0, continuing=True)
    assert route == Route(0, None, "new session")  # unpinned: the server finds its cache
    b.start(session, route)
    b.finish(session, route, 0.0)
    b.servers[0].saw([False, False], 1.0)
    assert b.route(session, None, 1.0) == Route(0, None, "sticky")  # unpinned from then on
    assert b.route("another", 1, 1.0, continuing=True) == Route(  # its own slot still wins
        max(range(3), key=lambda i: weight("another", NAMES[i])), 1, "new session"
    )


def test_a_failover_goes_to_the_next_server_in_the_sessions_order() -> None:
    b = balancer()
    session = SESSIONS[0]
    first = placed(b, [session])[session]
    b.servers[first].failed(0.0)
    route = b.route(session, None, 0.1)
    assert route is not None
    order = sorted(range(3), key=lambda i: weight(session, NAMES[i]), reverse=True)
    assert (route.server, route.reason) == (order[1], "failover")
    assert route.slot is not None  # a moved session is new there: a slot of its own


def test_a_failover_keeps_to_the_load_bound() -> None:
    """Unlike a restarted process's conversation, a session moved by a failover takes the
    bound: its next server over it, the one after."""
    b = balancer()
    session = SESSIONS[0]
    first = placed(b, [session])[session]
    order = sorted(range(3), key=lambda i: weight(session, NAMES[i]), reverse=True)
    b.servers[first].failed(0.0)
    for _ in range(3):
        b.start(None, Route(order[1], None, "new session"))
    route = b.route(session, None, 0.1)
    assert route is not None
    assert (route.server, route.reason) == (order[2], "failover")


def test_a_request_without_a_session_goes_to_the_freest_allowed_server_or_nowhere() -> None:
    b = balancer()
    b.servers[0].saw([True, False], 0.0)
    assert b.route(None, None, 0.0, allowed=(0,)) == Route(0, 1, "new session")
    for server in b.servers:
        server.failed(0.0)
    assert b.route(None, None, 0.0) is None
    assert b.route("a", None, 0.0) is None


def test_a_session_whose_slot_is_busy_stays_when_no_other_server_has_a_free_one() -> None:
    b = balancer(NAMES[:2])
    route = b.route("a", None, 0.0)
    assert route is not None
    b.start("a", route)
    b.finish("a", route, 0.0)
    for server in b.servers:
        server.saw([True, True], 10.0)  # everyone else's requests
    again = b.route("a", None, 10.0)
    assert again == Route(route.server, route.slot, "sticky")


def test_idle_sessions_sleep_and_wake_with_a_slot_of_their_own_again() -> None:
    b = Balancer(1, names=["s0"])
    b.servers[0].slots = 1
    route = b.route("a", None, 0.0)
    assert route == Route(0, 0, "new session")
    b.start("a", route)
    assert b.idle(5.0, 10.0) == []  # in flight
    b.finish("a", route, 1.0)
    assert b.idle(5.0, 10.0) == []  # idle 4 s, not 10
    assert b.idle(11.0, 10.0) == [("a", 0, 0)]
    b.sleep("a")
    b.sleep("a")  # twice: still one session less
    assert (b.servers[0].sessions, b.servers[0].owners) == (0, set())
    assert b.idle(20.0, 10.0) == []  # asleep: no slot to save
    sticky = b.route("a", None, 20.0)
    assert sticky == Route(0, None, "sticky")
    woken, restore = b.wake("a", sticky)
    assert (woken, restore) == (Route(0, 0, "sticky"), True)
    assert (b.servers[0].sessions, b.servers[0].owners) == (1, {0})
    assert b.wake("a", woken) == (woken, False)  # awake: nothing to do
    assert b.wake(None, woken) == (woken, False)


def test_a_sleeping_session_wakes_without_a_slot_when_none_is_free() -> None:
    b = Balancer(1, names=["s0"])
    b.servers[0].slots = 1
    for name in ("a", "b"):
        route = b.route(name, None, 0.0)
        assert route is not None
        b.start(name, route)
        b.finish(name, route, 0.0)
        if name == "a":
            b.sleep("a")  # "b" then takes the slot
    woken, restore = b.wake("a", Route(0, None, "sticky"))
    assert (woken, restore) == (Route(0, None, "sticky"), False)


def test_a_forgotten_sleeping_session_is_not_counted_twice() -> None:
    b = Balancer(1, max_sessions=1, names=["s0"])
    b.servers[0].slots = 2
    route = b.route("a", None, 0.0)
    assert route is not None
    b.start("a", route)
    b.finish("a", route, 0.0)
    b.sleep("a")
    b.start("b", Route(0, 1, "new session"))  # "a" is forgotten
    assert b.servers[0].sessions == 1
