"""``client.run_tools``: the agent loop of the README, against FakeLlama.

Each call starts as its ``ToolCallDone`` arrives; the results go back as ``ToolMessage``s in
the order of the calls, after the exact echo of the assistant turn; the events stream to the
caller; the run is bounded by ``max_turns`` and by the tokens it generates."""

from __future__ import annotations

import json
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from llamaclient import (
    AssistantMessage,
    ChatEvent,
    ChatRequest,
    Client,
    Config,
    Content,
    Pool,
    Routed,
    RunOutcome,
    StalledError,
    ToolCall,
    ToolCallDelta,
    ToolCallDone,
    ToolMessage,
    ToolResult,
    ToolRun,
    Tools,
    UserMessage,
)
from llamaclient.testing import FakeLlama, FakeRequest, Reply

pytestmark = pytest.mark.anyio

QUESTION = UserMessage("What is in a.txt and b.txt?")
FILES = {"a.txt": "Apples.", "b.txt": "Bananas."}


def read_file(path: str) -> str:
    """Read a text file.

    Args:
        path: The file's path.
    """
    return FILES.get(path, f"no such file: {path}")


def reads_both(request: FakeRequest) -> Reply:
    """A model that reads both files, then answers from the results it was sent."""
    if isinstance(request.last, ToolMessage):
        results = [m.content for m in request.messages if isinstance(m, ToolMessage)]
        return Reply(" ".join(results))
    calls = [{"name": "read_file", "arguments": {"path": p}} for p in FILES]
    return Reply(reasoning="Both files.", tool_calls=calls, chunk=4, pace=0.005)


async def drain(run: ToolRun) -> list[ChatEvent | ToolResult]:
    async with run:
        return [event async for event in run]


async def test_the_run_calls_sends_the_results_and_ends_on_the_answer(
    fake_llama: FakeLlama,
) -> None:
    fake_llama.reply(reads_both)
    async with fake_llama.client() as client:
        run = client.run_tools(ChatRequest([QUESTION], slot=0), Tools([read_file]))
        events = await drain(run)

    assert run.outcome is RunOutcome.ANSWERED
    assert run.completion.content == "Apples. Bananas."
    assert run.turns == 2
    assert len(fake_llama.requests) == 2
    first, second = fake_llama.requests
    assert first.tools == list(Tools([read_file]).schemas)
    calls = run.completions[0].tool_calls
    assert second.messages == [
        QUESTION,
        AssistantMessage(reasoning_content="Both files.", tool_calls=calls),  # exact echo
        ToolMessage(calls[0].id, "Apples.", name="read_file"),
        ToolMessage(calls[1].id, "Bananas.", name="read_file"),
    ]
    assert second.settings["id_slot"] == 0
    assert run.messages == [*second.messages, run.completion.message()]
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [(r.turn, r.index, r.message.content, r.failed) for r in results] == [
        (0, 0, "Apples.", False),
        (0, 1, "Bananas.", False),
    ]
    assert isinstance(events[-1], Content)  # the answer's events came out too


async def test_the_echo_makes_the_next_prompt_a_cache_hit(fake_llama: FakeLlama) -> None:
    fake_llama.reply(reads_both)
    async with fake_llama.client() as client:
        run = client.run_tools(ChatRequest([QUESTION]), Tools([read_file]))
        await run.collect()
    first, second = run.completions
    assert first.usage.prompt_tokens is not None
    assert second.timings is not None
    assert second.timings.cache_n > first.usage.prompt_tokens  # the prompt and the echo


async def test_each_tool_starts_as_its_call_is_done_while_the_model_writes_on(
    fake_llama: FakeLlama,
) -> None:
    log: list[str] = []

    async def lookup(word: str) -> str:
        log.append(f"{word} starts")
        await anyio.lowlevel.checkpoint()
        log.append(f"{word} ends")
        return word.upper()

    def model(request: FakeRequest) -> Reply:
        if isinstance(request.last, ToolMessage):
            return Reply("ok")
        calls = [{"name": "lookup", "arguments": {"word": w}} for w in ("sea", "sky")]
        return Reply(tool_calls=calls, chunk=4, pace=0.01)  # 4 characters every 10 ms

    fake_llama.reply(model)
    async with fake_llama.client() as client:
        run = client.run_tools(ChatRequest([UserMessage("Look up sea and sky.")]), Tools([lookup]))
        async with run:
            async for event in run:
                if isinstance(event, ToolCallDelta):
                    log.append(f"model writes call {event.index}")
                elif isinstance(event, ToolCallDone):
                    log.append(f"call {event.index} done")
    first_ends = log.index("sea ends")
    assert log.index("call 0 done") < first_ends < log.index("call 1 done")
    assert "model writes call 1" in log[first_ends:]


