"""Behind a real load balancer: nginx and HAProxy from Debian (installed by ``.ci/run``) on
loopback, in front of 3 llama-servers with the scripted model (2 slots each).

- 16 sessions x 6 turns with exact echo through the balancer hashing on ``X-Session-Id``:
  the prompt-cache reuse (>= 95 %), against the same balancer round-robin.
- 100 cuts at random points, made between the client and the balancer: every stream resumes
  with nothing lost or repeated, its ``GET /v1/stream`` sent by the balancer to the backend
  that holds it; the same balancer round-robin sends some resumes to another backend, and
  those turns fail (``ResumeError``).
- A backend killed mid-run: its sessions go on on the others, and the turn that lost its
  cache says so (``CacheMiss``).
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import anyio
import pytest

from devtools.llama_server import LlamaServer
from llamaclient import (
    CacheMiss,
    ChatEvent,
    ChatMessage,
    Client,
    Completion,
    Content,
    Reasoning,
    ResumeError,
    Resuming,
    StreamClosedEarlyError,
    SystemMessage,
    ToolMessage,
    UserMessage,
)
from tests.live.balancers import available, balancer
from tests.live.chat import ALL_TOOLS, live_config, script_request
from tests.live.fleet import TURNS, reuse, run_session
from tests.live.proxy import CutProxy

pytestmark = pytest.mark.anyio
ONE_LOOP = pytest.mark.parametrize("anyio_backend", ["asyncio"])  # heavy: once is enough

SESSIONS = 16
CUTS = int(os.environ.get("LLAMACLIENT_BALANCER_CUTS", "100"))
KINDS = [pytest.param(k, marks=pytest.mark.skipif(not available(k), reason=f"no {k}"))
         for k in ("nginx", "haproxy")]  # fmt: skip


def ports(servers: list[LlamaServer]) -> list[int]:
    return [s.port for s in servers]


async def sessions(url: str, n: int = SESSIONS) -> float:
    """``n`` sessions x 6 turns through ``url`` at once; their prompt-cache reuse."""
    logs = []
    async with Client(live_config(url)) as client:

        async def one(name: str) -> None:
            logs.append(await run_session(name, client.chat))

        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(one, f"agent-{i}")
    return reuse(logs)


@ONE_LOOP
@pytest.mark.parametrize("kind", KINDS)
async def test_sessions_keep_their_cache_behind_a_hashing_balancer(
    kind: str, servers: list[LlamaServer], tmp_path: Path
) -> None:
    started = time.perf_counter()
    with balancer(kind, tmp_path / "hashed", ports(servers), hashed=True) as url:
        hashed = await sessions(url)
    hashed_seconds = time.perf_counter() - started
    started = time.perf_counter()
    with balancer(kind, tmp_path / "rr", ports(servers), hashed=False) as url:
        spread = await sessions(url)  # the same servers, warm with the other sessions' turns
    print(
        f"\n{kind}: {SESSIONS} sessions x {len(TURNS)} turns, hashing on X-Session-Id: reuse "
        f"{hashed:.1%} in {hashed_seconds:.1f} s; round-robin: {spread:.1%} in "
        f"{time.perf_counter() - started:.1f} s"
    )
    assert hashed >= 0.95
    assert hashed > spread


def text(events: list[ChatEvent]) -> tuple[str, str]:
    reasoning = "".join(e.text for e in events if isinstance(e, Reasoning))
    return reasoning, "".join(e.text for e in events if isinstance(e, Content))


async def cut_runs(
    url: str, points: list[int]
) -> tuple[list[int], list[StreamClosedEarlyError]]:
    """Cut a chat at each of ``points`` (response bytes) between the client and ``url``;
    for each stream that finished whole (checked against its events), how many reconnects
    it took, and the errors of the others."""
    request = script_request("long_answer", max_tokens=60)
    resumes, errors = list[int](), list[StreamClosedEarlyError]()
    with CutProxy(int(url.rsplit(":", 1)[1])).running() as proxy:
        for point in points:
            proxy.arm(point)  # the next connection: a balancer keeps ours alive, so a new client
            events: list[ChatEvent] = []
            async with Client(live_config(proxy.url)) as client:
                stream = client.chat(request)
                try:
                    async with stream:
                        async for event in stream:
                            events.append(event)
                except StreamClosedEarlyError as error:
                    errors.append(error)
                    continue
                completion = stream.completion
                shown = (completion.reasoning_content or "", completion.content or "")
                assert text(events) == shown
                assert (completion.content or "").startswith("Counting:")
                resumes.append(sum(isinstance(e, Resuming) for e in events))
    return resumes, errors


@ONE_LOOP
@pytest.mark.parametrize("kind", KINDS)
async def test_every_cut_resumes_on_the_backend_that_holds_it(
    kind: str, servers: list[LlamaServer], tmp_path: Path
) -> None:
    rng = random.Random(7)
    points = [rng.randrange(300, 1500) for _ in range(CUTS)]  # inside the body
    with balancer(kind, tmp_path / "hashed", ports(servers), hashed=True) as url:
        resumes, errors = await cut_runs(url, points)
    assert errors == []
    assert resumes == [1] * CUTS  # each on its first reconnect: the right backend
    with balancer(kind, tmp_path / "rr", ports(servers), hashed=False) as url:
        resumes, errors = await cut_runs(url, points[:12])
    wrong = sum(n > 1 for n in resumes) + len(errors)
    print(
        f"\n{kind} round-robin: of 12 cut streams, {sum(n > 1 for n in resumes)} reached their "
        f"backend only after more reconnects, {len(errors)} failed"
    )
    assert wrong, "round-robin sent every resume to the right backend"
    assert all(isinstance(e, ResumeError) for e in errors), errors


@ONE_LOOP
@pytest.mark.parametrize("kind", KINDS[:1])
async def test_a_killed_backend_moves_its_sessions_and_says_the_cache_was_lost(
    kind: str, servers: list[LlamaServer], tmp_path: Path
) -> None:
    """A session's turns through nginx; its backend (found from the server's own slots) is
    killed between two turns: the next turn goes to another backend, whole, and says its
    cache was lost."""
    messages: list[ChatMessage] = [SystemMessage("You are agent k."), UserMessage("Go.")]
    misses: list[CacheMiss] = []
    with balancer(kind, tmp_path / "hashed", ports(servers), hashed=True) as url:
        async with Client(live_config(url)) as client:
            for turn, (script, _) in enumerate(TURNS[:4]):
                if turn == 2:
                    victim = await _busy_backend(servers)
                    os.kill(victim.pid or 0, signal.SIGKILL)
                    victim.stop()
                request = script_request(script, messages, tools=ALL_TOOLS, session="k")
                events: list[ChatEvent] = []
                async with client.chat(request) as stream:
                    async for event in stream:
                        events.append(event)
                misses += [e for e in events if isinstance(e, CacheMiss)]
                completion: Completion = stream.completion
                messages.append(completion.message())
                for i, call in enumerate(completion.tool_calls):
                    messages.append(ToolMessage(call.id, f"result {turn}.{i}"))
                if not completion.tool_calls:
                    messages.append(UserMessage(f"Next step {turn}?"))
    assert misses, "the turn after the kill did not say its cache was lost"
    assert misses[0].reused < misses[0].expected


async def _busy_backend(servers: list[LlamaServer]) -> LlamaServer:
    """The backend that served the session: the one whose slots have a prompt cached."""
    for server in servers:
        async with Client(live_config(server.base_url)) as client:
            if any(slot.n_prompt_tokens for slot in await client.slots()):
                return server
    raise AssertionError("no backend has served a turn")


def test_the_docs_show_the_configurations_the_tests_use() -> None:
    """docs/balancers.md shows, verbatim, what the tests start (ports and prefix aside)."""
    from tests.live import balancers as b

    docs = (Path(__file__).parents[2] / "docs" / "balancers.md").read_text()
    backends = (8081, 8082, 8083)
    nginx = b.NGINX.format(
        prefix="/var/lib/llama-lb",
        port=8080,
        servers="\n".join(f"        server 127.0.0.1:{p};" for p in backends),
        hash=b.NGINX_HASH,
    )
    haproxy = b.HAPROXY.format(
        port=8080,
        servers="\n".join(
            f"    server s{i} 127.0.0.1:{p} check inter 500ms" for i, p in enumerate(backends)
        ),
        hash=b.HAPROXY_HASH,
    )
    assert nginx.rstrip() in docs
    assert haproxy.rstrip() in docs
