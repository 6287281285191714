"""Our ``Client`` against a real llama-server running the scripted model, over both transports.

Each test proves one behaviour end to end: the events a script streams and the Completion they
fold into, live tool arguments, prompt progress, timings and usage, the thinking budget (the
control call, ``ThinkingCapped``, ``ThinkingOverrunError``), context overflow, and a multi-turn
agent loop whose echoed turns hit the server's prompt cache.
"""

from __future__ import annotations

import json
import time
from urllib.parse import urlsplit

import anyio
import msgspec
import pytest

from devtools.scripts import AFTER_REASONING_END, SCRIPTS
from llamaclient import (
    ArgumentDelta,
    ChatMessage,
    Client,
    Completion,
    Config,
    Content,
    ContextOverflowError,
    FinishReason,
    Progress,
    Reasoning,
    ThinkingCapped,
    ThinkingOverrunError,
    ToolCall,
    ToolCallDelta,
    ToolCallDone,
    ToolMessage,
    UserMessage,
)
from llamaclient._transports.native import AsyncioTransport
from tests.live.chat import (
    ALL_TOOLS,
    CALL_ID_RE,
    ID_RE,
    TransportName,
    drain,
    live_config,
    output,
    script_request,
    text_of,
)

pytestmark = pytest.mark.anyio

THINK = "Let me check the file."
WRITTEN = SCRIPTS["write_file"].tool_calls[0][1]


def assert_accounting(completion: Completion) -> None:
    """Timings and usage of a finished stream agree with each other."""
    timings, usage = completion.timings, completion.usage
    assert timings is not None
    assert ID_RE.match(completion.id), completion.id
    assert completion.model
    assert usage.prompt_tokens == timings.cache_n + timings.prompt_n
    assert usage.completion_tokens == timings.predicted_n > 0
    assert usage.cached_tokens == timings.cache_n
    assert (timings.prompt_ms or 0) > 0
    assert (timings.predicted_ms or 0) > 0


# -- scripts: events and the Completion ---------------------------------------------------
async def test_reasoning_then_answer(live_client: Client) -> None:
    stream = live_client.chat(script_request("reasoning_answer"))
    events, error = await drain(stream)
    assert error is None
    out = output(events)
    assert [type(e) for e in out] == sorted(
        (type(e) for e in out), key=[Reasoning, Content].index
    ), "reasoning must come before content"
    assert {type(e) for e in out} == {Reasoning, Content}
    assert text_of(out, Reasoning) == THINK
    assert text_of(out, Content) == "Done."
    completion = stream.completion
    assert completion.reasoning_content == THINK
    assert completion.content == "Done."
    assert completion.tool_calls == ()
    assert completion.finish_reason is FinishReason.STOP
    assert completion.thinking_capped is False
    assert 1 <= completion.reasoning_tokens < (completion.usage.completion_tokens or 0)
    assert_accounting(completion)


async def test_answer_without_thinking(live_client: Client) -> None:
    completion = await live_client.complete(script_request("answer_no_thinking"))
    assert (completion.reasoning_content, completion.content) == (None, "Done.")
    assert completion.reasoning_tokens == 0
    assert completion.finish_reason is FinishReason.STOP


async def test_logit_bias_decimal_string_keys_are_token_ids(live_client: Client) -> None:
    """The OpenAI form {"<id>": -100} (what ``script_request`` sends) suppresses that token, so
    the script takes its tool-call branch; the same bias as integer keys does the same."""
    request = script_request("tool_call")
    assert request.logit_bias
    assert all(isinstance(k, str) for k in request.logit_bias)
    by_str = await live_client.complete(request)
    assert by_str.finish_reason is FinishReason.TOOL_CALLS
    as_int = {int(k): v for k, v in dict(request.logit_bias).items()}
    by_int = await live_client.complete(msgspec.structs.replace(request, logit_bias=as_int))
    assert by_int.finish_reason is FinishReason.TOOL_CALLS
    same = [(c.name, c.arguments) for c in by_int.tool_calls]
    assert same == [(c.name, c.arguments) for c in by_str.tool_calls]  # ids are per request


async def test_logit_bias_text_keys_are_text(live_client: Client) -> None:
    """A non-numeric key is text to tokenize: "Done." is several one-character tokens here, not
    the script's "Done." token, so the script's answer is not suppressed."""
    request = script_request("tool_call", logit_bias={"Done.": -100.0})
    completion = await live_client.complete(request)
    assert (completion.content, completion.finish_reason) == ("Done.", FinishReason.STOP)