async def test_results_go_back_in_the_order_of_the_calls_whichever_ends_first(
    fake_llama: FakeLlama,
) -> None:
    ended: list[str] = []

    async def slow(n: int) -> str:
        await anyio.sleep(0.2)
        ended.append("slow")
        return f"slow {n}"

    async def fast(n: int) -> str:
        ended.append("fast")
        return f"fast {n}"

    def model(request: FakeRequest) -> Reply:
        if isinstance(request.last, ToolMessage):
            return Reply("done")
        calls = [{"name": "slow", "arguments": {"n": 0}}, {"name": "fast", "arguments": {"n": 1}}]
        return Reply(tool_calls=calls)

    fake_llama.reply(model)
    async with fake_llama.client() as client:
        events = await drain(client.run_tools(ChatRequest([QUESTION]), Tools([slow, fast])))
    assert ended == ["fast", "slow"]
    results = [e.message.content for e in events if isinstance(e, ToolResult)]
    assert results == ["slow 0", "fast 1"]
    sent = fake_llama.requests[1].messages[2:]
    assert [m.content for m in sent if isinstance(m, ToolMessage)] == ["slow 0", "fast 1"]


async def test_failures_go_back_as_text_the_model_reads(fake_llama: FakeLlama) -> None:
    def broken(path: str) -> str:
        raise PermissionError(f"{path} is not readable")

    def model(request: FakeRequest) -> Reply:
        if isinstance(request.last, ToolMessage):
            return Reply("sorry")
        calls: list[dict[str, Any]] = [
            {"name": "broken", "arguments": {"path": "x"}},
            {"name": "missing", "arguments": {}},
            {"name": "read_file", "arguments": {"path": 7}},
            {"name": "read_file", "arguments": "{not json"},
        ]
        return Reply(tool_calls=calls)

    fake_llama.reply(model)
    async with fake_llama.client() as client:
        events = await drain(client.run_tools(ChatRequest([QUESTION]), Tools([broken, read_file])))
    results = [e for e in events if isinstance(e, ToolResult)]
    assert all(r.failed for r in results)
    sent = [m.content for m in fake_llama.requests[1].messages if isinstance(m, ToolMessage)]
    assert sent == [r.message.content for r in results]
    assert sent[0] == "error: PermissionError: x is not readable"
    assert sent[1] == "error: there is no tool named 'missing' (the tools: broken, read_file)"
    assert sent[2] == (
        "error: the arguments do not fit read_file: Expected `str`, got `int` - at `$.path`"
    )
    assert sent[3].startswith("error: the arguments do not fit read_file: JSON is malformed")


async def test_the_api_key_never_reaches_a_tool_result(fake_llama: FakeLlama) -> None:
    key = "sk-secret-key-1234"

    def leaky() -> str:
        raise RuntimeError(f"request failed with headers {{'Authorization': 'Bearer {key}'}}")

    def model(request: FakeRequest) -> Reply:
        if isinstance(request.last, ToolMessage):
            return Reply("ok")
        return Reply(tool_calls=[{"name": "leaky", "arguments": {}}])

    fake_llama.reply(model)
    async with fake_llama.client(api_key=key) as client:
        events = await drain(client.run_tools(ChatRequest([QUESTION]), Tools([leaky])))
    (result,) = [e for e in events if isinstance(e, ToolResult)]
    assert result.message.content == (
        "error: RuntimeError: request failed with headers {'Authorization': 'Bearer ***'}"
    )
    assert key not in json.dumps(fake_llama.requests[1].body)


def always_calls(request: FakeRequest) -> Reply:
    """A model that never stops calling the tool."""
    return Reply(tool_calls=[{"name": "read_file", "arguments": {"path": "a.txt"}}])


async def test_max_turns_ends_the_run_with_every_result_in_the_history(
    fake_llama: FakeLlama,
) -> None:
    fake_llama.reply(always_calls)
    async with fake_llama.client() as client:
        run = client.run_tools(ChatRequest([QUESTION]), Tools([read_file]), max_turns=3)
        await drain(run)
    assert run.outcome is RunOutcome.MAX_TURNS
    assert len(fake_llama.requests) == 3
    assert run.turns == 3
    last_call = run.completion.tool_calls[0]
    assert run.messages[-1] == ToolMessage(last_call.id, "Apples.", name="read_file")
    roles = [type(m).__name__ for m in run.messages]
    assert roles == ["UserMessage", *["AssistantMessage", "ToolMessage"] * 3]


