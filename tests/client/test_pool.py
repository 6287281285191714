"""The Pool against FakeLlama servers: where sessions go (Routed), stickiness, busy slots,
/slots disabled, failover before output, never after, the in-flight counts, a pool of
routers."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from llamaclient import (
    AssistantMessage,
    ChatEvent,
    ChatMessage,
    ChatRequest,
    Client,
    Config,
    ConnectError,
    Content,
    HTTPStatusError,
    Pool,
    Routed,
    StreamClosedEarlyError,
    UserMessage,
)
from llamaclient._turn.balancer import RELEASE_GRACE, Balancer, Route, weight
from llamaclient.testing import FakeCall, FakeLlama, FakeModel, FakeRequest

pytestmark = pytest.mark.anyio


def ok(_: FakeRequest) -> str:
    return "ok"


def server(n_slots: int = 2, *, hold: anyio.Event | None = None, **options: Any) -> FakeLlama:
    """A llama-server answering every chat "ok" (after ``hold`` is set, when given)."""
    return FakeLlama(n_slots=n_slots, **options).fail(hold=hold).reply(ok)


def router(*models: str, loaded: bool = False) -> FakeLlama:
    """A router over ``models`` (all running with ``loaded``) answering every chat "ok"."""
    status = "loaded" if loaded else "unloaded"
    return FakeLlama(models={m: FakeModel(status) for m in models}, n_slots=2).reply(ok)


def request(session: str | None = None, **fields: object) -> ChatRequest:
    return ChatRequest([UserMessage("hi")], session=session, **fields)  # type: ignore[arg-type]


def pool(*fakes: FakeLlama, model: str = "") -> Pool:
    configs = [
        Config(f"http://s{i}", model=model, retry_backoff=0.001, retry_max_backoff=0.002)
        for i in range(len(fakes))
    ]
    return Pool(configs, transports=[f.transport() for f in fakes])


def looks(fake: FakeLlama, *paths: str) -> list[FakeCall]:
    return [c for c in fake.calls if c.path in paths]


async def turn(p: Pool, req: ChatRequest) -> tuple[Routed, list[ChatEvent]]:
    events = [e async for e in p.chat(req)]
    first = events[0]
    assert isinstance(first, Routed)
    assert [e.text for e in events if isinstance(e, Content)] == ["ok"]
    return first, events


def on(*order: int, n: int = 2) -> str:
    """A session name whose rendezvous order over ``n`` servers (``http://s0``...) starts
    with ``order``."""
    for i in range(1000):
        name = f"session-{i}"
        ranked = sorted(range(n), key=lambda k: weight(name, f"http://s{k}"), reverse=True)
        if tuple(ranked[: len(order)]) == order:
            return name
    raise AssertionError(order)


def idle(p: Pool) -> bool:
    return all(not s.inflight for s in p._balancer.servers)


async def test_routed_comes_first_and_a_new_session_goes_to_its_server_within_the_bound() -> None:
    """Rendezvous order s0, s2, s1; s0's two slots are busy: over the bound (3 busy and
    this one over 3 servers, x 1.25: 2), so the next in the order."""
    fakes = [server(2), server(2), server(2)]
    fakes[0].busy = {0, 1}
    fakes[1].busy = {0}
    async with pool(*fakes) as p:
        routed, _ = await turn(p, request(on(0, 2, n=3)))
    assert routed == Routed("http://s2", 0, "new session")
    assert not routed.cache_lost
    assert fakes[2].requests[0].settings["id_slot"] == 0


async def test_a_conversation_new_to_the_pool_goes_where_its_cache_is() -> None:
    """A restarted agent's session comes back with an answer in its history: to its
    rendezvous server, busy as it is (a new conversation there would go elsewhere), and
    unpinned."""
    fakes = [server(2), server(2), server(2)]
    fakes[0].busy = {0, 1}
    fakes[1].busy = {0}
    history: list[ChatMessage] = [UserMessage("hi"), AssistantMessage("hello"), UserMessage("and?")]
    async with pool(*fakes) as p:
        routed, _ = await turn(p, ChatRequest(history, session=on(0, 2, n=3)))
    assert routed == Routed("http://s0", None, "new session")
    assert "id_slot" not in fakes[0].requests[0].settings  # the server finds the prefix


async def test_a_session_stays_on_its_server_and_slot() -> None:
    fakes = [server(2), server(2)]
    async with pool(*fakes) as p:
        a, b = on(0), on(1)
        first, _ = await turn(p, request(a))
        second, _ = await turn(p, request(b))
        again = [(await turn(p, request(a)))[0] for _ in range(3)]
        assert idle(p)
    assert (first.server, second.server) == ("http://s0", "http://s1")
    assert again == [Routed("http://s0", first.slot, "sticky")] * 3
    assert [c.settings["id_slot"] for c in fakes[0].requests] == [first.slot] * 4


async def test_sticky_turns_do_not_look_at_the_servers() -> None:
    fakes = [server(2), server(2)]
    async with pool(*fakes) as p:
        await turn(p, request("a"))
        before = sum(len(looks(f, "/slots")) for f in fakes)
        await turn(p, request("a"))
        assert sum(len(looks(f, "/slots")) for f in fakes) - before == 1  # the gate's


async def test_sessions_spread_over_every_slot() -> None:
    fakes = [server(2, hold=anyio.Event()) for _ in range(3)]
    async with pool(*fakes) as p:
        streams = [p.chat(request(f"s{i}")) for i in range(6)]
        firsts = [await s.__anext__() for s in streams]
        places = {(r.server, r.slot) for r in firsts if isinstance(r, Routed)}
        for stream in streams:
            await stream.aclose()
        assert idle(p)
    assert len(places) == 6


async def test_an_explicit_slot_wins() -> None:
    fakes = [server(4)]
    async with pool(*fakes) as p:
        await turn(p, request("a"))
        routed, _ = await turn(p, request("a", slot=3))
    assert routed == Routed("http://s0", 3, "sticky")
    assert fakes[0].requests[-1].settings["id_slot"] == 3


async def test_no_session_goes_to_the_freest_server_each_time() -> None:
    fakes = [server(1, hold=anyio.Event()), server(1)]
    async with pool(*fakes) as p:
        held = p.chat(request())
        assert (await held.__anext__()) == Routed("http://s0", 0, "new session")
        routed, _ = await turn(p, request())
        await held.aclose()
    assert routed == Routed("http://s1", 0, "new session")


async def test_a_session_whose_slot_is_busy_moves_to_a_free_server() -> None:
    fakes = [server(1), server(1)]
    fakes[1].busy = {0}
    a = on(0)
    async with pool(*fakes) as p:
        first, _ = await turn(p, request(a))
        fakes[0].busy, fakes[1].busy = {0}, set()  # another client took a's slot
        p._balancer.servers[0].released.clear()  # ... well after a's turn ended
        await turn(p, request("b"))  # b looks, and sees it
        moved, _ = await turn(p, request(a))
    assert first == Routed("http://s0", 0, "new session")
    assert moved.reason == "slot busy"
    assert moved.cache_lost


async def test_a_session_busy_with_its_own_request_stays_in_line() -> None:
    gate = anyio.Event()
    fakes = [server(1, hold=gate), server(1)]
    async with pool(*fakes) as p:
        first = p.chat(request(on(0)))
        assert (await first.__anext__()) == Routed("http://s0", 0, "new session")
        second = p.chat(request(on(0)))
        assert (await second.__anext__()) == Routed("http://s0", 0, "sticky")
        gate.set()
        async with anyio.create_task_group() as tg:
            tg.start_soon(first.collect)
            tg.start_soon(second.collect)
    assert len(fakes[0].requests) == 2
    assert not fakes[1].requests


async def test_a_server_with_every_slot_busy_gets_no_new_session() -> None:
    fakes = [server(2), server(2)]
    fakes[0].busy = {0, 1}
    async with pool(*fakes) as p:
        routes = [(await turn(p, request(f"s{i}")))[0].server for i in range(3)]
    assert routes == ["http://s1"] * 3


async def test_without_slots_the_pool_counts_its_own_requests() -> None:
    fakes = [server(2, hold=anyio.Event(), slots_endpoint=False) for _ in range(2)]
    async with pool(*fakes) as p:
        streams = [p.chat(request(f"s{i}")) for i in range(4)]
        firsts = [await s.__anext__() for s in streams]
        for stream in streams:
            await stream.aclose()
    places = sorted((r.server, r.slot) for r in firsts if isinstance(r, Routed))
    assert places == [("http://s0", 0), ("http://s0", 1), ("http://s1", 0), ("http://s1", 1)]


async def test_a_down_server_is_left_out_and_its_sessions_move() -> None:
    fakes = [server(2), server(2)]
    a = on(0)
    async with pool(*fakes) as p:
        first, _ = await turn(p, request(a))
        fakes[0].down = True
        await turn(p, request("b"))  # its look finds s0 down
        moved, _ = await turn(p, request(a))
        again, _ = await turn(p, request(a))
    assert first.server == "http://s0"
    assert moved == Routed("http://s1", moved.slot, "failover")
    assert moved.cache_lost
    assert again == Routed("http://s1", moved.slot, "sticky")


@pytest.mark.parametrize("slots_enabled", [True, False])
async def test_a_server_failing_its_looks_is_left_out(slots_enabled: bool) -> None:
    fakes = [server(2, slots_endpoint=slots_enabled), server(2)]
    fakes[0].fail(loading=60)  # 503 Loading model to every request, its looks too
    async with pool(*fakes) as p:
        routes = [(await turn(p, request(f"s{i}")))[0].server for i in range(3)]
    assert routes == ["http://s1"] * 3
    assert not fakes[0].requests


async def test_a_pool_of_routers_never_loads_a_model_by_looking() -> None:
    fakes = [router("m"), router("m")]
    async with pool(*fakes, model="m") as p:
        routed, events = await turn(p, request("a"))
    assert routed.reason == "new session"
    assert [type(e).__name__ for e in events[:2]] == ["Routed", "ModelLoading"]
    assert not [s for f in fakes for s in looks(f, "/slots", "/props")]
    assert routed.slot is None  # slots not known yet: the server picks


async def test_a_refused_chat_fails_over_before_any_output() -> None:
    fakes = [server(2).fail(down=True), server(2)]  # s0 dies as the chat comes
    async with pool(*fakes) as p:
        events = [e async for e in p.chat(request(on(0)))]
        assert idle(p)
    routed = [e for e in events if isinstance(e, Routed)]
    assert [r.reason for r in routed] == ["new session", "failover"]
    assert [r.server for r in routed] == ["http://s0", "http://s1"]
    assert [e.text for e in events if isinstance(e, Content)] == ["ok"]


async def test_a_busy_answer_is_retried_on_the_same_server() -> None:
    """503/429 mean "busy", not "down": the client's own retry, on the session's server."""
    busy = FakeLlama(n_slots=2).fail(error="Service Unavailable", status=503).reply(ok)
    fakes = [busy, server(2)]
    async with pool(*fakes) as p:
        events = [e async for e in p.chat(request(on(0)))]
    assert [type(e).__name__ for e in events[:2]] == ["Routed", "Retrying"]
    assert [e for e in events if isinstance(e, Routed)] == [Routed("http://s0", 0, "new session")]
    assert len(fakes[0].requests) == 2
    assert not fakes[1].requests


async def test_a_down_server_is_tried_again_after_its_backoff() -> None:
    fakes = [server(1), server(1)]
    fakes[0].down = True
    async with pool(*fakes) as p:
        first, _ = await turn(p, request("a"))
        fakes[0].down = False
        await anyio.sleep(0.6)  # the first backoff is 0.5 s
        routed, _ = await turn(p, request(on(0)))
    assert first.server == "http://s1"
    assert routed == Routed("http://s0", 0, "new session")


async def test_no_server_up_is_a_connect_error() -> None:
    fakes = [server(1), server(1)]
    fakes[0].down = fakes[1].down = True
    async with pool(*fakes) as p:
        with pytest.raises(ConnectError):
            await p.complete(request("a"))
        assert idle(p)


async def test_a_stream_cut_after_output_is_never_run_elsewhere() -> None:
    fakes = [FakeLlama().fail(cut_after=1).reply(ok), server(1)]  # cut after its first piece
    async with pool(*fakes) as p:
        seen: list[ChatEvent] = []

        async def run() -> None:
            async for event in p.chat(request(on(0))):
                seen.append(event)

        with pytest.raises(StreamClosedEarlyError) as caught:
            await run()
        assert idle(p)
    assert isinstance(seen[0], Routed)
    assert caught.value.partial is not None
    assert not fakes[1].requests


async def test_closing_mid_stream_releases_the_slot() -> None:
    fakes = [server(1)]
    async with pool(*fakes) as p:
        async with p.chat(request("a")) as stream:
            async for _ in stream:
                break
        assert idle(p)
        await turn(p, request("a"))
        assert idle(p)


async def test_a_pool_of_routers_names_the_model() -> None:
    fakes = [router("m", loaded=True), router("m", loaded=True)]
    async with pool(*fakes, model="m") as p:
        routed, _ = await turn(p, request("a"))
    fake = fakes[0] if routed.server == "http://s0" else fakes[1]
    assert fake.requests[0].settings["model"] == "m"
    assert all(s.query.get("model") == "m" for f in fakes for s in looks(f, "/slots"))


async def test_complete_and_repr() -> None:
    async with pool(server(1)) as p:
        completion = await p.complete(request("a"))
        assert completion.content == "ok"
        assert repr(p) == "Pool(['http://s0'])"


def test_a_pool_needs_configs() -> None:
    with pytest.raises(ValueError, match="at least one"):
        Pool([])


def test_sessions_are_bounded_and_the_oldest_is_forgotten() -> None:
    balancer = Balancer(1, max_sessions=2)
    balancer.servers[0].slots = 2
    for name in ("a", "b", "c"):
        route = balancer.route(name, None, 0.0)
        assert route is not None
        balancer.start(name, route)
        balancer.finish(name, route, 0.0)
    assert balancer.session_server("a") is None
    assert balancer.session_server("c") == 0
    assert balancer.servers[0].sessions == 2
    assert balancer.servers[0].owners == {1}  # c came when both slots had a session


def test_a_moved_session_gives_up_its_old_slot() -> None:
    balancer = Balancer(2)
    for server in balancer.servers:
        server.slots = 1
    balancer.start("a", Route(0, 0, "new session"))
    balancer.finish("a", Route(0, 0, "new session"), 0.0)
    balancer.start("a", Route(1, 0, "failover"))
    assert (balancer.servers[0].sessions, balancer.servers[0].owners) == (0, set())
    assert (balancer.servers[1].sessions, balancer.servers[1].owners) == (1, {0})


async def test_more_sessions_than_slots_leaves_the_slot_to_the_server() -> None:
    """Pinned, a slot shared by two sessions would lose each one's cache; unpinned, the
    server keeps it in the slot with the longest common prefix or in its RAM cache."""
    fakes = [server(2)]
    async with pool(*fakes) as p:
        firsts = [(await turn(p, request(f"s{i}")))[0] for i in range(3)]
        again = [(await turn(p, request(f"s{i}")))[0] for i in range(3)]
    assert [r.slot for r in firsts] == [0, 1, None]
    assert again == [Routed("http://s0", None, "sticky")] * 3
    assert [c.settings.get("id_slot") for c in fakes[0].requests] == [0, 1, None, None, None, None]


async def test_a_session_with_a_slot_of_its_own_keeps_it() -> None:
    fakes = [server(2)]
    async with pool(*fakes) as p:
        firsts = [(await turn(p, request(f"s{i}")))[0] for i in range(2)]
        again = [(await turn(p, request(f"s{i}")))[0] for i in (1, 0, 1)]
    assert [r.slot for r in firsts] == [0, 1]
    assert [r.slot for r in again] == [1, 0, 1]


async def test_parse_runs_on_the_routed_server() -> None:
    """``Pool.parse`` is a typed-output chat routed like any other: the schema goes to the
    server the pool picked (the free one), and the validated value comes back."""
    fakes = [FakeLlama(n_slots=2).reply(lambda _: '{"n": 7}') for _ in range(2)]
    fakes[0].busy = {0, 1}
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    async with pool(*fakes) as p:
        assert await p.parse(request("a"), schema) == {"n": 7}
        assert idle(p)
        assert p._balancer.session_server("a") == 1
    sent = fakes[1].requests[0].body
    assert sent["response_format"]["json_schema"]["schema"] == schema
    assert not fakes[0].requests


def test_a_slot_our_own_request_just_left_is_free() -> None:
    """llama-server frees a slot a token step after the stream ends: a look in between
    must not make the session's next turn move away from its own slot."""
    balancer = Balancer(2)
    route = Route(0, 1, "new session")
    balancer.start("a", route)
    balancer.finish("a", route, 100.0)
    server = balancer.servers[0]
    server.saw([True, True], 100.0 + RELEASE_GRACE / 2)
    assert server.busy == frozenset({0})
    assert server.slot_free(1)
    server.saw([True, True], 100.0 + RELEASE_GRACE)  # the grace is over: busy is busy
    assert server.busy == frozenset({0, 1})


