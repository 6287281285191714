"""The pool's Balancer (pure bookkeeping): the routes it gives in the corners the pool tests
(``tests/client/test_pool.py``) do not reach."""

from __future__ import annotations

from llamaclient._turn.balancer import Balancer, Route


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
