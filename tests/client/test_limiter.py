"""The shared concurrency limit (``Limiter``): at most ``max_in_flight`` turns at the server
over every client and pool that shares it, a higher priority first and each priority in
arrival order, ``Queued`` while waiting, cancellation-safe, bounded by ``wait_timeout``;
sized from a server's slots. On the in-process fake (both event loops) and one real-socket
run counting the connections opened."""

from __future__ import annotations

import anyio
import pytest

from llamaclient import (
    ChatRequest,
    Client,
    Config,
    Limiter,
    Pool,
    Queued,
    UserMessage,
    WaitTimeoutError,
)
from llamaclient.testing import FakeLlama
from tests.conftest import CHAT, TransportName, drain, make_config
from tests.support.faultserver import FaultServer, chat_chunks, stream

pytestmark = pytest.mark.anyio


def ask(text: str = "q", **fields: object) -> ChatRequest:
    return ChatRequest([UserMessage(text)], **fields)  # type: ignore[arg-type]


async def test_the_limit_holds_over_every_client_sharing_it() -> None:
    fakes = [FakeLlama(), FakeLlama()]
    for fake in fakes:
        for _ in range(6):
            fake.reply("a b c d", pace=0.02)
    limiter = Limiter(2)
    clients = [fake.client(limiter=limiter) for fake in fakes]
    highest = 0

    async def one(client: Client) -> None:
        nonlocal highest
        async with client.chat(ask()) as stream:
            async for event in stream:
                if not isinstance(event, Queued):
                    highest = max(highest, limiter.in_flight)
        assert stream.completion.content == "a b c d"

    async with anyio.create_task_group() as tg:
        for i in range(12):
            tg.start_soon(one, clients[i % 2])
    assert highest == 2
    assert (limiter.in_flight, limiter.waiting) == (0, 0)
    for client in clients:
        await client.aclose()


async def test_waiting_requests_see_their_place_and_a_higher_priority_goes_first() -> None:
    fake = FakeLlama()
    for _ in range(4):
        fake.reply("x", pace=0.05)
    limiter = Limiter(1)
    order: list[str] = []
    seen: dict[str, list[int]] = {}

    async def one(name: str, priority: int) -> None:
        async with fake.client(limiter=limiter) as client:
            events, error = await drain(client.chat(ask(name, priority=priority)))
        assert error is None
        seen[name] = [e.ahead for e in events if isinstance(e, Queued)]
        order.append(name)

    async with anyio.create_task_group() as tg:
        tg.start_soon(one, "first", 0)
        await anyio.sleep(0.01)  # it holds the one place
        tg.start_soon(one, "low", 0)
        await anyio.sleep(0.01)
        tg.start_soon(one, "low too", 0)
        await anyio.sleep(0.01)
        tg.start_soon(one, "high", 5)
    assert order == ["first", "high", "low", "low too"]
    assert seen["first"] == []
    assert seen["high"] == [1]  # right behind the one in flight
    assert seen["low too"][0] == 2  # then moved back by "high", then forward
    assert seen["low too"][-1] == 1


async def test_a_request_cancelled_while_it_waits_takes_no_place() -> None:
    fake = FakeLlama()
    for _ in range(3):
        fake.reply("x", pace=0.05)
    limiter = Limiter(1)
    async with fake.client(limiter=limiter) as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(drain, client.chat(ask("holder")))
            await anyio.sleep(0.01)
            with anyio.move_on_after(0.02):
                await drain(client.chat(ask("gives up")))
            assert limiter.waiting == 0
            _, error = await drain(client.chat(ask("next")))
        assert error is None
    assert (limiter.in_flight, limiter.waiting) == (0, 0)
    assert [r.last.content for r in fake.requests] == ["holder", "next"]  # type: ignore[union-attr]


async def test_a_wait_past_wait_timeout_fails_before_anything_is_sent() -> None:
    fake = FakeLlama()
    fake.reply("x", pace=0.2)
    limiter = Limiter(1, wait_timeout=0.05)
    async with fake.client(limiter=limiter) as client, anyio.create_task_group() as tg:
        tg.start_soon(drain, client.chat(ask("holder")))
        await anyio.sleep(0.01)
        events, error = await drain(client.chat(ask("late")))
    assert isinstance(error, WaitTimeoutError)
    assert "no place under the concurrency limit" in str(error)
    assert events == [Queued(1)]
    assert len(fake.requests) == 1