async def test_one_tool_call_in_pieces(live_client: Client) -> None:
    stream = live_client.chat(script_request("tool_call"))
    events, error = await drain(stream)
    assert error is None
    out = output(events)
    assert text_of(out, Reasoning) == THINK
    assert not [e for e in out if isinstance(e, Content)]
    pieces = [e for e in out if isinstance(e, ToolCallDelta)]
    first, rest = pieces[0], pieces[1:]
    assert (first.index, first.name) == (0, "read_file")
    assert CALL_ID_RE.match(first.id or ""), first
    assert len(rest) >= 2, "the arguments should arrive in several pieces"
    assert all((p.index, p.id, p.name) == (0, None, None) for p in rest)
    arguments = "".join(p.arguments for p in pieces)
    assert json.loads(arguments) == {"path": "notes.txt"}
    call = ToolCall(first.id or "", "read_file", arguments)
    assert out[-1] == ToolCallDone(0, call), "ToolCallDone comes last, after the finish"
    assert sum(isinstance(e, ToolCallDone) for e in out) == 1
    completion = stream.completion
    assert completion.tool_calls == (call,)
    assert completion.content is None
    assert completion.finish_reason is FinishReason.TOOL_CALLS
    assert_accounting(completion)


async def test_two_tool_calls_first_done_before_second_starts(live_client: Client) -> None:
    stream = live_client.chat(script_request("two_tool_calls"))
    events, error = await drain(stream)
    assert error is None
    out = output(events)
    kinds = [
        (type(e).__name__, e.index) for e in out if isinstance(e, ToolCallDelta | ToolCallDone)
    ]
    done0 = kinds.index(("ToolCallDone", 0))
    first1 = kinds.index(("ToolCallDelta", 1))
    assert done0 < first1, kinds
    assert all(k != ("ToolCallDelta", 0) for k in kinds[done0:]), kinds
    assert kinds[-1] == ("ToolCallDone", 1)
    assert sum(1 for k in kinds if k == ("ToolCallDelta", 1)) >= 3
    calls = stream.completion.tool_calls
    assert [c.name for c in calls] == ["list_dir", "read_file"]
    assert [json.loads(c.arguments) for c in calls] == [{"path": "."}, {"path": "notes.txt"}]
    assert calls[0].id != calls[1].id
    dones = [e for e in out if isinstance(e, ToolCallDone)]
    assert [d.call for d in dones] == list(calls)
    assert stream.completion.finish_reason is FinishReason.TOOL_CALLS


async def test_live_arguments_decode_escapes(live_client: Client) -> None:
    stream = live_client.chat(script_request("write_file"), live_arguments=True)
    events, error = await drain(stream)
    assert error is None
    deltas = [e for e in events if isinstance(e, ArgumentDelta)]
    assert {(d.index, d.name) for d in deltas} == {(0, "write_file")}
    content = [d for d in deltas if d.field == "content"]
    assert len([d for d in content if d.text]) >= 5, "content should stream in pieces"
    text = "".join(d.text for d in content)
    assert text == WRITTEN["content"]
    assert all(c in text for c in ("\n", "\t", '"hello"', "\\ ")), "escapes decoded"
    assert [d.done for d in content] == [False] * (len(content) - 1) + [True]
    assert "".join(d.text for d in deltas if d.field == "path") == "out.txt"
    # Each ArgumentDelta follows the raw piece it decodes: the text so far never runs ahead.
    raw = ""
    for event in events:
        if isinstance(event, ToolCallDelta):
            raw += event.arguments
        elif isinstance(event, ArgumentDelta) and event.field == "content":
            assert json.dumps(event.text)[1:-1] in raw
    (call,) = stream.completion.tool_calls
    assert call.arguments == raw
    assert json.loads(call.arguments) == WRITTEN


