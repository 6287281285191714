"""Sleep mode through our ``Client``: ``--sleep-idle-seconds 1`` unloads the model when idle; the
next chat wakes it (the server sends nothing until the reload is done) and succeeds with a
cold prompt cache."""

from __future__ import annotations

import time

import anyio
import pytest

from llamaclient import Client, FinishReason
from tests.live.chat import script_request

LLAMA_SERVER_FLAGS = ("--sleep-idle-seconds", "1", "-np", "1", "-c", "4096")


async def wait_sleeping(client: Client, want: bool, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while (await client.props()).is_sleeping is not want:
        assert time.monotonic() < deadline, f"is_sleeping never became {want}"
        await anyio.sleep(0.1)


pytestmark = pytest.mark.anyio


async def test_chat_wakes_a_sleeping_server(live_client: Client) -> None:
    request = script_request("reasoning_answer")
    first = await live_client.complete(request)
    assert first.content == "Done."
    await wait_sleeping(live_client, True)
    assert await live_client.health() == {"status": "ok"}
    again = await live_client.complete(request)
    assert (again.reasoning_content, again.content) == ("Let me check the file.", "Done.")
    assert again.finish_reason is FinishReason.STOP
    assert again.usage.prompt_tokens == first.usage.prompt_tokens
    assert again.usage.cached_tokens == 0, "the prompt cache should be gone after sleeping"
    await wait_sleeping(live_client, False, within=1.0)
