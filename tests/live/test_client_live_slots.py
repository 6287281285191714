"""Slots through our ``Client`` on a real llama-server (``-np 2``): a pinned slot busy with
another client's request (``Waiting(slot_busy=True)``, or ``BusyError`` with ``wait=False``),
two requests of one client for one slot (``Queued``), and cancelling a stream mid-way, which
must free the slot on the server within 2 s."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any, Literal

import anyio
import pytest

from devtools.llama_server import LlamaServer
from devtools.rawhttp import RawExchange, build_request
from devtools.scripts import request_body
from llamaclient import (
    BusyError,
    ChatEvent,
    Client,
    Content,
    FinishReason,
    Progress,
    Queued,
    Reasoning,
    Waiting,
)
from tests.live.chat import drain, output, script_request

pytestmark = pytest.mark.anyio

LONG = 30_000  # tokens: seconds of generation, far longer than any test waits
# 32768-token slots (the model's training context), so the holder's generation cannot end by
# itself (context full) while a test still counts on it holding the slot.
LLAMA_SERVER_FLAGS = ("-np", "2", "-c", "65536", "-b", "64", "-ub", "64")


async def slot_busy(client: Client, slot: int) -> bool:
    return (await client.slots())[slot].is_processing


async def wait_idle(client: Client, slot: int, within: float = 2.0) -> float:
    """Seconds until ``GET /slots`` shows ``slot`` idle; fails after ``within``."""
    started = time.monotonic()
    while await slot_busy(client, slot):
        elapsed = time.monotonic() - started
        assert elapsed < within, f"slot {slot} still processing after {elapsed:.2f} s"
        await anyio.sleep(0.02)
    return time.monotonic() - started


class Holder:
    """Another client (a raw socket, read from a thread so it never competes with our event
    loop) streaming a long answer pinned to ``slot``. ``stop()`` closes its connection."""

    def __init__(self, port: int, slot: int) -> None:
        self.port = port
        self.slot = slot
        self.closed_at: float | None = None
        self._exchange: RawExchange | None = None

    async def __aenter__(self) -> Holder:
        body = request_body("long_answer", max_tokens=LONG, id_slot=self.slot)
        request = build_request("POST", "/v1/chat/completions", self.port, body)
        exchange = self._exchange = RawExchange(self.port, request, timeout=60)
        await anyio.to_thread.run_sync(exchange.read_until, b'"content"')
        assert exchange.response.startswith(b"HTTP/1.1 200"), exchange.response[:200]
        assert b'"content"' in exchange.response
        return self

    async def stop(self) -> None:
        if self._exchange is not None and self.closed_at is None:
            self._exchange.close()
            self.closed_at = time.monotonic()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()


@pytest.fixture(autouse=True)
async def slots_idle(live_client: Client) -> None:
    """Every test starts with both slots idle (a previous test may just have let go)."""
    for slot in (0, 1):
        await wait_idle(live_client, slot, within=5.0)


# -- a slot busy with another client's request ------------------------------------------------
async def test_pinned_busy_slot_waits_then_succeeds(
    live_client: Client, live_server: LlamaServer
) -> None:
    async with Holder(live_server.port, slot=0) as holder:
        assert await slot_busy(live_client, 0)
        stream = live_client.chat(script_request("reasoning_answer", slot=0))
        events: list[tuple[float, ChatEvent]] = []
        stopping = False
        async with anyio.create_task_group() as tg, stream:
            async for event in stream:
                events.append((time.monotonic(), event))
                if event == Waiting(slot_busy=True):
                    # The server defers our request until the holder lets go of the slot.
                    tg.start_soon(delayed, 0.3, holder.stop())
                    stopping = True
        assert stopping
    assert events[0][1] == Waiting(slot_busy=True)
    assert [e for _, e in events].count(Waiting(slot_busy=True)) == 1
    assert holder.closed_at is not None
    started = events[1][0]
    assert started > holder.closed_at, (
        f"our request ran while the holder had the slot: {events[:3]}, "
        f"holder closed at {holder.closed_at}"
    )
    completion = stream.completion
    assert (completion.reasoning_content, completion.content) == (
        "Let me check the file.",
        "Done.",
    )
    assert completion.finish_reason is FinishReason.STOP


async def delayed(seconds: float, then: Any) -> None:
    await anyio.sleep(seconds)
    await then


async def test_pinned_busy_slot_without_waiting_is_busy_error(
    live_client: Client, live_server: LlamaServer
) -> None:
    async with Holder(live_server.port, slot=0):
        request = script_request("reasoning_answer", slot=0, wait=False)
        events, error = await drain(live_client.chat(request))
        assert events == []
        assert isinstance(error, BusyError), error
        assert error.partial is None
        # The other slot is free: an unpinned request (or one for slot 1) runs at once.
        completion = await live_client.complete(
            script_request("reasoning_answer", slot=1, wait=False)
        )
        assert completion.content == "Done."
        assert await slot_busy(live_client, 0), "the holder kept its slot"


# -- two requests of one client for one slot ------------------------------------------------
async def test_same_slot_requests_queue_in_order(live_client: Client) -> None:
    log: list[tuple[str, float, ChatEvent | None]] = []

    async def run(name: str, started: anyio.Event | None, **fields: Any) -> list[ChatEvent]:
        script = "long_answer" if name == "first" else "reasoning_answer"
        stream = live_client.chat(script_request(script, slot=0, **fields))
        events: list[ChatEvent] = []
        async with stream:
            async for event in stream:
                events.append(event)
                log.append((name, time.monotonic(), event))
                if started is not None:
                    started.set()
        log.append((name, time.monotonic(), None))
        return events

    results: dict[str, list[ChatEvent]] = {}

    async def keep(name: str, started: anyio.Event | None, **fields: Any) -> None:
        results[name] = await run(name, started, **fields)

    first_started = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: keep("first", first_started, max_tokens=400))
        await first_started.wait()
        tg.start_soon(keep, "second", None)
    first_events, second_events = results["first"], results["second"]
    assert second_events[0] == Queued(ahead=1)
    assert not [e for e in first_events if isinstance(e, Queued | Waiting)]
    assert [type(e) for e in output(second_events)][1:] == [Reasoning, Content], second_events
    first_end = next(t for n, t, e in log if n == "first" and e is None)
    second_start = next(
        t for n, t, e in log if n == "second" and not isinstance(e, Queued | Waiting)
    )
    assert first_end <= second_start, "the second request ran before the first ended"
    assert sum(isinstance(e, Content) for e in first_events) > 300
    assert not [e for e in second_events if isinstance(e, Waiting)], (
        "the slot was reported busy after our own request on it had ended"
    )


# -- cancelling mid-stream frees the slot ---------------------------------------------------
Mode = Literal["break", "break_in_async_with", "aclose", "cancel_task"]


async def read_until_content(stream: AsyncIterator[ChatEvent]) -> None:
    async for event in stream:
        if isinstance(event, Content):
            return
    raise AssertionError("the stream ended before any content")


# "break" drops an unfinished stream on purpose, which trio reports as a ResourceWarning.
@pytest.mark.filterwarnings("ignore:Async generator 'llamaclient.:ResourceWarning")
@pytest.mark.parametrize("mode", ["break", "break_in_async_with", "aclose", "cancel_task"])
async def test_cancel_mid_stream_frees_the_slot(live_client: Client, mode: Mode) -> None:
    request = script_request("long_answer", slot=0, max_tokens=LONG)
    if mode == "break":
        stream = live_client.chat(request)
        async for event in stream:
            if isinstance(event, Content):
                break
        del stream  # dropping the unfinished stream closes its response at once
    elif mode == "break_in_async_with":
        async with live_client.chat(request) as stream:
            async for event in stream:
                if isinstance(event, Content):
                    break
    elif mode == "aclose":
        stream = live_client.chat(request)
        await read_until_content(stream)
        assert await slot_busy(live_client, 0)
        await stream.aclose()
    else:
        stream = live_client.chat(request)
        reading = anyio.Event()

        async def consume() -> None:
            async for event in stream:
                if isinstance(event, Content):
                    reading.set()
            raise AssertionError("the long answer ended")

        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            with anyio.fail_after(10):
                await reading.wait()
            assert await slot_busy(live_client, 0)
            tg.cancel_scope.cancel()
    await wait_idle(live_client, 0, within=2.0)
    # The slot is usable again at once, and the client's own line for slot 0 is free.
    events, error = await drain(live_client.chat(script_request("reasoning_answer", slot=0)))
    assert error is None
    assert not [e for e in events if isinstance(e, Queued | Waiting)]
    assert isinstance(events[0], Progress)
