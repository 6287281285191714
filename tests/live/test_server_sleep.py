"""Sleep mode: ``--sleep-idle-seconds 1`` unloads the model; the next request reloads it."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from devtools.scripts import request_body
from tests.live.wire import read_stream

LLAMA_SERVER_FLAGS = ("--sleep-idle-seconds", "1", "-np", "1", "-c", "4096")


WAIT_S = 10.0


async def wait_sleeping(client: httpx.AsyncClient, want: bool) -> None:
    deadline = time.monotonic() + WAIT_S
    while (await client.get("/props")).json()["is_sleeping"] is not want:
        assert time.monotonic() < deadline, f"is_sleeping never became {want}"
        await asyncio.sleep(0.1)


@pytest.mark.asyncio
async def test_sleep_and_wake(base_url: str) -> None:
    body = request_body("reasoning_answer", stream_options={"include_usage": True})
    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=base_url, limits=limits) as client:
        first = await read_stream(client, body)
        assert first.done
        await wait_sleeping(client, True)
        assert (await client.get("/health")).status_code == 200
        again = await read_stream(client, body)
        assert again.done
        assert again.text("content") == "Done."
        assert again.usage["prompt_tokens_details"]["cached_tokens"] == 0
        await wait_sleeping(client, False)
