"""A fleet of local llama-servers with the scripted model, and the multi-turn sessions the
pool tests run on it (exact echo: each turn re-sends ``Completion.message()``).

``run_session`` drives one session of ``TURNS`` agent turns through a ``chat`` function
(a ``Pool``, or round-robin over clients) and records per turn where it went, the prompt
size and ``timings.cache_n``. ``reuse`` is the prompt-cache reuse of a run: the tokens
served from the cache over the previous turn's prompt, summed over every turn after the
first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from devtools.llama_server import LlamaServer
from devtools.scripted_model import write_model
from llamaclient import (
    ChatEvent,
    ChatMessage,
    ChatRequest,
    ChatStream,
    Completion,
    FinishReason,
    PoolStream,
    Routed,
    StreamClosedEarlyError,
    SystemMessage,
    ToolMessage,
    UserMessage,
)
from tests.live.chat import ALL_TOOLS, script_request

__all__ = ["TURNS", "Record", "SessionLog", "fleet", "reuse", "run_session"]

FLAGS = ("-np", "2", "-c", "16384")
TURNS: tuple[tuple[str, FinishReason], ...] = (
    ("reasoning_answer", FinishReason.STOP),
    ("tool_call", FinishReason.TOOL_CALLS),
    ("two_tool_calls", FinishReason.TOOL_CALLS),
    ("reasoning_answer", FinishReason.STOP),
    ("write_file", FinishReason.TOOL_CALLS),
    ("reasoning_answer", FinishReason.STOP),
)


@contextmanager
def fleet(binary: Path, model: Path, logs: Path, n: int = 3) -> Iterator[list[LlamaServer]]:
    """``n`` servers with the scripted model, 2 slots each; stopped afterwards."""
    servers = [
        LlamaServer(model, *FLAGS, log_path=logs / f"server{i}.log", binary=binary)
        for i in range(n)
    ]
    try:
        for server in servers:
            server.start()
        yield servers
    finally:
        for server in servers:
            server.stop()


@dataclass
class Record:
    """One turn: where it went and what the cache gave."""

    server: str | None
    reason: str | None
    prompt: int
    cache_n: int


@dataclass
class SessionLog:
    name: str
    records: list[Record] = field(default_factory=list)
    retried: int = 0  # turns cut mid-stream by a dead server and asked again
    routes: list[Routed] = field(default_factory=list)


Chat = Callable[[ChatRequest], ChatStream | PoolStream]


async def run_session(name: str, chat: Chat, *, retries: int = 0) -> SessionLog:
    """Run the ``TURNS`` of session ``name``; ``chat(request)`` returns a stream. A turn cut
    mid-stream (its server died) is asked again up to ``retries`` times."""
    log = SessionLog(name)
    messages: list[ChatMessage] = [
        SystemMessage(f"You are agent {name}."),  # before the tools: no prefix is shared
        UserMessage("Read notes.txt, then write out.txt."),
    ]
    for turn, (script, finish) in enumerate(TURNS):
        request = script_request(script, messages, tools=ALL_TOOLS, session=name)
        for attempt in range(retries + 1):
            try:
                events, completion = await _one(chat, request, log.routes)
                break
            except StreamClosedEarlyError:
                if attempt == retries:
                    raise
                log.retried += 1
        assert completion.finish_reason is finish, (name, turn, completion)
        routed = [e for e in events if isinstance(e, Routed)]
        last = routed[-1] if routed else None
        timings, prompt = completion.timings, completion.usage.prompt_tokens
        assert timings is not None
        assert prompt is not None
        log.records.append(
            Record(
                last.server if last else None,
                last.reason if last else None,
                prompt,
                timings.cache_n,
            )
        )
        messages.append(completion.message())
        for i, call in enumerate(completion.tool_calls):
            messages.append(ToolMessage(call.id, f"result {turn}.{i} of {call.name}"))
        if not completion.tool_calls:
            messages.append(UserMessage(f"Thanks. Next step {turn}?"))
    return log


async def _one(
    chat: Chat, request: ChatRequest, routes: list[Routed]
) -> tuple[list[ChatEvent], Completion]:
    """One turn; its ``Routed`` events go to ``routes`` as they come, so a turn cut by a dying
    server still says where it had been routed."""
    stream = chat(request)
    events: list[ChatEvent] = []
    async with stream:
        async for event in stream:
            events.append(event)
            if isinstance(event, Routed):
                routes.append(event)
    return events, stream.completion


def reuse(logs: Sequence[SessionLog]) -> float:
    """Cached tokens over the previous turn's prompt, over every turn after the first."""
    cached = previous = 0
    for log in logs:
        for before, now in zip(log.records, log.records[1:], strict=False):
            cached += min(now.cache_n, before.prompt)
            previous += before.prompt
    return cached / previous if previous else 0.0


def start_router(binary: Path, tmp: Path, *flags: str, broken: bool = False) -> LlamaServer:
    """A llama-server router (no ``-m``) over a models directory in ``tmp`` with two
    scripted models, ``alpha`` and ``beta`` (and ``broken``, a corrupt GGUF, when asked),
    started."""
    models = tmp / "models"
    models.mkdir()
    write_model(models / "alpha.gguf")
    write_model(models / "beta.gguf")
    if broken:
        (models / "broken.gguf").write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 200)
    server = LlamaServer(
        None, "--models-dir", str(models), *flags, log_path=tmp / "router.log", binary=binary
    )
    server.start()
    return server
