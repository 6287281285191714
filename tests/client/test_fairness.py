"""A consumer slower than the server never starves the other tasks of the event loop: reads
that always find data buffered still give other tasks a turn now and then.

Both event loops: trio makes every read a scheduling point anyway, asyncio does not (a
read that finds data buffered returns without a turn), so the client's turns matter there."""

from __future__ import annotations

import time

import anyio
import anyio.lowlevel
import pytest

from llamaclient import ChatRequest, Client, Config, UserMessage
from llamaclient._stream import _FAIRNESS_EVENTS, ChatStream
from tests.support.faultserver import FaultServer, chat_chunks, stream

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("transport", ["asyncio", "httpx"])
async def test_slow_consumer_leaves_the_loop_to_other_tasks(transport: str) -> None:
    texts = [f"t{i} " for i in range(200)]
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await anyio.lowlevel.checkpoint()

    async with FaultServer() as srv:
        srv.route("POST", "/v1/chat/completions", stream(chat_chunks(texts)))
        config = Config(srv.url, transport=transport)  # type: ignore[arg-type]
        async with Client(config) as client, client.chat(ChatRequest([UserMessage("hi")])) as s:
            await anext(s)  # the request is out and the first event in
            await anyio.sleep(0.3)  # let the whole answer arrive and wait in buffers
            async with anyio.create_task_group() as tg:
                tg.start_soon(ticker)
                await anyio.lowlevel.checkpoint()
                ticks = 0
                events = 1
                async for _ in s:
                    events += 1
                    time.sleep(0.001)  # noqa: ASYNC251 - a slow, synchronous consumer on purpose
                tg.cancel_scope.cancel()
    assert events == 200
    # Without the fairness turns the ticker would not run at all while the buffered events
    # drain (measured: 0 or 1); with a turn every 32 events it runs at least 6 times.
    assert _FAIRNESS_EVENTS == 32
    assert ticks >= 5, ticks


async def test_reads_that_wait_take_no_extra_turns(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Our asyncio stack hands out everything that came while the reader slept, so a stream
    whose every event is waited for (a fast consumer: the common case) never takes the
    fairness turn, which would cost a loop round per 32 events for nothing."""
    if anyio_backend != "asyncio":
        pytest.skip("the asyncio transport needs an asyncio event loop")
    turns = 0
    turn = ChatStream._checkpoint

    async def counted(self: ChatStream) -> None:
        nonlocal turns
        turns += 1
        await turn(self)

    monkeypatch.setattr(ChatStream, "_checkpoint", counted)
    texts = [f"t{i} " for i in range(100)]
    async with FaultServer() as srv:
        srv.route("POST", "/v1/chat/completions", stream(chat_chunks(texts), delay=0.002))
        async with Client(Config(srv.url, transport="asyncio")) as client:
            completion = await client.chat(ChatRequest([UserMessage("hi")])).collect()
    assert completion.content == "".join(texts)
    assert turns == 0
