"""A turn leaves no cyclic garbage: a finished, failed or stopped stream is freed by
reference counting (nothing it makes refers back to the turn), so a thousand turns do not
feed the cyclic garbage collector, whose full collections were the longest pauses at 1,024
streams (docs/benchmarks.md)."""

from __future__ import annotations

import gc
from collections import Counter

import pytest

from llamaclient import ChatRequest, UserMessage
from llamaclient.testing import FakeLlama

pytestmark = pytest.mark.anyio

OURS = {"ChatTurn", "Context", "Plan", "Target", "ChatStream", "Performer", "Assembler"}


async def test_finished_failed_and_stopped_turns_leave_no_cyclic_garbage() -> None:
    fake = FakeLlama()
    request = ChatRequest([UserMessage("x")])
    async with fake.client() as client:
        fake.reply("warm up")
        await client.complete(request)  # first-use caches are not garbage
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            fake.reply("hello there")
            await client.complete(request)
            fake.fail(error="boom")
            with pytest.raises(Exception):  # noqa: B017, PT011 - any typed error will do
                await client.complete(request)
            fake.reply("a b c d e f")
            async with client.chat(request) as stream:
                async for _ in stream:
                    break
            gc.collect()
            left = Counter(type(o).__name__ for o in gc.garbage)
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
    assert not OURS & set(left), left