async def test_the_token_cap_lowers_each_turns_max_tokens_and_ends_the_run(
    fake_llama: FakeLlama,
) -> None:
    """``max_tokens_total=12``: the first turn may write 12 (the config's 100 is more), a
    call of 9 tokens leaves 3, so the second turn is cut at 3 (finish ``length``)."""

    def model(request: FakeRequest) -> Reply:
        if isinstance(request.last, ToolMessage):
            return Reply("one two three four five six")
        return Reply(tool_calls=[{"name": "read_file", "arguments": {"path": "a.txt"}}], chunk=2)

    fake_llama.reply(model)
    async with fake_llama.client(max_tokens=100) as client:
        run = client.run_tools(ChatRequest([QUESTION]), Tools([read_file]), max_tokens_total=12)
        await drain(run)
    caps = [r.settings["max_tokens"] for r in fake_llama.requests]
    first = run.completions[0].usage.completion_tokens
    assert first is not None
    assert first < 12
    assert caps == [12, 12 - first]
    assert run.outcome is RunOutcome.MAX_TOKENS
    assert run.completion.finish_reason == "length"
    assert run.generated_tokens == 12
    assert run.usage.completion_tokens == 12


async def test_the_token_cap_stops_a_run_that_spends_it_on_tool_calls(
    fake_llama: FakeLlama,
) -> None:
    """A model that always calls: each turn may write what the run has left, and the run
    ends once it is spent, never past it, with a result for every call made."""

    def calls_char_by_char(request: FakeRequest) -> Reply:
        return Reply(tool_calls=[{"name": "read_file", "arguments": {"path": "a.txt"}}], chunk=1)

    fake_llama.reply(calls_char_by_char)
    async with fake_llama.client() as client:
        request = ChatRequest([QUESTION], max_tokens=50)
        run = client.run_tools(request, Tools([read_file]), max_tokens_total=40)
        await drain(run)
    assert run.outcome is RunOutcome.MAX_TOKENS
    assert run.generated_tokens == 40
    caps = [r.settings["max_tokens"] for r in fake_llama.requests]
    spent = [c.usage.completion_tokens or 0 for c in run.completions]
    assert caps == [min(50, 40 - sum(spent[:i])) for i in range(len(caps))]
    assert len(caps) >= 2
    assert isinstance(run.messages[-1], ToolMessage)  # the calls made have their results


async def test_a_turns_error_ends_the_run_as_that_typed_error(fake_llama: FakeLlama) -> None:
    """A stall in the second turn: the run raises the ``StalledError`` itself (not wrapped in
    an ExceptionGroup by the tools' task group), keeps the first turn, and cancels the tool
    that was still running."""
    cancelled = anyio.Event()

    async def hangs(path: str) -> str:
        try:
            await anyio.sleep(30)
        finally:
            cancelled.set()
        return path

    fake_llama.reply(tool_calls=[{"name": "read_file", "arguments": {"path": "a.txt"}}])
    calls = [{"name": "hangs", "arguments": {"path": p}} for p in ("b.txt", "a.txt")]
    # 4 characters a chunk: call 0 is 5 chunks; the stall comes 2 chunks into call 1.
    fake_llama.fail(stall=True, cut_after=7).reply("ok", tool_calls=calls, chunk=4)
    async with fake_llama.client(stall_timeout=0.2) as client:
        run = client.run_tools(ChatRequest([QUESTION]), Tools([read_file, hangs]))
        with anyio.fail_after(5), pytest.raises(StalledError) as failed:
            await drain(run)
    assert cancelled.is_set()  # call 0's tool had started, and was stopped
    assert run.error is failed.value
    assert run.outcome is None
    assert run.turns == 1
    assert run.stream is not None
    assert run.stream.partial.content == "ok"
    assert [c.arguments for c in run.stream.partial.tool_calls] == ['{"path": "b.txt"}', '{"pa']
    with pytest.raises(RuntimeError, match="the run failed"):
        run.completion  # noqa: B018


