"""The tool box and the sync client on a real llama-server with the scripted model.

- ``run_tools``: the scripted model calls ``list_dir`` then ``read_file`` on every turn (the
  ``two_tool_calls`` script); both tools run, their results go back in order, and the next
  turn's prompt is a cache hit of the whole previous prompt (the exact echo), until
  ``max_turns``. Without the script's bias the model answers, and the run ends there.
- The sync client streams, completes and runs tools against the same server.
- Ctrl-C: a real SIGINT to a process streaming a long answer through the sync client; the
  server's slot is free within 2 s and the conversation's session is gone (``DELETE
  /v1/stream``; with resume on, a closed connection alone leaves the generation running).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import anyio.lowlevel
import httpx
import msgspec
import pytest

from llamaclient import (
    ChatRequest,
    Client,
    Content,
    FinishReason,
    RunOutcome,
    ToolMessage,
    ToolResult,
    Tools,
    sync,
)
from tests.live.chat import live_config, script_request

ROOT = Path(__file__).resolve().parents[2]

CALLED: list[tuple[str, str]] = []


def list_dir(path: str) -> str:
    """List a directory.

    Args:
        path: Directory path.
    """
    CALLED.append(("list_dir", path))
    return "notes.txt"


async def read_file(path: str) -> str:
    """Read a text file.

    Args:
        path: File path.
    """
    await anyio.lowlevel.checkpoint()
    CALLED.append(("read_file", path))
    return "First line of the file."


def without_tools(request: ChatRequest) -> ChatRequest:
    """A script's request with its tools left to the tool box."""
    return msgspec.structs.replace(request, tools=())


@pytest.mark.anyio
async def test_a_run_with_the_scripted_model_calls_both_tools_on_every_turn(
    live_client: Client,
) -> None:
    CALLED.clear()
    request = without_tools(script_request("two_tool_calls", max_tokens=400, slot=1))
    async with live_client.run_tools(request, Tools([list_dir, read_file]), max_turns=2) as run:
        events = [event async for event in run]
    assert run.outcome is RunOutcome.MAX_TURNS
    # Each turn's two tools ran together (list_dir in a thread): in whichever order they ended.
    assert sorted(CALLED) == sorted([("list_dir", "."), ("read_file", "notes.txt")] * 2)
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [(r.turn, r.index, r.message.content) for r in results] == [
        (0, 0, "notes.txt"), (0, 1, "First line of the file."),
        (1, 0, "notes.txt"), (1, 1, "First line of the file."),
    ]
    first, second = run.completions
    assert first.finish_reason is second.finish_reason is FinishReason.TOOL_CALLS
    assert first.usage.prompt_tokens is not None
    assert second.timings is not None
    # The echo of turn 1 (reasoning and both calls, byte for byte) keeps the cache whole.
    assert second.timings.cache_n == first.usage.prompt_tokens  # measured: 805 of 805
    assert run.messages[1] == first.message()
    assert [m.name for m in run.messages[2:4] if isinstance(m, ToolMessage)] == [
        "list_dir", "read_file",
    ]
    assert run.generated_tokens == sum(c.usage.completion_tokens or 0 for c in run.completions)


@pytest.mark.anyio
async def test_without_the_scripts_bias_the_model_answers_and_the_run_ends(
    live_client: Client,
) -> None:
    request = without_tools(script_request("reasoning_answer", max_tokens=200))
    completion = await live_client.run_tools(request, Tools([list_dir, read_file])).collect()
    assert completion.content == "Done."
    assert completion.finish_reason is FinishReason.STOP


def test_the_sync_client_streams_completes_and_runs_tools(base_url: str) -> None:
    CALLED.clear()
    with sync.Client(live_config(base_url, "asyncio")) as client:
        with client.chat(script_request("reasoning_answer", max_tokens=200)) as stream:
            texts = [e.text for e in stream if isinstance(e, Content)]
        assert "".join(texts) == "Done." == stream.completion.content
        assert client.complete(script_request("reasoning_answer", max_tokens=200)).content
        request = without_tools(script_request("two_tool_calls", max_tokens=400))
        with client.run_tools(request, Tools([list_dir, read_file]), max_turns=1) as run:
            kinds = {type(e).__name__ for e in run}
        assert run.outcome is RunOutcome.MAX_TURNS
        assert "ToolResult" in kinds
        assert sorted(CALLED) == [("list_dir", "."), ("read_file", "notes.txt")]
        assert any(not s.is_processing for s in client.slots())


CHILD = """
import signal
import sys
from llamaclient import Content, sync
from tests.live.chat import live_config, script_request

# Ctrl-C as a terminal delivers it: a job started in the background (CI's side-by-side
# suites) inherits SIGINT ignored, and Python then installs no KeyboardInterrupt for it.
signal.signal(signal.SIGINT, signal.default_int_handler)

client = sync.Client(live_config(sys.argv[1], "asyncio"))
try:
    with client.chat(script_request("long_answer", max_tokens=30_000)) as stream:
        print(stream.conversation_id, flush=True)
        for event in stream:
            if isinstance(event, Content) and event.text == " tick":
                sys.stdout.write("event\\n")  # one write: a Ctrl-C between print()'s text
                sys.stdout.flush()  # and its newline gave 'eventinterrupted stopped'
except KeyboardInterrupt:
    print("interrupted", stream.state.value, flush=True)
finally:
    client.close()
"""


def _processing(base_url: str) -> bool:
    return any(s["is_processing"] for s in httpx.get(f"{base_url}/slots", timeout=5).json())


def test_ctrl_c_in_a_sync_chat_frees_the_slot_on_a_real_server(base_url: str) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, base_url], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        assert child.stdout is not None
        conversation_id = child.stdout.readline().strip()
        assert child.stdout.readline().strip() == "event"
        assert _processing(base_url)  # 30,000 tokens to go
        time.sleep(0.2)  # the child waits inside the client for the next event
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=10)
    finally:
        if child.returncode is None:
            child.kill()
            child.wait()
    assert child.returncode == 0
    assert out.splitlines()[-1] == "interrupted stopped"
    started = time.monotonic()
    while _processing(base_url):
        assert time.monotonic() - started < 2.0, "the generation went on"
        time.sleep(0.02)
    found = httpx.post(
        f"{base_url}/v1/streams/lookup", json={"conversation_ids": [conversation_id]}, timeout=5
    )
    assert found.status_code == 200
    assert found.json() == []
