"""The per-slot line (pure asyncio, no network)."""

from __future__ import annotations

import asyncio

import pytest

from llamaclient._policy.slots import SlotQueue


@pytest.mark.asyncio
async def test_a_leave_while_the_waiter_handles_its_queued_event_is_not_lost() -> None:
    line = SlotQueue()
    first = line.join(0)
    second = line.join(0)
    seen: list[int] = []

    async def wait() -> None:
        async for ahead in line.wait_turn(0, second):
            seen.append(ahead)
            line.leave(0, first)  # the holder leaves while the waiter's own code runs
            await asyncio.sleep(0.01)

    await asyncio.wait_for(wait(), 2)
    assert seen == [1]


@pytest.mark.asyncio
async def test_ahead_counts_down_in_order() -> None:
    line = SlotQueue()
    tickets = [line.join(3) for _ in range(3)]
    seen: list[int] = []

    async def wait() -> None:
        async for ahead in line.wait_turn(3, tickets[2]):
            seen.append(ahead)

    task = asyncio.create_task(wait())
    await asyncio.sleep(0.01)
    line.leave(3, tickets[0])
    await asyncio.sleep(0.01)
    line.leave(3, tickets[1])
    await asyncio.wait_for(task, 2)
    assert seen == [2, 1]