async def test_a_pool_shares_one_limit_over_its_servers() -> None:
    fakes = [FakeLlama(n_slots=2), FakeLlama(n_slots=2)]
    for fake in fakes:
        for _ in range(5):
            fake.reply("ok", pace=0.02)
    limiter = Limiter(3)
    highest = 0
    async with Pool(
        [Config(f.url) for f in fakes], transports=[f.transport() for f in fakes], limiter=limiter
    ) as pool:

        async def one(i: int) -> None:
            nonlocal highest
            async for _ in pool.chat(ask(f"s{i}", session=f"s{i}")):
                highest = max(highest, limiter.in_flight)

        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(one, i)
    assert highest == 3
    assert limiter.in_flight == 0


async def test_sized_from_the_servers_slots() -> None:
    fake = FakeLlama(n_slots=4)
    async with fake.client() as client:
        limiter = await Limiter.from_server(client, name="gpu0")
    assert (limiter.max_in_flight, limiter.name) == (4, "gpu0")
    assert repr(limiter) == "Limiter('gpu0', 0/4 in flight, 0 waiting)"


def test_a_limit_needs_a_positive_count() -> None:
    with pytest.raises(ValueError, match="max_in_flight must be an int >= 1"):
        Limiter(0)
    with pytest.raises(ValueError, match="wait_timeout must be > 0"):
        Limiter(1, wait_timeout=0)


async def test_a_hundred_tasks_never_have_more_requests_at_the_server_than_the_limit(
    transport: TransportName,
) -> None:
    """Real sockets: 100 concurrent chats under ``Limiter(4)`` never have more than 4
    requests in progress at the server at once (each from its arrival to the end of its
    answer); without the limit they all arrive together."""
    async with FaultServer() as server:
        server.route("POST", CHAT, stream(chat_chunks(["Hi"]), delay=0.01))
        for limiter, most in ((Limiter(4), 4), (None, 100)):
            client = Client(make_config(server.url, transport), limiter=limiter)
            async with client, anyio.create_task_group() as tg:
                for _ in range(100):
                    tg.start_soon(drain, client.chat(ask()))
            # The server's thread marks a request finished once its last byte is written,
            # which may be a moment after the client has read it (flaked on trio).
            await server.wait_for(lambda: all(r.finished for r in server.requests), timeout=5)
            at_once = most_at_once(server)
            assert at_once <= most
            if limiter is None:
                assert at_once > 4
            server.requests.clear()


def most_at_once(server: FaultServer) -> int:
    """The most requests in progress at the server at the same time."""
    edges: list[tuple[float, int]] = []
    for request in server.requests:
        assert request.finished is not None
        edges += [(request.time, 1), (request.finished, -1)]
    most = now = 0
    for _, step in sorted(edges):  # (an end sorts before a start at the same time)
        now += step
        most = max(most, now)
    return most


async def test_a_long_line_wakes_only_the_places_worth_showing_when_a_turn_ends() -> None:
    """Every waiter woken on every turn's end cost 2.4 ms of CPU a turn with 96 waiting:
    near the front each step is shown, farther back every 8th."""
    limiter = Limiter(1)
    holder = limiter.join(0)
    line = [limiter.join(0) for _ in range(40)]
    for place in line:
        place.changed = anyio.Event()
    limiter.free(holder)
    woken = [i for i, place in enumerate(line) if place.changed.is_set()]
    assert woken == [0, *range(1, 9), 16, 24, 32]  # now holding, then ahead 1-8, 16, 24, 32
    assert line[0].holding


async def test_a_waiter_far_back_sees_its_place_every_8th_step_then_each() -> None:
    limiter = Limiter(1)
    holder = limiter.join(0)
    line = [limiter.join(0) for _ in range(20)]
    seen: list[int] = []

    async def watch() -> None:
        ahead = -1
        while ahead != 0:
            ahead = await limiter.moved(line[-1], ahead)
            seen.append(ahead)

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        await anyio.sleep(0.01)  # it has seen its first place
        for place in [holder, *line[:-1]]:
            limiter.free(place)
            await anyio.sleep(0.005)  # and each one it is told
    assert seen == [20, 16, 8, 7, 6, 5, 4, 3, 2, 1, 0]