async def test_argument_stream_of_a_tool(live_client: Client) -> None:
    """``stream.arguments(tool=...)`` read from another task while this one iterates."""
    stream = live_client.chat(script_request("write_file"))
    args = stream.arguments(tool="write_file")
    handle = args.field("content")

    pieces: list[str] = []
    read_all = anyio.Event()

    async def read() -> None:
        while (piece := await handle.delta()) is not None:
            pieces.append(piece)
        read_all.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        _, error = await drain(stream)
        assert error is None
        with anyio.fail_after(5):
            await read_all.wait()
    assert "".join(pieces) == WRITTEN["content"]
    assert args.fields["path"] == "out.txt"
    assert stream.completion.tool_calls[0].arguments == args.raw


async def test_taking_an_argument_stream_yields_no_argument_deltas(live_client: Client) -> None:
    """``ArgumentDelta`` events come with ``live_arguments`` only (``Client.chat``), whether
    the ArgumentStream was taken before the call started or while it streamed."""
    early = live_client.chat(script_request("write_file"))
    early_args = early.arguments(tool="write_file")
    early_events, error = await drain(early)
    assert error is None
    late = live_client.chat(script_request("write_file"))
    late_events = []
    async with late:
        async for event in late:
            late_events.append(event)
            if isinstance(event, ToolCallDelta) and event.index == 0 and event.id:
                late_args = late.arguments(0)
    assert early_args.fields == late_args.fields == WRITTEN
    assert not [e for e in late_events if isinstance(e, ArgumentDelta)]
    assert not [e for e in early_events if isinstance(e, ArgumentDelta)], (
        "arguments(tool=...) taken before the call started turned on ArgumentDelta events"
    )


# -- prompt progress, timings, usage ------------------------------------------------------
async def test_progress_timings_and_usage(
    live_client: Client, live_transport: TransportName, anyio_backend: str
) -> None:
    # A prompt of its own per run (the server's prompt cache would skip most of the progress).
    prompt = f"{anyio_backend} {live_transport}: " + "Please read this. " * 20  # ~370 tokens
    stream = live_client.chat(script_request("answer_no_thinking", [UserMessage(prompt)]))
    events, error = await drain(stream)
    assert error is None
    progress = [e for e in events if isinstance(e, Progress)]
    assert len(progress) >= 5
    first_output = next(i for i, e in enumerate(events) if not isinstance(e, Progress))
    assert all(isinstance(e, Progress) for e in events[:first_output])
    assert progress == events[:first_output], "progress comes before any output"
    assert progress[0].processed == progress[0].cache
    processed = [p.processed for p in progress]
    assert processed == sorted(set(processed))
    assert {(p.total, p.cache) for p in progress} == {(progress[0].total, progress[0].cache)}
    completion = stream.completion
    assert progress[-1].processed == progress[-1].total == completion.usage.prompt_tokens
    assert progress[-1].total > 300
    assert completion.usage.cached_tokens == progress[0].cache
    assert completion.content == "Done."
    assert_accounting(completion)


async def test_usage_counts_a_long_answer(live_client: Client) -> None:
    completion = await live_client.complete(script_request("long_answer", max_tokens=120))
    assert completion.finish_reason is FinishReason.LENGTH
    assert completion.content is not None
    assert completion.content.startswith("Counting: tick tock tick tock")
    assert completion.usage.completion_tokens == 120
    assert completion.reasoning_content == THINK
    assert completion.reasoning_tokens == 1
    assert_accounting(completion)


# -- thinking budget ------------------------------------------------------------------------
async def test_thinking_budget_ends_the_reasoning(
    base_url: str, live_transport: TransportName
) -> None:
    # The grace is wide: on this fast model (~600 tokens/s) the server acts on the control call
    # 30 to 70 tokens after the client read the 16th (the default grace is 64).
    config = live_config(base_url, live_transport, thinking_budget=16, thinking_grace=1000)
    async with Client(config) as client:
        stream = client.chat(script_request("endless_reasoning", max_tokens=4000))
        events, error = await drain(stream)
    assert error is None
    out = output(events)
    capped = [i for i, e in enumerate(out) if isinstance(e, ThinkingCapped)]
    assert len(capped) == 1, out
    (at,) = capped
    tokens = out[at].tokens  # type: ignore[union-attr]
    assert 16 <= tokens <= 18
    assert all(isinstance(e, Reasoning) for e in out[:at])
    assert text_of(out[at:], Content) == AFTER_REASONING_END
    completion = stream.completion
    assert completion.thinking_capped is True
    assert completion.finish_reason is FinishReason.STOP
    assert completion.content == AFTER_REASONING_END
    assert completion.reasoning_content is not None
    assert completion.reasoning_content.startswith("Hmm, still thinking. Hmm,")
    assert tokens <= completion.reasoning_tokens < 1000
    assert completion.usage.completion_tokens is not None
    assert completion.usage.completion_tokens < 1000, "the reasoning was not ended"


