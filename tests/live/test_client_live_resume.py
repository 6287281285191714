"""Resumable streams on a real llama-server (issue: a dropped connection loses nothing).

A loopback proxy (``tests/live/proxy.py``) cuts the chat connection after a chosen number of
response bytes: inside the status line and headers, mid-event, mid-HTTP-chunk. The stream
goes on through ``GET /v1/stream`` from the byte offset: the events' text equals the
Completion, which equals an uncut run. Also: ``resume=False`` gives the old error, a client
process killed with SIGKILL is picked up by ``reattach`` from another process, and the
resume latency (cut → next event) is reported.
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from llamaclient import (
    ChatEvent,
    ChatRequest,
    Client,
    Completion,
    Content,
    Reasoning,
    Resuming,
    StreamClosedEarlyError,
)
from tests.live.chat import drain, live_config, script_request
from tests.live.proxy import CutProxy

pytestmark = pytest.mark.anyio

SCRIPT = "long_answer"
MAX_TOKENS = 60
CUTS = int(os.environ.get("LLAMACLIENT_RESUME_CUTS", "100"))
ROOT = Path(__file__).resolve().parents[2]
REPORT = Path(os.environ.get("LLAMACLIENT_RESUME_REPORT", "/tmp/llamaclient-resume.json"))


def request() -> ChatRequest:
    return script_request(SCRIPT, max_tokens=MAX_TOKENS)


def texts(events: list[ChatEvent]) -> tuple[str, str]:
    reasoning = "".join(e.text for e in events if isinstance(e, Reasoning))
    content = "".join(e.text for e in events if isinstance(e, Content))
    return reasoning, content


async def uncut_run(url: str) -> tuple[list[ChatEvent], Completion, int]:
    """An uncut stream through the proxy, and how many response bytes it had."""
    async with Client(live_config(url)) as client:
        stream = client.chat(request())
        events, error = await drain(stream)
    assert error is None
    return events, stream.completion, stream._turn.offset


def same_answer(a: Completion, b: Completion) -> None:
    assert (a.reasoning_content, a.content, a.finish_reason) == (
        b.reasoning_content,
        b.content,
        b.finish_reason,
    )
    assert a.usage.completion_tokens == b.usage.completion_tokens


async def test_random_cuts_lose_and_repeat_nothing(base_url: str) -> None:
    with CutProxy(int(base_url.rsplit(":", 1)[1])).running() as proxy:
        _, reference, body_bytes = await uncut_run(proxy.url)
        assert (reference.content or "").startswith("Counting:")
        rng = random.Random(11)
        # Cut points over the whole response: the head (~200 bytes) and the body.
        points = [rng.randrange(1, body_bytes + 150) for _ in range(CUTS)]
        latencies: list[float] = []
        resumed = 0
        async with Client(live_config(proxy.url)) as client:
            for point in points:
                proxy.arm(point)
                cuts_before = len(proxy.cuts)
                stream = client.chat(request())
                events: list[ChatEvent] = []
                after_cut: float | None = None
                async with stream:
                    async for event in stream:
                        events.append(event)
                        if isinstance(event, Resuming):
                            resumed += 1
                        elif after_cut is None and len(proxy.cuts) > cuts_before and isinstance(
                            event, (Reasoning, Content)
                        ) and any(isinstance(e, Resuming) for e in events):
                            after_cut = time.monotonic()
                            latencies.append(after_cut - proxy.cuts[cuts_before])
                completion = stream.completion
                same_answer(completion, reference)
                assert texts(events) == (completion.reasoning_content or "",
                                         completion.content or ""), point
    assert resumed >= CUTS * 0.9, f"only {resumed} of {CUTS} cuts needed a resume"
    p50 = statistics.median(latencies) * 1000
    p99 = sorted(latencies)[max(0, int(len(latencies) * 0.99) - 1)] * 1000
    REPORT.write_text(json.dumps({  # noqa: ASYNC240 - a test writing its report"cuts": CUTS, "resumed": resumed, "latency_ms_p50": p50,
                                  "latency_ms_p99": p99}))
    print(f"\nresume: {CUTS} cuts, {resumed} resumed, cut → next event "
          f"p50 {p50:.1f} ms, p99 {p99:.1f} ms")


async def test_without_resume_the_same_cut_is_stream_closed_early(base_url: str) -> None:
    with CutProxy(int(base_url.rsplit(":", 1)[1])).running() as proxy:
        _, _, body_bytes = await uncut_run(proxy.url)
        proxy.arm(200 + body_bytes // 2)
        async with Client(live_config(proxy.url, resume=False)) as client:
            stream = client.chat(request())
            events, error = await drain(stream)
    assert isinstance(error, StreamClosedEarlyError)
    assert error.partial is not None
    assert texts(events) == (error.partial.reasoning_content or "", error.partial.content or "")
    assert stream.conversation_id is None


CHILD = """
import asyncio, sys
from llamaclient import Client, Content
from tests.live.chat import live_config, script_request

async def main() -> None:
    async with Client(live_config(sys.argv[1])) as client:
        stream = client.chat(script_request("long_answer", max_tokens=int(sys.argv[2])))
        print(stream.conversation_id, flush=True)
        async for event in stream:
            if isinstance(event, Content):
                print("event", flush=True)
        print("finished", flush=True)

asyncio.run(main())
"""


def spawn_and_kill(base_url: str, max_tokens: int) -> str:
    """Start a client process streaming a long answer, kill it (SIGKILL) after its first
    answer event, and return its conversation id: the generation goes on in the server."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, base_url, str(max_tokens)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert child.stdout is not None
    conversation_id = child.stdout.readline().strip()
    assert child.stdout.readline().strip() == "event"
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    return conversation_id


async def test_a_killed_client_is_picked_up_by_reattach_from_another_process(
    base_url: str,
) -> None:
    max_tokens = 400  # long enough that the child is killed mid-stream
    async with Client(live_config(base_url)) as client:
        reference = await client.complete(script_request(SCRIPT, max_tokens=max_tokens))
    conversation_id = await anyio.to_thread.run_sync(spawn_and_kill, base_url, max_tokens)
    async with Client(live_config(base_url)) as client:
        stream = client.reattach(conversation_id)
        events, error = await drain(stream)
    assert error is None
    same_answer(stream.completion, reference)
    assert texts(events) == (reference.reasoning_content or "", reference.content or "")


async def test_cancel_stops_a_generation_a_killed_client_left_running(base_url: str) -> None:
    """With resume on, a client that dies leaves its generation running (the trade-off);
    ``Client.cancel`` from another process stops it: the slot is free within 2 s."""
    conversation_id = await anyio.to_thread.run_sync(spawn_and_kill, base_url, 30_000)
    async with Client(live_config(base_url)) as client:
        await anyio.sleep(0.3)
        assert any(s.is_processing for s in await client.slots())
        assert await client.cancel(conversation_id) is True
        started = time.monotonic()
        while any(s.is_processing for s in await client.slots()):
            assert time.monotonic() - started < 2.0
            await anyio.sleep(0.02)
