"""Stopping early closes the connection (the server sees the disconnect, so llama-server frees
the slot), and nothing is left behind: no task, connection or file descriptor.

Fault server, both transports.
"""

from __future__ import annotations

import asyncio
import gc
import os
from collections.abc import Callable

import anyio
import pytest

from llamaclient import ChatEvent, Client, Content, StreamState
from tests.conftest import CHAT, ClientFactory, TransportName, make_config, user
from tests.support.faultserver import FaultServer, Hold, Request, Script, chat_chunks, stream

pytestmark = pytest.mark.anyio

HEAD = chat_chunks(["Hel"], finish_reason=None, done=False)
ENDLESS: Script = [*stream(HEAD, end=False), Hold()]  # one event, then nothing until we leave


async def test_break_inside_async_with_closes_the_connection(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("POST", CHAT, ENDLESS)
    events: list[ChatEvent] = []
    async with make_client().chat(user()) as stream_:
        async for event in stream_:
            events.append(event)
            break
    assert events == [Content("Hel")]
    disconnect = await server.wait_disconnect(timeout=1.0)
    assert disconnect.request.path == CHAT


# Dropping an unfinished stream is what trio warns about (ResourceWarning: an async generator
# garbage collected before it was exhausted); this test does it on purpose.
@pytest.mark.filterwarnings("ignore:Async generator 'llamaclient.:ResourceWarning")
async def test_break_without_async_with_closes_the_connection(
    server: FaultServer, make_client: ClientFactory
) -> None:
    # The dropped stream's generator is finalized by the event loop's async-generator hooks
    # (asyncio's or trio's) as soon as it is unreachable; that must not wait for a
    # garbage-collector pass.
    server.route("POST", CHAT, ENDLESS)
    client = make_client()
    events: list[ChatEvent] = []
    gc.collect()
    gc.disable()
    try:
        async for event in client.chat(user()):
            events.append(event)
            break
        disconnect = await server.wait_disconnect(timeout=1.0)
    finally:
        gc.enable()
        gc.collect()
    assert events == [Content("Hel")]
    assert disconnect.request.path == CHAT


async def test_aclose_closes_the_connection(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("POST", CHAT, ENDLESS)
    stream_ = make_client().chat(user())
    assert await anext(stream_) == Content("Hel")
    await stream_.aclose()
    disconnect = await server.wait_disconnect(timeout=1.0)
    assert disconnect.request.path == CHAT
    with pytest.raises(RuntimeError):
        stream_.completion  # noqa: B018


async def test_cancelling_the_task_closes_the_connection(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("POST", CHAT, ENDLESS)
    client = make_client()
    first = anyio.Event()
    finished = False

    async def consume() -> None:
        nonlocal finished
        async for _ in client.chat(user()):  # no async with: cancellation alone must close
            first.set()
        finished = True

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        with anyio.fail_after(2.0):
            await first.wait()
        tg.cancel_scope.cancel()
    assert not finished  # it was cancelled, not ended
    disconnect = await server.wait_disconnect(timeout=1.0)
    assert disconnect.request.path == CHAT


async def test_cancelled_at_the_fairness_turn_the_stream_still_closes_at_once(
    server: FaultServer, make_client: ClientFactory
) -> None:
    """Every 32 events a fast stream gives the loop a turn; a cancel that lands there must
    close the stream (and its connection) at once, not at garbage collection, while the
    caller still holds the stream."""
    many = chat_chunks([f"w{i} " for i in range(40)], finish_reason=None, done=False)
    server.route("POST", CHAT, [*stream([b"".join(many)], end=False), Hold()])
    stream_ = make_client().chat(user())
    seen = 0

    async def consume() -> None:
        nonlocal seen
        async for _ in stream_:  # no async with
            seen += 1
            if seen == 31:
                tg.cancel_scope.cancel()  # the next __anext__ is the 32nd: the turn

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
    assert seen == 31
    disconnect = await server.wait_disconnect(timeout=1.0)
    assert disconnect.request.path == CHAT
    assert stream_.state is StreamState.STOPPED  # closed, not left waiting for the collector


async def test_cancelling_while_waiting_for_headers_closes_the_connection(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("POST", CHAT, [Hold()])  # queued: no headers
    client = make_client()
    finished = False

    async def consume() -> None:
        nonlocal finished
        async for _ in client.chat(user()):
            pass
        finished = True

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        await server.wait_requests(1, timeout=2.0)
        tg.cancel_scope.cancel()
    assert not finished
    disconnect = await server.wait_disconnect(timeout=1.0)
    assert disconnect.request.path == CHAT


async def test_collect_cancelled_closes_the_connection(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("POST", CHAT, ENDLESS)
    client = make_client()
    with pytest.raises(TimeoutError), anyio.fail_after(0.3):
        await client.complete(user())
    disconnect = await server.wait_disconnect(timeout=1.0)
    assert disconnect.request.path == CHAT


# -- nothing left behind ----------------------------------------------------------------------
def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def running_tasks() -> int:
    """The number of tasks of the running event loop (asyncio or trio)."""
    try:
        return len(asyncio.all_tasks())
    except RuntimeError:  # not on asyncio: trio
        import trio

        def count(task: trio.lowlevel.Task) -> int:
            return 1 + sum(
                count(child) for nursery in task.child_nurseries for child in nursery.child_tasks
            )

        root = trio.lowlevel.current_root_task()
        assert root is not None
        return count(root)


async def settle(predicate: Callable[[], bool]) -> None:
    """Give the loop up to 2 s for ``predicate`` to hold (the caller asserts it after)."""
    for _ in range(200):
        if predicate():
            return
        await anyio.sleep(0.01)


async def test_a_thousand_streams_half_broken_off_leave_nothing_behind(
    transport: TransportName,
) -> None:
    def handler(request: Request) -> Script:
        text = request.json()["messages"][0]["content"]
        if text.startswith("break"):
            return [*stream(chat_chunks([text], finish_reason=None, done=False), end=False),
                    Hold()]
        return stream(chat_chunks([text, "!"]))

    total, concurrency = 1000, 20
    # The server drops idle keep-alive connections after 1.5 s, so once the streams are over
    # every connection still open would be one a stream left behind. (0.5 s made a loaded
    # machine reuse connections just as the server dropped them, twice in a row for a turn,
    # past the one silent retry of a stale connection.)
    async with FaultServer(idle_timeout=1.5) as server:
        server.route("POST", CHAT, handler)
        gc.collect()
        tasks_before = running_tasks()
        fds_before = open_fds()
        client = Client(make_config(server.url, transport))

        async def one(i: int) -> None:
            text = f"break {i}" if i % 2 else f"full {i}"
            style = (i // 2) % 3
            if not i % 2:
                stream_ = client.chat(user(text))
                events = [event async for event in stream_]
                assert events == [Content(text), Content("!")]
                assert stream_.completion.content == text + "!"
            elif style == 0:  # break out of async with
                async with client.chat(user(text)) as stream_:
                    async for event in stream_:
                        assert event == Content(text)
                        break
            elif style == 1:  # aclose
                stream_ = client.chat(user(text))
                assert await anext(stream_) == Content(text)
                await stream_.aclose()
            else:  # cancel the consuming task
                got = anyio.Event()

                async def consume() -> None:
                    async for _ in client.chat(user(text)):
                        got.set()
                    raise AssertionError("the endless stream ended")

                async with anyio.create_task_group() as tg:
                    tg.start_soon(consume)
                    with anyio.fail_after(5.0):
                        await got.wait()
                    tg.cancel_scope.cancel()

        limit = anyio.Semaphore(concurrency)

        async def limited(i: int) -> None:
            async with limit:
                await one(i)

        try:
            async with anyio.create_task_group() as tg:
                for i in range(total):
                    tg.start_soon(limited, i)
            chats = [r for r in server.requests if r.path == CHAT]
            assert len(chats) == total
            # Each stream left early asks the server to stop its generation (resume is on by
            # default), until the client learns this server has no resumable streams.
            cancels = [r for r in server.requests if r.path != CHAT]
            assert {(r.method, r.path) for r in cancels} <= {("DELETE", "/v1/stream")}
            assert 1 <= len(cancels) <= concurrency
            await server.wait_for(lambda: len(server.disconnects) == total // 2, timeout=5.0)
            # Every connection a stream used is closed (or idle, and dropped by the server).
            await server.wait_closed_connections(timeout=3.0)
            await settle(lambda: running_tasks() == tasks_before)
            assert running_tasks() == tasks_before
        finally:
            await client.aclose()
        await server.wait_closed_connections(timeout=5.0)
        gc.collect()
        await settle(lambda: open_fds() == fds_before)
        assert open_fds() == fds_before
        # gc.collect() may have handed unfinished async generators to the loop's finalizer
        # hook, which closes them in tasks of its own (trio: system tasks): let them end.
        await settle(lambda: running_tasks() == tasks_before)
        assert running_tasks() == tasks_before


async def test_aclose_from_another_task_stops_the_stream_at_once(
    server: FaultServer, make_client: ClientFactory
) -> None:
    """A "stop" button: another task calls aclose() while this one iterates. The connection
    closes at once (the server sees it) and the iterating loop ends quietly."""
    server.route("POST", CHAT, stream(chat_chunks([f"t{i} " for i in range(400)]), delay=0.01))
    chat = make_client().chat(user())
    seen = 0
    started = anyio.Event()
    ended = anyio.Event()

    async def consume() -> None:
        nonlocal seen
        async for _ in chat:
            seen += 1
            if seen == 3:
                started.set()
        ended.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        with anyio.fail_after(5):
            await started.wait()
        with anyio.fail_after(2):
            await chat.aclose()
        with anyio.fail_after(3):
            await server.wait_disconnect(timeout=2)
        with anyio.fail_after(2):
            await ended.wait()  # ended, without an error
    assert 3 <= seen < 400
    with pytest.raises(RuntimeError, match="not finished"):
        _ = chat.completion
