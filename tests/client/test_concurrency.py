"""Many streams over one client: events never cross between streams, and requests pinned to
one slot run one at a time, in order, each told how many are ahead (``Queued``).

Fault server, both transports.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from itertools import pairwise

import pytest

from llamaclient import ChatEvent, ChatStream, Completion, Content, HTTPStatusError, Queued
from tests.conftest import CHAT, ClientFactory, drain, user
from tests.support.faultserver import (
    FaultServer,
    Json,
    Request,
    Script,
    Step,
    Wait,
    chat_chunks,
    error_body,
    stream,
)

pytestmark = pytest.mark.asyncio

IDLE_SLOTS = [{"id": 0, "is_processing": False}, {"id": 1, "is_processing": False}]


def text_of(request: Request) -> str:
    text: str = request.json()["messages"][0]["content"]
    return text


def posts(server: FaultServer) -> list[str]:
    return [text_of(r) for r in server.requests if r.path == CHAT]


async def until(predicate: Callable[[], bool], timeout: float = 3.0) -> None:  # noqa: ASYNC109
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise TimeoutError("condition not met")
        await asyncio.sleep(0.005)


# -- no crossing -------------------------------------------------------------------------------
def pieces(n: int) -> list[str]:
    return [f"<{n}>", "·" * (n % 5 + 1), f"[{n * 7919}]", "é😀" * (n % 3 + 1)]


async def test_64_concurrent_chats_never_cross(
    server: FaultServer, make_client: ClientFactory
) -> None:
    n_chats = 64
    arrived = 0
    all_in = asyncio.Event()

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

    async def one(n: int) -> tuple[list[ChatEvent], Completion]:
        stream_ = client.chat(user(str(n)))
        events, error = await drain(stream_)
        assert error is None
        return events, stream_.completion

    results = await asyncio.wait_for(asyncio.gather(*(one(n) for n in range(n_chats))), 10.0)
    for n, (events, completion) in enumerate(results):
        assert events == [Content(p) for p in pieces(n)]
        assert completion.content == "".join(pieces(n))
        assert completion.id == f"chatcmpl-{n:032d}"
    assert len(server.requests) == n_chats
    assert len({r.conn_id for r in server.requests}) == n_chats


# -- per-slot order ----------------------------------------------------------------------------
class Held:
    """Chat responses that send their first event, then wait for the test to release them."""

    def __init__(self, server: FaultServer) -> None:
        self.release: dict[str, asyncio.Event] = {}
        server.route("GET", "/slots", [Json(200, IDLE_SLOTS)])
        server.route("POST", CHAT, self.handler)

    def handler(self, request: Request) -> Script:
        text = text_of(request)
        event = self.release.setdefault(text, asyncio.Event())
        head, *rest = chat_chunks([text, "."])
        steps: list[Step] = [*stream([head], end=False), Wait(event), *stream(rest)[1:]]
        return steps

    def done(self, text: str) -> None:
        self.release.setdefault(text, asyncio.Event()).set()


class Consumer:
    def __init__(self, stream_: ChatStream) -> None:
        self.events: list[ChatEvent] = []
        self.error: BaseException | None = None
        self.task = asyncio.create_task(self._run(stream_))

    async def _run(self, stream_: ChatStream) -> None:
        async with stream_:
            try:
                async for event in stream_:
                    self.events.append(event)
            except Exception as exc:
                self.error = exc


async def test_requests_for_one_slot_run_in_order_with_queued_counts(
    server: FaultServer, make_client: ClientFactory
) -> None:
    held = Held(server)
    client = make_client()
    one = Consumer(client.chat(user("one", slot=0)))
    await until(lambda: one.events == [Content("one")])
    two = Consumer(client.chat(user("two", slot=0)))
    await until(lambda: two.events == [Queued(1)])
    three = Consumer(client.chat(user("three", slot=0)))
    await until(lambda: three.events == [Queued(2)])
    await asyncio.sleep(0.05)
    assert posts(server) == ["one"]  # the others wait inside the client

    held.done("one")
    await one.task
    await until(lambda: two.events == [Queued(1), Content("two")])
    await until(lambda: three.events == [Queued(2), Queued(1)])
    assert posts(server) == ["one", "two"]

    held.done("two")
    held.done("three")
    await asyncio.wait_for(asyncio.gather(two.task, three.task), 5.0)
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
    zero = Consumer(client.chat(user("zero", slot=0)))
    await until(lambda: zero.events == [Content("zero")])
    other = Consumer(client.chat(user("other", slot=1)))
    free = Consumer(client.chat(user("free")))
    await until(lambda: other.events == [Content("other")] and free.events == [Content("free")])
    for text in ("zero", "other", "free"):
        held.done(text)
    await asyncio.wait_for(asyncio.gather(zero.task, other.task, free.task), 5.0)
    assert not any(isinstance(e, Queued) for e in zero.events + other.events + free.events)


async def test_a_cancelled_waiter_gives_up_its_place(
    server: FaultServer, make_client: ClientFactory
) -> None:
    held = Held(server)
    client = make_client()
    one = Consumer(client.chat(user("one", slot=0)))
    await until(lambda: one.events == [Content("one")])
    two = Consumer(client.chat(user("two", slot=0)))
    await until(lambda: two.events == [Queued(1)])
    three = Consumer(client.chat(user("three", slot=0)))
    await until(lambda: three.events == [Queued(2)])

    two.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await two.task
    await until(lambda: three.events == [Queued(2), Queued(1)])
    held.done("one")
    held.done("three")
    await asyncio.wait_for(asyncio.gather(one.task, three.task), 5.0)
    assert three.events == [Queued(2), Queued(1), Content("three"), Content(".")]
    assert posts(server) == ["one", "three"]


async def test_a_stream_broken_off_early_frees_the_slot(
    server: FaultServer, make_client: ClientFactory
) -> None:
    held = Held(server)
    client = make_client()
    async with client.chat(user("one", slot=0)) as first:
        second = Consumer(client.chat(user("two", slot=0)))
        async for event in first:
            assert event == Content("one")
            await until(lambda: second.events == [Queued(1)])
            break
    await until(lambda: posts(server) == ["one", "two"])
    held.done("two")
    await asyncio.wait_for(second.task, 5.0)
    assert second.events == [Queued(1), Content("two"), Content(".")]
    await server.wait_disconnect(timeout=1.0)


async def test_a_failed_request_frees_the_slot(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("GET", "/slots", [Json(200, IDLE_SLOTS)])
    server.route("POST", CHAT, [Json(500, error_body(500, "bad"))], stream(chat_chunks(["ok"])))
    client = make_client()
    failed, ok = await asyncio.gather(
        drain(client.chat(user("one", slot=0))), drain(client.chat(user("two", slot=0)))
    )
    assert failed[0] == []
    assert isinstance(failed[1], HTTPStatusError)
    assert ok == ([Queued(1), Content("ok")], None)