async def test_leaving_the_block_early_stops_the_turn_and_the_tools(
    fake_llama: FakeLlama,
) -> None:
    fake_llama.resumable = True
    started = anyio.Event()
    cancelled = anyio.Event()

    async def hangs(path: str) -> str:
        started.set()
        try:
            await anyio.sleep(30)
        finally:
            cancelled.set()
        return path

    calls = [{"name": "hangs", "arguments": {"path": p}} for p in FILES]
    fake_llama.reply(tool_calls=calls, chunk=2, pace=0.05)
    async with fake_llama.client() as client:
        run = client.run_tools(ChatRequest([QUESTION]), Tools([hangs]))
        with anyio.fail_after(5):
            async with run:
                async for event in run:
                    if isinstance(event, ToolCallDone):
                        await started.wait()
                        break
            await cancelled.wait()
    assert run.outcome is None
    assert run.stream is not None
    assert run.stream.state == "stopped"
    assert ("DELETE", "/v1/stream") in [
        (c.method, c.path) for c in fake_llama.calls
    ]  # the server is told to stop
    assert [e async for e in run] == []  # a stopped run stays stopped
    with pytest.raises(RuntimeError, match="entered once"):
        await run.__aenter__()


async def test_a_run_is_iterated_inside_async_with() -> None:
    fake = FakeLlama()
    async with fake.client() as client:
        run = client.run_tools(ChatRequest([QUESTION]), Tools([read_file]))
        with pytest.raises(RuntimeError, match="inside `async with"):
            await anext(run)
    assert fake.requests == []


async def test_the_arguments_of_a_run_are_checked_at_once() -> None:
    async with FakeLlama().client() as client:
        tools = Tools([read_file])
        with pytest.raises(ValueError, match=r"leave request\.tools empty"):
            client.run_tools(ChatRequest([QUESTION], tools=tools.schemas), tools)
        with pytest.raises(ValueError, match="max_turns must be >= 1"):
            client.run_tools(ChatRequest([QUESTION]), tools, max_turns=0)
        with pytest.raises(ValueError, match="max_tokens_total must be >= 1"):
            client.run_tools(ChatRequest([QUESTION]), tools, max_tokens_total=0)


async def test_a_pool_runs_every_turn_of_a_session_on_one_server() -> None:
    fakes = [FakeLlama(), FakeLlama()]
    for fake in fakes:
        fake.reply(reads_both)
    configs = [Config(f"http://fake-{i}.test", stall_timeout=2) for i in range(2)]
    async with Pool(configs, transports=[f.transport() for f in fakes]) as pool:
        run = pool.run_tools(ChatRequest([QUESTION], session="s1"), Tools([read_file]))
        events = await drain(run)
    routed = [e for e in events if isinstance(e, Routed)]
    assert len(routed) == 2
    assert len({r.server for r in routed}) == 1
    assert sorted(len(f.requests) for f in fakes) == [0, 2]
    assert run.completion.content == "Apples. Bananas."


async def test_collect_runs_to_the_end_and_returns_the_answer(fake_llama: FakeLlama) -> None:
    fake_llama.reply(reads_both)
    async with fake_llama.client() as client:
        completion = await client.run_tools(ChatRequest([QUESTION]), Tools([read_file])).collect()
    assert completion.content == "Apples. Bananas."


async def test_a_call_the_stream_never_marked_done_still_runs(fake_llama: FakeLlama) -> None:
    """Every call in the Completion gets a result, also one no ``ToolCallDone`` announced
    (a stream cut by ``max_tokens`` in the middle of its last call)."""
    fake_llama.reply(tool_calls=[{"name": "read_file", "arguments": {"path": "a.txt"}}])
    fake_llama.reply("done")
    async with fake_llama.client() as client:
        run = client.run_tools(ChatRequest([QUESTION]), Tools([read_file]))
        async with run:
            async for event in run:
                if isinstance(event, ToolCallDone):
                    run._running.clear()  # as if it had never been announced
        assert isinstance(run.messages[2], ToolMessage)
        assert run.messages[2].content == "Apples."


async def test_a_client_made_by_hand_runs_tools_the_same(fake_llama: FakeLlama) -> None:
    fake_llama.reply(reads_both)
    config = Config(fake_llama.url, stall_timeout=2)
    async with Client(config, transport=fake_llama.transport()) as client:
        completion = await client.run_tools(ChatRequest([QUESTION]), Tools([read_file])).collect()
    assert completion.content == "Apples. Bananas."
    assert next(r.last for r in fake_llama.requests) == QUESTION
    assert isinstance(fake_llama.requests[1].messages[1], AssistantMessage)
    first = fake_llama.requests[1].messages[1]
    assert isinstance(first, AssistantMessage)
    assert all(isinstance(c, ToolCall) for c in first.tool_calls)
