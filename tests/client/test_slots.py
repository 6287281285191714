"""The per-slot line (no network), on both event loops."""

from __future__ import annotations

import anyio
import pytest

from llamaclient._driver.shared import Lines, Ticket

pytestmark = pytest.mark.anyio


async def _wait(line: Lines, slot: int, ticket: Ticket, seen: list[int]) -> None:
    """What a turn does with its ``Line`` commands: wait until the count moves, until 0."""
    ahead = -1
    while ahead := await line.moved(slot, ticket, ahead):
        seen.append(ahead)


async def test_a_leave_while_the_waiter_handles_its_queued_event_is_not_lost() -> None:
    line = Lines()
    first = line.join(0)
    second = line.join(0)
    seen: list[int] = []
    ahead = await line.moved(0, second, -1)
    seen.append(ahead)
    line.leave(0, first)  # the holder leaves while the waiter's own code runs
    await anyio.sleep(0.01)
    with anyio.fail_after(2):
        ahead = await line.moved(0, second, ahead)
    assert (seen, ahead) == ([1], 0)


async def test_ahead_counts_down_in_order() -> None:
    line = Lines()
    tickets = [line.join(3) for _ in range(3)]
    seen: list[int] = []
    with anyio.fail_after(2):
        async with anyio.create_task_group() as tg:
            tg.start_soon(_wait, line, 3, tickets[2], seen)
            await anyio.sleep(0.01)
            line.leave(3, tickets[0])
            await anyio.sleep(0.01)
            line.leave(3, tickets[1])
    assert seen == [2, 1]


async def test_the_last_release_is_known_for_a_short_while() -> None:
    line = Lines()
    ticket = line.join(1)
    assert line.released_ago(1) is None
    line.leave(1, ticket)
    ago = line.released_ago(1)
    assert ago is not None
    assert 0 <= ago < 0.5
    line.leave(1, ticket)  # leaving twice changes nothing