async def test_request_budget_overrides_config(base_url: str) -> None:
    """``thinking_budget`` on the request wins; 0 turns off the config's cap."""
    async with Client(live_config(base_url, thinking_budget=500, thinking_grace=1000)) as client:
        capped = await client.complete(
            script_request("endless_reasoning", max_tokens=4000, thinking_budget=6)
        )
        uncapped = await client.complete(
            script_request("endless_reasoning", max_tokens=40, thinking_budget=0)
        )
    assert capped.thinking_capped
    assert capped.content == AFTER_REASONING_END
    assert 6 <= capped.reasoning_tokens < 500
    assert not uncapped.thinking_capped
    assert uncapped.finish_reason is FinishReason.LENGTH
    assert uncapped.content is None
    assert uncapped.usage.completion_tokens == 40


async def test_the_servers_own_budget_ends_what_the_control_call_could_not(
    base_url: str, live_transport: TransportName
) -> None:
    """The control call refused (as a proxy's 404 would be): the body's backstop, budget +
    grace, ends the reasoning on the server, with no error, and ThinkingCapped says so."""
    config = live_config(base_url, live_transport, thinking_budget=8, thinking_grace=12)
    request = script_request(
        "endless_reasoning", max_tokens=2000, extra={"reasoning_control": False}
    )
    async with Client(config) as client:
        stream = client.chat(request)
        events, error = await drain(stream)
    assert error is None
    assert [e for e in events if isinstance(e, ThinkingCapped)] == [ThinkingCapped(8 + 12 - 1)]
    out = output(events)
    assert isinstance(out[out.index(ThinkingCapped(19)) + 1], Content)  # before the answer
    completion = stream.completion
    assert completion.thinking_capped
    assert completion.reasoning_tokens == 19
    assert completion.content == AFTER_REASONING_END


# A server that neither takes the control call nor applies the body's budget (the client
# sends reasoning_budget_tokens as a backstop; -1 is the server's "no budget").
DEAF = {"reasoning_control": False, "reasoning_budget_tokens": -1}


async def test_thinking_overrun_when_the_control_cannot_act(
    base_url: str, live_transport: TransportName
) -> None:
    """A request sent with ``reasoning_control: false`` and no server budget (via ``extra``):
    the server refuses the control call (so no ThinkingCapped), the reasoning goes on, and the
    client stops it after the grace."""
    config = live_config(base_url, live_transport, thinking_budget=8, thinking_grace=12)
    request = script_request(
        "endless_reasoning", max_tokens=2000, slot=1, extra=DEAF
    )
    async with Client(config) as client:
        events, error = await drain(client.chat(request))
        assert isinstance(error, ThinkingOverrunError), error
        assert "refused" in str(error)
        assert [e for e in events if isinstance(e, ThinkingCapped)] == []
        assert not [e for e in events if isinstance(e, Content)]
        partial = error.partial
        assert partial is not None
        assert partial.finish_reason is None
        assert partial.thinking_capped is False
        assert partial.content is None
        assert partial.reasoning_content is not None
        assert partial.reasoning_content.startswith(text_of(events, Reasoning))
        assert partial.reasoning_content.startswith("Hmm, still thinking. Hmm,")
        assert 8 + 12 < partial.reasoning_tokens <= 8 + 12 + 2
        await wait_idle(client, 1)  # the stream was closed: the server stopped generating


async def test_overrun_events_hold_all_the_partial_reasoning(base_url: str) -> None:
    """The events before a ThinkingOverrunError add up to its ``partial``: the reasoning piece
    of the payload that crossed the grace is yielded too, not only folded into the partial."""
    config = live_config(base_url, thinking_budget=8, thinking_grace=12)
    request = script_request(
        "endless_reasoning", max_tokens=2000, extra=DEAF
    )
    async with Client(config) as client:
        events, error = await drain(client.chat(request))
    assert isinstance(error, ThinkingOverrunError), error
    assert error.partial is not None
    assert error.partial.reasoning_content == text_of(events, Reasoning)


