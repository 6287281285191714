"""Many streams over one client: events never cross between streams, and requests pinned to
one slot run one at a time, in order, each told how many are ahead (``Queued``).

Fault server, both transports.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from itertools import pairwise

import anyio
import pytest
from anyio.abc import TaskGroup

from llamaclient import ChatEvent, ChatStream, Completion, Content, HTTPStatusError, Queued
from tests.conftest import CHAT, ClientFactory, drain, user
from tests.support.faultserver import (
    FaultServer,
    Gate,
    Json,
    Request,
    Script,
    Step,
    Wait,
    chat_chunks,
    error_body,
    stream,
)

pytestmark = pytest.mark.anyio

IDLE_SLOTS = [{"id": 0, "is_processing": False}, {"id": 1, "is_processing": False}]


def text_of(request: Request) -> str:
    text: str = request.json()["messages"][0]["content"]
    return text


def posts(server: FaultServer) -> list[str]:
    return [text_of(r) for r in server.requests if r.path == CHAT]


async def until(predicate: Callable[[], bool], timeout: float = 3.0) -> None:  # noqa: ASYNC109
    deadline = anyio.current_time() + timeout
    while not predicate():
        if anyio.current_time() > deadline:
            raise TimeoutError("condition not met")
        await anyio.sleep(0.005)


# -- no crossing -------------------------------------------------------------------------------
def pieces(n: int) -> list[str]:
    return [f"<{n}>", "·" * (n % 5 + 1), f"[{n * 7919}]", "é😀" * (n % 3 + 1)]


async def test_64_concurrent_chats_never_cross(
    server: FaultServer, make_client: ClientFactory
) -> None:
    n_chats = 64
    arrived = 0
    all_in = asyncio.Event()  # the handler runs in the fault server's loop: always asyncio

    async def handler(request: Request) -> Script:
        nonlocal arrived
        arrived += 1
        if arrived == n_chats:
            all_in.set()
        await all_in.wait()  # every request is in flight at once before any answer
        n = int(text_of(request))
        chunks = chat_chunks(pieces(n), id=f"chatcmpl-{n:032d}")
        return stream(chunks, delay=0.002 * (n % 4))

    server.route("POST", CHAT, handler)
    client = make_client()

    results: dict[int, tuple[list[ChatEvent], Completion]] = {}

    async def one(n: int) -> None:
        stream_ = client.chat(user(str(n)))
        events, error = await drain(stream_)
        assert error is None
        results[n] = events, stream_.completion

    with anyio.fail_after(10.0):
        async with anyio.create_task_group() as tg:
            for n in range(n_chats):
                tg.start_soon(one, n)
    for n, (events, completion) in sorted(results.items()):
        assert events == [Content(p) for p in pieces(n)]
        assert completion.content == "".join(pieces(n))
        assert completion.id == f"chatcmpl-{n:032d}"
    assert len(server.requests) == n_chats
    assert len({r.conn_id for r in server.requests}) == n_chats


# -- per-slot order ----------------------------------------------------------------------------
class Held:
    """Chat responses that send their first event, then wait for the test to release them."""

    def __init__(self, server: FaultServer) -> None:
        self.release: dict[str, Gate] = {}
        server.route("GET", "/slots", [Json(200, IDLE_SLOTS)])
        server.route("POST", CHAT, self.handler)

    def handler(self, request: Request) -> Script:
        text = text_of(request)
        event = self.release.setdefault(text, Gate())
        head, *rest = chat_chunks([text, "."])
        steps: list[Step] = [*stream([head], end=False), Wait(event), *stream(rest)[1:]]
        return steps

    def done(self, text: str) -> None:
        self.release.setdefault(text, Gate()).set()


class Consumer:
    """Iterates a stream in a task of ``tg``; ``cancel()`` cancels just that task."""

    def __init__(self, tg: TaskGroup, stream_: ChatStream) -> None:
        self.events: list[ChatEvent] = []
        self.error: BaseException | None = None
        self.cancelled = False
        self._scope = anyio.CancelScope()
        self._finished = anyio.Event()
        tg.start_soon(self._run, stream_)

    async def _run(self, stream_: ChatStream) -> None:
        try:
            with self._scope:
                async with stream_:
                    try:
                        async for event in stream_:
                            self.events.append(event)
                    except Exception as exc:
                        self.error = exc
        finally:
            self.cancelled = self._scope.cancelled_caught
            self._finished.set()

    def cancel(self) -> None:
        self._scope.cancel()

    async def finished(self, timeout: float = 5.0) -> None:  # noqa: ASYNC109
        with anyio.fail_after(timeout):
            await self._finished.wait()


async def all_finished(*consumers: Consumer) -> None:
    for consumer in consumers:
        await consumer.finished()


async def test_requests_for_one_slot_run_in_order_with_queued_counts(
    server: FaultServer, make_client: ClientFactory
) -> None:
    held = Held(server)
    client = make_client()
    async with anyio.create_task_group() as tg:
        one = Consumer(tg, client.chat(user("one", slot=0)))
        await until(lambda: one.events == [Content("one")])
        two = Consumer(tg, client.chat(user("two", slot=0)))
        await until(lambda: two.events == [Queued(1)])
        three = Consumer(tg, client.chat(user("three", slot=0)))
        await until(lambda: three.events == [Queued(2)])
        await anyio.sleep(0.05)
        assert posts(server) == ["one"]  # the others wait inside the client

        held.done("one")
        await one.finished()
        await until(lambda: two.events == [Queued(1), Content("two")])
        await until(lambda: three.events == [Queued(2), Queued(1)])
        assert posts(server) == ["one", "two"]

        held.done("two")
        held.done("three")
        await all_finished(two, three)
    assert one.events == [Content("one"), Content(".")]
    assert two.events == [Queued(1), Content("two"), Content(".")]
    assert three.events == [Queued(2), Queued(1), Content("three"), Content(".")]
    assert (one.error, two.error, three.error) == (None, None, None)
    assert posts(server) == ["one", "two", "three"]
    chats = [r for r in server.requests if r.path == CHAT]
    for before, after in pairwise(chats):
        assert before.finished is not None
        assert after.time >= before.finished  # strictly one after the other


async def test_other_slots_and_unpinned_requests_do_not_queue(
    server: FaultServer, make_client: ClientFactory
) -> None:
    held = Held(server)
    client = make_client()
    async with anyio.create_task_group() as tg:
        zero = Consumer(tg, client.chat(user("zero", slot=0)))
        await until(lambda: zero.events == [Content("zero")])
        other = Consumer(tg, client.chat(user("other", slot=1)))
        free = Consumer(tg, client.chat(user("free")))
        await until(
            lambda: other.events == [Content("other")] and free.events == [Content("free")]
        )
        for text in ("zero", "other", "free"):
            held.done(text)
        await all_finished(zero, other, free)
    assert not any(isinstance(e, Queued) for e in zero.events + other.events + free.events)


async def test_a_cancelled_waiter_gives_up_its_place(
    server: FaultServer, make_client: ClientFactory
) -> None:
    held = Held(server)
    client = make_client()
    async with anyio.create_task_group() as tg:
        one = Consumer(tg, client.chat(user("one", slot=0)))
        await until(lambda: one.events == [Content("one")])
        two = Consumer(tg, client.chat(user("two", slot=0)))
        await until(lambda: two.events == [Queued(1)])
        three = Consumer(tg, client.chat(user("three", slot=0)))
        await until(lambda: three.events == [Queued(2)])

        two.cancel()
        await two.finished()
        assert two.cancelled
        await until(lambda: three.events == [Queued(2), Queued(1)])
        held.done("one")
        held.done("three")
        await all_finished(one, three)
    assert three.events == [Queued(2), Queued(1), Content("three"), Content(".")]
    assert posts(server) == ["one", "three"]


async def test_a_stream_broken_off_early_frees_the_slot(
    server: FaultServer, make_client: ClientFactory
) -> None:
    held = Held(server)
    client = make_client()
    async with anyio.create_task_group() as tg:
        async with client.chat(user("one", slot=0)) as first:
            second = Consumer(tg, client.chat(user("two", slot=0)))
            async for event in first:
                assert event == Content("one")
                await until(lambda: second.events == [Queued(1)])
                break
        await until(lambda: posts(server) == ["one", "two"])
        held.done("two")
        await second.finished()
    assert second.events == [Queued(1), Content("two"), Content(".")]
    await server.wait_disconnect(timeout=1.0)


async def test_a_failed_request_frees_the_slot(
    server: FaultServer, make_client: ClientFactory
) -> None:
    # The 500 waits for a gate, so that "two" surely queues behind "one" first (trio does
    # not promise that tasks started together run in the order they were started).
    gate = Gate()
    server.route("GET", "/slots", [Json(200, IDLE_SLOTS)])
    server.route(
        "POST", CHAT, [Wait(gate), Json(500, error_body(500, "bad"))], stream(chat_chunks(["ok"]))
    )
    client = make_client()
    async with anyio.create_task_group() as tg:
        one = Consumer(tg, client.chat(user("one", slot=0)))
        await until(lambda: posts(server) == ["one"])
        two = Consumer(tg, client.chat(user("two", slot=0)))
        await until(lambda: two.events == [Queued(1)])
        gate.set()
        await all_finished(one, two)
    assert one.events == []
    assert isinstance(one.error, HTTPStatusError)
    assert (two.events, two.error) == ([Queued(1), Content("ok")], None)