async def test_a_chat_naming_its_model_goes_to_the_servers_with_that_model() -> None:
    """A pool of routers: one Config per (router, model); the chat names the model."""
    routers = [router("a", "b", loaded=True), router("a", "b", loaded=True)]
    configs = [
        Config(f"http://r{i}", model=model)
        for i, model in ((0, "a"), (0, "b"), (1, "a"), (1, "b"))
    ]
    fakes = [routers[0], routers[0], routers[1], routers[1]]
    async with Pool(configs, transports=[f.transport() for f in fakes]) as p:
        for i in range(4):
            await turn(p, request(f"b{i}", model="b"))
        routed, _ = await turn(p, request("b0", model="b"))
        with pytest.raises(ValueError, match="'zzz'"):
            p.chat(request("x", model="zzz"))
    assert routed.reason == "sticky"
    assert {c.settings["model"] for f in routers for c in f.requests} == {"b"}
    # Each session on its rendezvous router among the two that have the model.
    names = ["http://r0#b", "http://r1#b"]
    expected = [max((0, 1), key=lambda r: weight(f"b{i}", names[r])) for i in range(4)]
    assert [len(f.requests) for f in routers] == [
        expected.count(r) + (r == expected[0]) for r in (0, 1)
    ]


async def test_servers_naming_no_model_take_any() -> None:
    async with pool(server(1), server(1)) as p:
        routed, _ = await turn(p, request("a", model="whatever"))
    assert routed.reason == "new session"


