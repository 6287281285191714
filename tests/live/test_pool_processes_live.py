"""Pools that agree across processes, on 3 real llama-servers (the scripted model, 2 slots
each): 2 agent processes x 16 sessions x 6 turns with exact echo, at the same time, each
process with a Pool of its own and nothing shared; one of them is restarted after its third
turn (a new process, a new Pool: only each session's messages survive, on disk). Rendezvous
hashing puts a session on the same server in all three processes (unless that server is over
the load bound when the session first comes; a conversation with earlier turns always goes
to it), so the prompt cache is reused across them: >= 95 %, and a session moves only from
the server its first process spilled it to back to its own."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from devtools.llama_server import LlamaServer
from llamaclient._turn.balancer import weight

ROOT = Path(__file__).resolve().parents[2]
SESSIONS = 16

AGENT = """
import asyncio, json, sys
from pathlib import Path
from llamaclient import Pool, Routed, SystemMessage, ToolMessage, UserMessage
from llamaclient import from_openai, to_openai
from tests.live.chat import ALL_TOOLS, live_config, script_request
from tests.live.fleet import TURNS

urls, names = json.loads(sys.argv[1]), json.loads(sys.argv[2])
start, stop, state = int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5])


async def session(pool, name):
    path = state / f"{name}.json"
    if path.exists():
        saved = json.loads(path.read_text())
    else:
        first = [SystemMessage(f"You are agent {name}."), UserMessage("Read notes.txt.")]
        saved = {"messages": to_openai(first), "records": []}
    messages = from_openai(saved["messages"])
    for turn in range(start, stop):
        script, _ = TURNS[turn]
        stream = pool.chat(script_request(script, messages, tools=ALL_TOOLS, session=name))
        events = [event async for event in stream]
        done = stream.completion
        routed = [e for e in events if isinstance(e, Routed)][-1]
        saved["records"].append([routed.server, done.usage.prompt_tokens, done.timings.cache_n])
        messages.append(done.message())
        for i, call in enumerate(done.tool_calls):
            messages.append(ToolMessage(call.id, f"result {turn}.{i} of {call.name}"))
        if not done.tool_calls:
            messages.append(UserMessage(f"Thanks. Next step {turn}?"))
    saved["messages"] = to_openai(messages)
    path.write_text(json.dumps(saved))


async def main():
    async with Pool([live_config(url, "asyncio") for url in urls]) as pool:
        await asyncio.gather(*(session(pool, name) for name in names))

asyncio.run(main())
"""


def agent(urls: list[str], names: list[str], turns: range, state: Path) -> subprocess.Popen[str]:
    argv = [json.dumps(urls), json.dumps(names), str(turns.start), str(turns.stop), str(state)]
    return subprocess.Popen(
        [sys.executable, "-c", AGENT, *argv],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stderr=subprocess.PIPE,
        text=True,
    )


def finished(process: subprocess.Popen[str]) -> None:
    _, err = process.communicate(timeout=300)
    assert process.returncode == 0, err


def test_two_processes_and_a_restart_keep_every_session_on_one_server(
    servers: list[LlamaServer], tmp_path: Path
) -> None:
    urls = [s.base_url for s in servers]
    first = [f"a{i}" for i in range(SESSIONS)]
    second = [f"b{i}" for i in range(SESSIONS)]
    started = time.monotonic()
    other = agent(urls, second, range(6), tmp_path)
    finished(agent(urls, first, range(3), tmp_path))  # then restarted: a new process
    finished(agent(urls, first, range(3, 6), tmp_path))
    finished(other)
    took = time.monotonic() - started
    records = {
        name: json.loads((tmp_path / f"{name}.json").read_text())["records"]
        for name in first + second
    }
    assert all(len(r) == 6 for r in records.values())
    where = {name: [server for server, _, _ in r] for name, r in records.items()}
    moved = sorted(name for name, seq in where.items() if len(set(seq)) > 1)
    cached = previous = 0
    short = []
    for name, turns in records.items():
        for k, ((at, prompt, _), (to, _, cache_n)) in enumerate(itertools.pairwise(turns), 1):
            cached += min(cache_n, prompt)
            previous += prompt
            if cache_n < prompt:
                short.append(f"{name}@{k}: {cache_n}/{prompt}{' moved' if at != to else ''}")
    ratio = cached / previous
    shares = sorted(sum(1 for seq in where.values() if seq[-1] == url) for url in urls)
    print(f"\ncross-process reuse {ratio:.1%} in {took:.1f} s; sessions per server {shares}")
    print(f"sessions that changed server: {moved}")
    print(f"turns short of the previous prompt: {short}")
    assert ratio >= 0.95
    # The restarted process sends each conversation (it has earlier turns) to its rendezvous
    # server, whatever the load: so a session moves only if its first process had found that
    # server over the load bound and put it on the next one (measured 1 to 4 of 32).
    first_choice = {name: max(urls, key=lambda url: weight(name, url)) for name in where}
    assert all(set(where[name][3:]) == {first_choice[name]} for name in first), where
    assert all(where[name][0] != first_choice[name] for name in moved), moved