async def wait_idle(client: Client, slot: int, within: float = 2.0) -> float:
    """Seconds until ``GET /slots`` shows ``slot`` idle; fails after ``within``."""
    started = time.monotonic()
    while (await client.slots())[slot].is_processing:
        elapsed = time.monotonic() - started
        assert elapsed < within, f"slot {slot} still processing after {elapsed:.2f} s"
        await anyio.sleep(0.02)
    return time.monotonic() - started


# -- errors -----------------------------------------------------------------------------------
async def test_context_overflow(live_client: Client) -> None:
    request = script_request("reasoning_answer", [UserMessage("x" * 9000)])
    events, error = await drain(live_client.chat(request))
    assert events == []
    assert isinstance(error, ContextOverflowError), error
    assert error.status == 400
    assert error.n_ctx == 8192  # -c 16384 -np 2
    assert error.n_prompt_tokens > 9000
    assert error.partial is None
    assert json.loads(error.body)["error"]["type"] == "exceed_context_size_error"


# -- a multi-turn agent loop on the prompt cache --------------------------------------------
async def test_agent_loop_reuses_the_whole_previous_prompt(live_client: Client) -> None:
    """answer → tool call → results → answer ...: each turn re-sends ``Completion.message()``
    (and the tool results) on pinned slot 1.

    What it asserts, for this model kind (the scripted model: llama architecture, full
    attention): ``cache_n == previous prompt`` on every turn, exactly (measured: 1136 → 1208
    → 1372 → 1652 → 1724). The reused prefix is the whole previous prompt and stops where the
    echoed answer starts. Sliding-window models reuse less while the conversation is shorter
    than the window (previous prompt - 5 on Gemma 3): ``tests/live/test_gemma_cache.py``."""
    turns = [
        ("reasoning_answer", FinishReason.STOP),
        ("tool_call", FinishReason.TOOL_CALLS),
        ("two_tool_calls", FinishReason.TOOL_CALLS),
        ("reasoning_answer", FinishReason.STOP),
        ("write_file", FinishReason.TOOL_CALLS),
        ("reasoning_answer", FinishReason.STOP),
    ]
    messages: list[ChatMessage] = [UserMessage("Read notes.txt, then write out.txt.")]
    previous_prompt = 0
    for turn, (script, finish) in enumerate(turns):
        request = script_request(script, messages, tools=ALL_TOOLS, slot=1)
        stream = live_client.chat(request)
        events, error = await drain(stream)
        assert error is None, (turn, error)
        completion = stream.completion
        assert completion.finish_reason is finish, (turn, completion)
        timings = completion.timings
        assert timings is not None
        prompt = completion.usage.prompt_tokens
        assert prompt is not None
        if turn:
            assert prompt > previous_prompt
            assert timings.cache_n == previous_prompt, (turn, timings, previous_prompt)
            first = next(e for e in events if isinstance(e, Progress))
            assert first.cache == timings.cache_n
        previous_prompt = prompt
        messages.append(completion.message())
        for i, call in enumerate(completion.tool_calls):
            messages.append(ToolMessage(call.id, f"result {turn}.{i} of {call.name}"))
        if not completion.tool_calls:
            messages.append(UserMessage(f"Thanks. Next step {turn}?"))


async def test_llama_server_is_asked_to_close_after_it_closed_once(
    base_url: str, anyio_backend: str
) -> None:
    """llama-server announces keep-alive, then closes the connection after every streamed
    answer. Our transport sends the first chat without ``Connection: close``, sees the close,
    and asks for it up front from then on; back-to-back chats never meet a dead connection."""
    if anyio_backend != "asyncio":
        pytest.skip("the asyncio transport needs an asyncio event loop")
    transport = AsyncioTransport()
    async with Client(Config(base_url), transport=transport) as client:
        first = await client.chat(script_request("reasoning_answer")).collect()
        assert first.finish_reason is FinishReason.STOP
        with anyio.fail_after(5):
            while not transport._closers:  # noqa: ASYNC110 - the server's FIN arrives on its own
                await anyio.sleep(0.01)
        for _ in range(3):  # each right after the last: no stale connection in between
            completion = await client.chat(script_request("reasoning_answer")).collect()
            assert completion.content == first.content
    assert transport._closers == {("http", *_host_port(base_url))}


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname is not None
    return parts.hostname, parts.port or 80