async def test_a_server_deferring_requests_takes_no_new_session_while_another_is_free() -> None:
    """Its /metrics say llama-server has requests waiting for a slot (another client's):
    a new session whose first choice it is goes to the next server with a free slot."""
    fakes = [server(2, metrics={"llamacpp:requests_deferred": 3}), server(2, metrics={})]
    async with pool(*fakes) as p:
        routed, _ = await turn(p, request(on(0)))
        assert p._balancer.servers[0].deferred == 3
    assert routed.server == "http://s1"


async def test_a_server_without_metrics_is_not_asked_again() -> None:
    fakes = [server(2), server(2)]  # no --metrics: 501
    async with pool(*fakes) as p:
        for i in range(3):
            await turn(p, request(f"s{i}"))
    assert [len(looks(f, "/metrics")) for f in fakes] == [1, 1]


async def test_client_metrics_reads_the_prometheus_samples() -> None:
    samples = {"llamacpp:requests_deferred": 2.0, "llamacpp:n_busy_slots_per_decode": 1.5}
    fake = FakeLlama(metrics=samples)
    async with Client(Config(fake.url), transport=fake.transport()) as client:
        assert await client.metrics() == {
            "llamacpp:requests_deferred": 2.0,
            "llamacpp:n_busy_slots_per_decode": 1.5,
        }
    async with Client(Config(fake.url), transport=FakeLlama().transport()) as client:
        with pytest.raises(HTTPStatusError) as info:
            await client.metrics()
    assert info.value.status == 501
