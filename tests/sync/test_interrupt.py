"""Ctrl-C in a sync client: a real SIGINT to a process that chats over a real socket (the
fault server in this test's loop, with llama-server's resumable-stream routes).

The turn stops at once: the chat connection is closed (the server sees the disconnect) and,
since resume is on (closing alone no longer stops llama-server's generation), the client
sends ``DELETE /v1/stream`` for that conversation, so the server frees the slot. The process
then leaves cleanly: its ``except KeyboardInterrupt`` runs, nothing on stderr."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

from llamaclient.testing import stream_body
from tests.support.docblocks import ROOT
from tests.support.faultserver import FaultServer, chat_chunks
from tests.support.resumable import CHAT, STREAM, Sessions

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child: POSIX")

EVENTS = chat_chunks(["Hel", "lo", " there", ", friend", "."])
HEAD = len(EVENTS[0]) + len(EVENTS[1])  # two events, then the server holds the stream
TOOL_TURN = re.findall(
    rb"data: .*?\n\n",
    stream_body(tool_calls=[{"name": "slow_tool", "arguments": {"path": "a.txt"}}]),
    re.S,
)

SCRIPT = '''
import signal
import sys
import time

from llamaclient import ChatRequest, Config, Tools, UserMessage
from llamaclient import sync

# Ctrl-C as a terminal delivers it: a job started in the background (CI's side-by-side
# suites) inherits SIGINT ignored, and Python then installs no KeyboardInterrupt for it.
signal.signal(signal.SIGINT, signal.default_int_handler)

url, mode = sys.argv[1:3]


def say(line):
    """One write per line: the tool's thread and the main thread print at the same time, and
    print() writes the text and its newline apart (seen: 'eventtool started')."""
    sys.stdout.write(line + "\\n")
    sys.stdout.flush()


def slow_tool(path: str) -> str:
    """Takes a minute."""
    say("tool started")
    time.sleep(60)
    return path


client = sync.Client(Config(url, stall_timeout=60.0, max_tokens=64))
request = ChatRequest([UserMessage("hi")])
stream = None
try:
    if mode == "chat":  # no `with`: the interrupted call itself closes the turn
        stream = client.chat(request)
        for event in stream:
            say("event")
    elif mode == "with":
        with client.chat(request) as stream:
            for event in stream:
                say("event")
    elif mode == "complete":
        client.complete(request)
    else:
        run = client.run_tools(request, Tools([slow_tool]))
        with run:
            for event in run:
                say("event")
        stream = run.stream
except KeyboardInterrupt:
    state = "-" if stream is None else stream.state.value
    print("interrupted", state, flush=True)
finally:
    client.close()
print("closed", flush=True)
'''


async def start(script: Path, url: str, mode: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        url,
        mode,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


async def interrupt(proc: asyncio.subprocess.Process) -> tuple[str, str, float]:
    """SIGINT, then the process's output and how long it took to exit."""
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    return out.decode(), err.decode(), time.monotonic() - sent


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("mode", "state"),
    [("chat", "stopped"), ("with", "stopped"), ("complete", "-"), ("run_tools", "-")],
)
async def test_ctrl_c_closes_the_connection_and_cancels_the_generation(
    mode: str, state: str, tmp_path: Path
) -> None:
    """``state``: the stream's, as the ``except KeyboardInterrupt`` sees it: the turn is
    closed by then (the interrupted call waited for it), also without ``with``."""
    script = tmp_path / "chat.py"
    script.write_text(SCRIPT)
    async with FaultServer(hold_timeout=60.0) as server:
        sessions = Sessions(server, EVENTS, cuts=[(HEAD, "hold")])
        proc = await start(script, server.url, mode)
        try:
            if mode == "complete":  # nothing printed: wait for the chat to reach the server
                await server.wait_for(
                    lambda: any(r.path == CHAT for r in server.requests), timeout=30
                )
            else:  # both events the server sends before it holds the stream
                for _ in range(2):
                    assert await asyncio.wait_for(proc.stdout.readline(), 30) == b"event\n"  # type: ignore[union-attr]
            # The process now waits inside the client for an event that will not come; a
            # Ctrl-C while the loop body runs (the user's own code) would land there instead.
            await asyncio.sleep(0.5)
            out, err, took = await interrupt(proc)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        disconnect = await server.wait_disconnect(timeout=5)
        chat = next(r for r in server.requests if r.path == CHAT)
    assert err == "", err
    assert proc.returncode == 0
    assert out.splitlines()[-2:] == [f"interrupted {state}", "closed"]
    assert took < 5, took
    assert disconnect.request is chat  # the held stream's connection was closed
    conversation = chat.headers["x-conversation-id"]
    assert sessions.deleted == [conversation]  # and its generation cancelled
    deletes = [r for r in server.requests if r.method == "DELETE"]
    assert [r.path for r in deletes] == [STREAM]


@pytest.mark.asyncio
async def test_ctrl_c_while_a_tool_runs_stops_the_run_without_waiting_for_the_tool(
    tmp_path: Path,
) -> None:
    """The model's turn is over and a plain tool sleeps a minute in a worker thread: Ctrl-C
    ends the run at once (the thread is abandoned), and no next turn is sent."""
    script = tmp_path / "chat.py"
    script.write_text(SCRIPT)
    async with FaultServer(hold_timeout=60.0) as server:
        Sessions(server, TOOL_TURN)
        proc = await start(script, server.url, "run_tools")
        try:
            while (line := await asyncio.wait_for(proc.stdout.readline(), 30)) != b"tool started\n":  # type: ignore[union-attr]
                assert line == b"event\n", line
            out, err, took = await interrupt(proc)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        chats = [r for r in server.requests if r.path == CHAT]
    assert err == "", err
    assert proc.returncode == 0
    assert out.splitlines()[-2:] == ["interrupted -", "closed"]
    assert took < 5, took
    assert len(chats) == 1
