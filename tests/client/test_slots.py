"""The per-slot line (no network), on both event loops."""

from __future__ import annotations

import anyio
import pytest

from llamaclient._policy.slots import SlotQueue

pytestmark = pytest.mark.anyio


async def test_a_leave_while_the_waiter_handles_its_queued_event_is_not_lost() -> None:
    line = SlotQueue()
    first = line.join(0)
    second = line.join(0)
    seen: list[int] = []

    async def wait() -> None:
        async for ahead in line.wait_turn(0, second):
            seen.append(ahead)
            line.leave(0, first)  # the holder leaves while the waiter's own code runs
            await anyio.sleep(0.01)

    with anyio.fail_after(2):
        await wait()
    assert seen == [1]


async def test_ahead_counts_down_in_order() -> None:
    line = SlotQueue()
    tickets = [line.join(3) for _ in range(3)]
    seen: list[int] = []

    async def wait() -> None:
        async for ahead in line.wait_turn(3, tickets[2]):
            seen.append(ahead)

    with anyio.fail_after(2):
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await anyio.sleep(0.01)
            line.leave(3, tickets[0])
            await anyio.sleep(0.01)
            line.leave(3, tickets[1])
    assert seen == [2, 1]
