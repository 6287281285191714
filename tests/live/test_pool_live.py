"""The Pool against 3 real llama-servers with the scripted model, 2 slots each.

- 16 sessions x 6 agent turns, concurrently, exact echo: the pool's prompt-cache reuse
  (``timings.cache_n`` over the previous turn's prompt) against round-robin over the same
  servers, and the total time of each (printed; the figures are in docs/router-and-pool.md).
- One server killed mid-run: every session completes its 6 turns; the sessions that were on
  it say so (``Routed(reason="failover")``, ``cache_lost``).
- Both slots of one server busy: new sessions go to the others at once.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from pathlib import Path

import anyio
import pytest

from devtools.llama_server import LlamaServer
from llamaclient import (
    ChatRequest,
    ChatStream,
    Client,
    Content,
    Pool,
    PoolStream,
    Reasoning,
    Routed,
)
from tests.live.chat import live_config, script_request
from tests.live.fleet import TURNS, SessionLog, fleet, reuse, run_session

pytestmark = pytest.mark.anyio

SESSIONS = 16


def pool_of(servers: list[LlamaServer]) -> Pool:
    return Pool([live_config(s.base_url) for s in servers])


async def run_all(chat_for: object, n: int = SESSIONS, retries: int = 0) -> list[SessionLog]:
    logs: list[SessionLog] = []

    async def one(name: str) -> None:
        logs.append(await run_session(name, chat_for, retries=retries))  # type: ignore[arg-type]

    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(one, f"s{i}")
    return sorted(logs, key=lambda log: int(log.name[1:]))


ONE_LOOP = pytest.mark.parametrize("anyio_backend", ["asyncio"])  # heavy: once is enough


@ONE_LOOP
async def test_the_pool_keeps_the_prompt_cache_warm(
    servers: list[LlamaServer],
    llama_server_binary: Path,
    scripted_model_path: Path,
    tmp_path: Path,
) -> None:
    start = time.perf_counter()
    async with pool_of(servers) as pool:
        pooled = await run_all(pool.chat)
    pool_seconds = time.perf_counter() - start

    # Round-robin on a fresh fleet of its own, so both start cold.
    with fleet(llama_server_binary, scripted_model_path, tmp_path) as others:
        clients = [Client(live_config(s.base_url)) for s in others]
        turn = itertools.count()

        def round_robin(request: ChatRequest) -> ChatStream:
            return clients[next(turn) % len(clients)].chat(request)

        start = time.perf_counter()
        try:
            spread = await run_all(round_robin)
        finally:
            for client in clients:
                await client.aclose()
        rr_seconds = time.perf_counter() - start

    pool_reuse, rr_reuse = reuse(pooled), reuse(spread)
    print(
        f"\n{SESSIONS} sessions x {len(TURNS)} turns, 3 servers x 2 slots: "
        f"pool reuse {pool_reuse:.1%} in {pool_seconds:.2f} s; "
        f"round-robin reuse {rr_reuse:.1%} in {rr_seconds:.2f} s"
    )
    for log in pooled:  # each session stayed where it started
        routes = [(r.server.rsplit(":", 1)[-1], r.slot, r.reason) for r in log.routes]
        assert len({r.server for r in log.records}) == 1, (log.name, routes)
        assert log.records[0].reason == "new session"
    assert pool_reuse >= 0.95
    assert pool_reuse > rr_reuse


@ONE_LOOP
async def test_a_killed_server_loses_no_session(servers: list[LlamaServer]) -> None:
    n = SESSIONS // 2  # half the sessions: the same proof in half the CI time
    sent = itertools.count(1)
    logs: list[SessionLog] = []
    killed: list[LlamaServer] = []
    async with pool_of(servers) as pool:

        def chat(request: ChatRequest) -> PoolStream:
            if next(sent) == n * 2:  # mid-run: every session has had a turn or two
                load = [s.sessions for s in pool._balancer.servers]
                killed.append(servers[load.index(max(load))])  # the one with most sessions
                os.kill(killed[0].pid or 0, signal.SIGKILL)
            return pool.chat(request)

        async def one(name: str) -> None:
            logs.append(await run_session(name, chat, retries=2))

        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(one, f"s{i}")
    victim = killed[0]
    assert victim.returncode is not None
    assert len(logs) == n
    assert all(len(log.records) == len(TURNS) for log in logs)
    moved = [log for log in logs if any(r.reason == "failover" for r in log.routes)]
    on_victim = [log for log in logs if any(r.server == victim.base_url for r in log.routes)]
    assert on_victim
    assert {log.name for log in moved} == {log.name for log in on_victim}
    for log in moved:
        failover = next(r for r in log.routes if r.reason == "failover")
        assert failover.cache_lost
        assert failover.server != victim.base_url
        assert all(r.server != victim.base_url for r in log.records[-2:])
    print(f"\nkilled {victim.base_url}: {len(moved)} sessions moved, "
          f"{sum(log.retried for log in logs)} turns cut mid-stream and asked again")


async def test_a_busy_server_gets_no_new_session(servers: list[LlamaServer]) -> None:
    busy = servers[0]
    async with Client(live_config(busy.base_url)) as holder, pool_of(servers) as pool:
        held = [holder.chat(script_request("endless_reasoning", slot=s, max_tokens=100_000))
                for s in (0, 1)]
        for holding in held:  # both slots generating
            async for event in holding:
                if isinstance(event, Reasoning):
                    break
        routes: list[Routed] = []
        waits: list[float] = []
        for i in range(4):
            start = time.perf_counter()
            pooled = pool.chat(script_request("reasoning_answer", session=f"new{i}"))
            async with pooled:
                async for event in pooled:
                    if isinstance(event, Routed):
                        routes.append(event)
                    elif isinstance(event, Content) and len(waits) == i:
                        waits.append(time.perf_counter() - start)  # first answer text
            assert pooled.completion.content == "Done."
        for holding in held:
            await holding.aclose()
    assert [r.server for r in routes if r.server == busy.base_url] == []
    assert all(r.reason == "new session" for r in routes)
    print(f"\nnew sessions while {busy.base_url} was full: first text after "
          f"{', '.join(f'{w * 1000:.0f}' for w in waits)} ms")
