"""``llamaclient.testing.FakeLlama``: the scripted in-process llama-server streams like the real
one (checked against the recordings' shapes), its faults end streams with the right typed
errors and partials, it decodes what was sent, and it replays every recording as our client
reads the same bytes from a socket."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llamaclient import (
    AssistantMessage,
    BusyError,
    ChatEvent,
    ChatMessage,
    ChatRequest,
    Completion,
    Content,
    ContextOverflowError,
    HTTPStatusError,
    InferError,
    Progress,
    Reasoning,
    Resuming,
    ServerError,
    StalledError,
    StreamClosedEarlyError,
    SystemMessage,
    ToolCall,
    ToolCallDelta,
    ToolCallDone,
    ToolMessage,
    ToolSchema,
    TransportError,
    UserMessage,
    Waiting,
)
from llamaclient.testing import FakeLlama, FakeRequest, Reply, load
from llamaclient.testing._wire import Answer, pieces, stream_chunks

pytestmark = pytest.mark.anyio

RECORDINGS = Path(__file__).resolve().parents[2] / "recordings"
READ_FILE = ToolSchema("read_file", "Read a file.", {"type": "object", "properties": {
    "path": {"type": "string"}}, "required": ["path"]})


async def run(
    fake: FakeLlama, request: ChatRequest | None = None, **config: Any
) -> tuple[list[ChatEvent], Completion | None, InferError | None]:
    """Stream one chat: its events, the Completion or the error."""
    events: list[ChatEvent] = []
    async with fake.client(**config) as client:
        stream = client.chat(request or ChatRequest([UserMessage("hi")]))
        try:
            async with stream:
                async for event in stream:
                    events.append(event)
        except InferError as exc:
            return events, None, exc
    return events, stream.completion, None


def texts(events: list[ChatEvent], kind: type[Content] | type[Reasoning]) -> list[str]:
    return [e.text for e in events if isinstance(e, kind)]


def test_pieces_are_words_or_fixed_sizes() -> None:
    assert pieces("Hello there,  world!\n", None) == ["Hello", " there,", "  world!", "\n"]
    assert pieces("abcdefg", 3) == ["abc", "def", "g"]
    assert pieces("", None) == []
    with pytest.raises(ValueError, match="chunk"):
        pieces("x", 0)


async def test_reply_streams_reasoning_then_content_word_by_word() -> None:
    fake = FakeLlama().reply("Hello there, world!", reasoning="Let me think.")
    events, completion, _ = await run(fake)
    assert texts(events, Reasoning) == ["Let", " me", " think."]
    assert texts(events, Content) == ["Hello", " there,", " world!"]
    progress = [e for e in events if isinstance(e, Progress)]
    assert [p.processed for p in progress] == [0, progress[0].total]
    assert completion is not None
    assert completion.content == "Hello there, world!"
    assert completion.reasoning_content == "Let me think."
    assert completion.finish_reason == "stop"
    assert completion.model == "fake-model"
    assert completion.id.startswith("chatcmpl-")
    assert len(completion.id) == len("chatcmpl-") + 32
    assert completion.usage.completion_tokens == 6
    assert completion.timings is not None
    assert completion.timings.predicted_n == 6


async def test_chunk_sets_the_piece_size_and_each_piece_is_one_http_chunk() -> None:
    fake = FakeLlama().reply("abcdefgh", chunk=3)
    response = await fake.transport().send(
        "POST", fake.url + "/v1/chat/completions", {},
        json.dumps({"messages": [], "stream": True}).encode(),
    )
    assert response.status == 200
    assert response.header("content-type") == "text/event-stream"
    reads = []
    while data := await response.read():
        reads.append(data)
    first = reads[0].decode()
    # llama-server's first token chunk: the role delta and the token's delta together
    assert first.count("data: ") == 2
    assert '"delta":{"role":"assistant","content":null}' in first
    assert '"delta":{"content":"abc"}' in first
    assert [r.count(b"data: ") for r in reads] == [2, 1, 1, 1, 1]
    assert reads[-1] == b"data: [DONE]\n\n"
    assert b'"finish_reason":"stop"' in reads[-2]


async def test_tool_calls_arrive_like_llama_servers() -> None:
    fake = FakeLlama().reply(
        reasoning="Files.",
        tool_calls=[{"name": "read_file", "arguments": {"path": "notes.txt"}, "id": "call-1"},
                    ToolCall("call-2", "list_dir", '{"path": "."}')],
        chunk=4,
    )
    events, completion, _ = await run(fake, ChatRequest([UserMessage("hi")], tools=[READ_FILE]))
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert deltas[0] == ToolCallDelta(0, "call-1", "read_file", '{"pa')
    assert all(d.id is None and d.name is None for d in deltas[1:] if d.index == 0)
    done = [e for e in events if isinstance(e, ToolCallDone)]
    assert [d.call for d in done] == [ToolCall("call-1", "read_file", '{"path": "notes.txt"}'),
                                      ToolCall("call-2", "list_dir", '{"path": "."}')]
    assert completion is not None
    assert completion.finish_reason == "tool_calls"
    assert completion.tool_calls == tuple(d.call for d in done)


async def test_generated_call_ids_are_llama_server_shaped() -> None:
    fake = FakeLlama().reply(tool_calls=[{"name": "read_file", "arguments": "{}"}])
    _, completion, _ = await run(fake)
    assert completion is not None
    call_id = completion.tool_calls[0].id
    assert len(call_id) == 32
    assert call_id.isalnum()


async def test_max_tokens_cuts_the_answer_with_finish_length() -> None:
    fake = FakeLlama().reply("one two three four")
    _, completion, _ = await run(fake, ChatRequest([UserMessage("hi")], max_tokens=2))
    assert completion is not None
    assert (completion.content, completion.finish_reason) == ("one two", "length")


async def test_requests_are_decoded() -> None:
    fake = FakeLlama().reply("ok")
    call = ToolCall("c1", "read_file", '{"path": "a"}')
    messages: list[ChatMessage] = [SystemMessage("Be brief."), UserMessage("hi"),
                AssistantMessage(None, "hm", (call,)), ToolMessage("c1", "text")]
    request = ChatRequest(messages, tools=[READ_FILE], max_tokens=9, temperature=0.5,
                          thinking=True)
    await run(fake, request)
    sent = fake.requests[0]
    assert sent.messages == messages
    assert sent.last == ToolMessage("c1", "text")
    assert sent.tools == [READ_FILE]
    assert sent.settings["max_tokens"] == 9
    assert sent.settings["temperature"] == 0.5
    assert sent.settings["chat_template_kwargs"] == {"enable_thinking": True}
    assert "messages" not in sent.settings
    assert sent.headers["content-type"] == "application/json"


async def test_exact_echo_reuses_the_whole_previous_prompt() -> None:
    fake = FakeLlama().reply("First answer.", reasoning="Think.").reply("Second.").reply("3")
    first = [UserMessage("hi")]
    _, one, _ = await run(fake, ChatRequest(first))
    assert one is not None
    _, two, _ = await run(fake, ChatRequest([*first, one.message(), UserMessage("more")]))
    assert two is not None
    assert two.timings is not None
    assert one.timings is not None
    assert two.timings.cache_n > one.timings.prompt_n  # the echo hit the cache too
    # an echo that dropped the reasoning misses from there on
    wrong = AssistantMessage("Second.")
    _, three, _ = await run(fake, ChatRequest(
        [*first, one.message(), UserMessage("more"), wrong, UserMessage("x")]))
    assert three is not None
    assert three.timings is not None
    assert three.timings.cache_n > two.timings.cache_n  # the right prefix still hits
    fake.reply("4")
    _, four, _ = await run(fake, ChatRequest([*first, AssistantMessage("First answer."),
                                              UserMessage("more")]))
    assert four is not None
    assert four.timings is not None
    assert four.timings.cache_n < two.timings.cache_n


async def test_cut_after_ends_with_the_tokens_before_the_cut() -> None:
    fake = FakeLlama().fail(cut_after=2).reply("one two three four")
    events, _, error = await run(fake)
    assert type(error) is StreamClosedEarlyError
    assert texts(events, Content) == ["one", " two"]
    assert error.partial is not None
    assert error.partial.content == "one two"


async def test_cut_after_zero_breaks_before_the_first_token() -> None:
    fake = FakeLlama().fail(cut_after=0).reply("one two")
    events, _, error = await run(fake)
    assert type(error) is StreamClosedEarlyError
    assert texts(events, Content) == []


async def test_a_resumable_fake_picks_a_cut_stream_up() -> None:
    fake = FakeLlama(resumable=True).fail(cut_after=2).reply("one two three four")
    events, completion, error = await run(fake)
    assert error is None
    assert completion is not None
    assert completion.content == "one two three four"
    assert texts(events, Content) == ["one", " two", " three", " four"]
    assert any(isinstance(e, Resuming) for e in events)
    assert ("GET", "/v1/stream") in [(c.method, c.path) for c in fake.calls]


async def test_stall_fires_the_stall_timeout() -> None:
    fake = FakeLlama().fail(stall=True, cut_after=1).reply("one two")
    events, _, error = await run(fake, stall_timeout=0.05)
    assert type(error) is StalledError
    assert texts(events, Content) == ["one"]


async def test_error_alone_is_an_http_500() -> None:
    fake = FakeLlama().fail(error="out of memory").reply("after")
    _, _, error = await run(fake)
    assert type(error) is HTTPStatusError
    assert error.status == 500
    assert "out of memory" in error.body
    _, completion, _ = await run(fake)  # the reply queued after it is the next answer
    assert completion is not None
    assert completion.content == "after"


async def test_error_after_tokens_is_in_band() -> None:
    fake = FakeLlama().fail(error="Context size has been exceeded.", cut_after=1).reply("a b c")
    events, _, error = await run(fake)
    assert isinstance(error, ServerError)
    assert error.message == "Context size has been exceeded."
    assert texts(events, Content) == ["a"]
    assert error.partial is not None
    assert error.partial.content == "a"


async def test_loading_waits_then_answers() -> None:
    fake = FakeLlama().fail(loading=0.01).reply("ready")
    events, completion, _ = await run(fake)
    assert Waiting(slot_busy=False) in events
    assert completion is not None
    assert completion.content == "ready"
    assert len(fake.requests) == 2  # the 503'd request, then the same one again
    assert fake.requests[0].body == fake.requests[1].body


async def test_busy_slot_waits_or_raises() -> None:
    fake = FakeLlama().reply("ok")
    fake.busy = {0}  # another client's
    events, completion, _ = await run(fake, ChatRequest([UserMessage("hi")], slot=0))
    assert Waiting(slot_busy=True) in events
    assert completion is not None
    _, _, error = await run(fake, ChatRequest([UserMessage("hi")], slot=0, wait=False))
    assert type(error) is BusyError


async def test_no_reply_queued_says_so() -> None:
    _, _, error = await run(FakeLlama())
    assert type(error) is HTTPStatusError
    assert "fake.reply" in error.body


async def test_helper_endpoints_answer() -> None:
    fake = FakeLlama(n_ctx=8192, n_slots=2)
    transport = fake.transport()

    async def get(path: str) -> Any:
        response = await transport.send("GET", fake.url + path, {}, None)
        assert response.status == 200
        return json.loads(await response.aread())

    assert await get("/health") == {"status": "ok"}
    props = await get("/props")
    slots = await get("/slots")
    assert props["default_generation_settings"]["n_ctx"] == 4096  # a slot's, as llama-server says
    assert props["total_slots"] == 2
    assert [s["id"] for s in slots] == [0, 1]


async def test_a_whole_answer_when_not_streamed() -> None:
    fake = FakeLlama().reply("whole", reasoning="r")
    response = await fake.transport().send(
        "POST", fake.url + "/v1/chat/completions", {},
        json.dumps({"messages": [{"role": "user", "content": "x"}], "stream": False}).encode(),
    )
    body = json.loads(await response.aread())
    assert body["choices"][0]["message"]["content"] == "whole"
    assert body["choices"][0]["message"]["reasoning_content"] == "r"
    assert body["object"] == "chat.completion"


# -- replay ---------------------------------------------------------------------------------
STREAMS = sorted(p for p in RECORDINGS.glob("*.http")
                 if load(p).request_line.startswith("POST /v1/chat/completions ")
                 and not p.name.startswith(("resumed", "loading")))


@pytest.mark.parametrize("path", STREAMS, ids=lambda p: p.stem)
async def test_replay_gives_what_the_recorded_bytes_give(path: Path) -> None:
    """Each recorded chat answer, replayed, reads as the recording's body says: the same
    content, reasoning and calls (or the same error)."""
    rec = load(path)
    fake = FakeLlama().replay(path)
    events, completion, error = await run(fake)
    if rec.status != 200:  # an HTTPStatusError, or a typed error that keeps the status
        assert isinstance(error, InferError)
        assert getattr(error, "status", None) == rec.status
        return
    wire = [json.loads(e[6:]) for e in rec.sse_events() if e.startswith(b"data: {")]
    content = "".join(c["choices"][0]["delta"].get("content") or ""
                      for c in wire if c.get("choices") and "delta" in c["choices"][0])
    if any("error" in c for c in wire):
        assert isinstance(error, ServerError)
        assert error.partial is not None
        assert (error.partial.content or "") == content
        return
    assert error is None, error
    assert completion is not None
    assert (completion.content or "") == content
    assert "".join(texts(events, Content)) == content


async def test_replay_of_the_overflow_is_a_context_overflow() -> None:
    fake = FakeLlama().replay(RECORDINGS / "context_overflow.http")
    _, _, error = await run(fake)
    assert isinstance(error, ContextOverflowError)


async def test_replay_of_the_loading_answer_waits_for_the_next() -> None:
    fake = FakeLlama().replay(RECORDINGS / "loading_503.http").reply("loaded")
    events, completion, _ = await run(fake)
    assert Waiting(slot_busy=False) in events
    assert completion is not None
    assert completion.content == "loaded"


async def test_replay_of_a_cut_recording_breaks() -> None:
    fake = FakeLlama().replay(RECORDINGS / "resumed_cut.http")
    events, _, error = await run(fake)
    assert type(error) is StreamClosedEarlyError
    assert texts(events, Content)


# -- any answer arrives whole -------------------------------------------------------------
TEXT = st.text(st.characters(codec="utf-8"), max_size=40)


@settings(max_examples=60, deadline=None)
@given(content=TEXT, reasoning=TEXT, args=TEXT, chunk=st.none() | st.integers(1, 7))
def test_any_answer_arrives_whole_in_its_pieces(
    content: str, reasoning: str, args: str, chunk: int | None
) -> None:
    """Whatever the text and the piece size, the Completion is exactly what was scripted and
    the events' pieces join to it (our client reads the fake's bytes like a server's)."""
    call = ToolCall("id-1", "f", args)
    fake = FakeLlama().reply(content or None, reasoning=reasoning or None, tool_calls=[call],
                             chunk=chunk)
    events, completion, error = anyio.run(run, fake)
    assert error is None
    assert completion is not None
    assert completion.content == (content or None)
    assert completion.reasoning_content == (reasoning or None)
    assert completion.tool_calls == (call,)
    assert "".join(texts(events, Content)) == content
    assert "".join(texts(events, Reasoning)) == reasoning
    assert "".join(e.arguments for e in events if isinstance(e, ToolCallDelta)) == args


# -- what was sent, with every field --------------------------------------------------------
async def test_requests_keep_the_names_of_every_message() -> None:
    fake = FakeLlama().reply("ok")
    call = ToolCall("c1", "read_file", '{"path": "a"}')
    messages: list[ChatMessage] = [
        SystemMessage("Be brief.", name="rules"),
        UserMessage("hi", name="ada"),
        AssistantMessage(None, "hm", (call,), name="helper", reasoning_field="reasoning"),
        ToolMessage("c1", "text", name="read_file"),
    ]
    await run(fake, ChatRequest(messages, tools=[READ_FILE]))
    assert fake.requests[0].messages == messages


async def test_a_message_the_library_does_not_model_stays_a_dict() -> None:
    fake = FakeLlama().reply("ok")
    response = await fake.transport().send(
        "POST", fake.url + "/v1/chat/completions", {},
        json.dumps({"messages": [{"role": "critic", "content": "x"}, 7], "stream": True}).encode(),
    )
    await response.aread()
    assert fake.requests[0].messages == [{"role": "critic", "content": "x"}, {"raw": 7}]


# -- timing: a slow prefill and paced chunks ------------------------------------------------
def stamped(events: list[tuple[float, ChatEvent]], kind: type[Any]) -> list[float]:
    return [t for t, e in events if isinstance(e, kind)]


async def timed(fake: FakeLlama, **config: Any) -> tuple[list[tuple[float, ChatEvent]],
                                                           InferError | None]:
    """Stream one chat; each event with the seconds since the chat began."""
    events: list[tuple[float, ChatEvent]] = []
    async with fake.client(**config) as client:
        start = anyio.current_time()
        try:
            async with client.chat(ChatRequest([UserMessage("Summarise " * 20)])) as stream:
                async for event in stream:
                    events.append((anyio.current_time() - start, event))
        except InferError as exc:
            return events, exc
    return events, None


EARLY = 0.002  # a timer may fire this much before its deadline


async def test_a_slow_prefill_sends_progress_events_over_it_then_the_answer() -> None:
    fake = FakeLlama().fail(prefill=0.4).reply("Done.")
    events, error = await timed(fake, stall_timeout=0.2)  # a batch every 0.1 s: no stall
    assert error is None
    progress = [e for _, e in events if isinstance(e, Progress)]
    total = progress[0].total
    assert [p.processed for p in progress] == [0, -(-total // 4), -(-total // 2),
                                               -(-total * 3 // 4), total]
    assert [p.time_ms for p in progress] == [0.0, 100.0, 200.0, 300.0, 400.0]
    for t, due in zip(stamped(events, Progress), [0.0, 0.1, 0.2, 0.3, 0.4], strict=True):
        assert t >= due - EARLY
    assert stamped(events, Content)[0] >= 0.4 - EARLY


async def test_the_prefill_shows_in_the_timings() -> None:
    fake = FakeLlama().fail(prefill=0.2).reply("Done.")
    _, completion, _ = await run(fake)
    assert completion is not None
    assert completion.timings is not None
    assert completion.timings.prompt_ms == 200.0
    assert completion.timings.prompt_per_second == pytest.approx(completion.timings.prompt_n / 0.2)


async def test_slow_prefill_chunks_are_shaped_like_llama_servers() -> None:
    """Each progress chunk is one event: the role delta and ``prompt_progress`` with the
    recording's keys in its order (wire notes 1.3, 1.4; recordings/progress.http)."""
    recorded = load(RECORDINGS / "progress.http")
    first = json.loads(recorded.sse_events()[0][6:])
    fake = FakeLlama().fail(prefill=0.01).reply("Hi")
    body = {"messages": [{"role": "user", "content": "x" * 100}], "stream": True,
            "return_progress": True}
    response = await fake.transport().send(
        "POST", fake.url + "/v1/chat/completions", {}, json.dumps(body).encode())
    reads = []
    while data := await response.read():
        reads.append(data)
    progress = [json.loads(r[6:]) for r in reads[:5]]
    assert all(r.count(b"data: ") == 1 for r in reads[:5])
    assert [list(p) for p in progress] == [list(first)] * 5
    assert [list(p["prompt_progress"]) for p in progress] == [list(first["prompt_progress"])] * 5
    assert all(p["choices"] == first["choices"] for p in progress)
    assert b'"content":"Hi"' in reads[5]


async def test_a_slow_prefill_without_progress_is_silence_then_the_answer() -> None:
    fake = FakeLlama().fail(prefill=0.2).reply("Hi")
    body = {"messages": [{"role": "user", "content": "x"}], "stream": True}
    response = await fake.transport().send(
        "POST", fake.url + "/v1/chat/completions", {}, json.dumps(body).encode())
    start = anyio.current_time()
    first = await response.read()
    assert anyio.current_time() - start >= 0.2 - EARLY
    assert b"prompt_progress" not in first
    assert b'"content":"Hi"' in first


async def test_a_prefill_longer_than_the_stall_timeout_stalls_without_progress() -> None:
    fake = FakeLlama().fail(prefill=0.5).reply("Hi")
    body = {"messages": [{"role": "user", "content": "x"}], "stream": True}
    response = await fake.transport().send(
        "POST", fake.url + "/v1/chat/completions", {}, json.dumps(body).encode(),
        read_timeout=0.1,
    )
    with pytest.raises(TransportError) as info:
        await response.read()
    assert info.value.kind == "stall"


async def test_an_error_with_a_prefill_comes_in_band_when_the_prefill_ends() -> None:
    fake = FakeLlama().fail(prefill=0.1, error="failed to decode the batch").reply("never")
    events, error = await timed(fake)
    assert isinstance(error, ServerError)
    assert error.message == "failed to decode the batch"
    assert len(stamped(events, Progress)) == 5
    assert stamped(events, Content) == []


async def test_pace_spaces_the_chunks_of_the_answer() -> None:
    fake = FakeLlama().reply("one two three", pace=0.05)
    events, error = await timed(fake)
    assert error is None
    for t, due in zip(stamped(events, Content), [0.05, 0.10, 0.15], strict=True):
        assert t >= due - EARLY


def test_each_chunk_is_due_after_the_prefill_and_its_pace() -> None:
    """The schedule itself: progress over the prefill, then each token and the finish chunk
    its pace after the one before (none past the end of a list), ``[DONE]`` with the finish."""
    answer = Answer("one two three", pace=(0.0, 0.1))
    body = {"stream": True, "return_progress": True}
    chunks = stream_chunks(answer, body, completion_id="c", model="m", total=8, cache=0,
                           created=0, prefill=0.4)
    # five progress chunks, three tokens, the finish chunk, [DONE]
    assert [c.tokens for c in chunks] == [0, 0, 0, 0, 0, 1, 2, 3, 3, 3]
    assert [c.at for c in chunks] == pytest.approx(
        [0.0, 0.1, 0.2, 0.3, 0.4, 0.4, 0.5, 0.5, 0.5, 0.5])


async def test_pace_per_chunk_delays_only_the_chunks_it_names() -> None:
    fake = FakeLlama().reply("one two three", pace=[0, 0.1])
    events, _ = await timed(fake)
    _, two, three = stamped(events, Content)
    assert two >= 0.1 - EARLY
    assert three >= two


async def test_a_pause_longer_than_the_stall_timeout_is_a_stall() -> None:
    fake = FakeLlama().reply("one two three", pace=[0, 0, 5.0])
    events, error = await timed(fake, stall_timeout=0.1)
    assert type(error) is StalledError
    assert [e.text for _, e in events if isinstance(e, Content)] == ["one", " two"]
    assert error.partial is not None
    assert error.partial.content == "one two"


async def test_pace_shows_in_the_timings() -> None:
    fake = FakeLlama().reply("one two", pace=0.05)
    _, completion, _ = await run(fake)
    assert completion is not None
    assert completion.timings is not None
    assert completion.timings.predicted_ms == 100.0
    assert completion.timings.predicted_per_second == pytest.approx(20.0)


async def test_a_cut_comes_when_the_chunk_it_replaces_was_due() -> None:
    fake = FakeLlama().fail(cut_after=1).reply("one two", pace=0.1)
    start = anyio.current_time()
    events, error = await timed(fake)
    assert type(error) is StreamClosedEarlyError
    assert [e for _, e in events if isinstance(e, Content)] == [Content("one")]
    assert anyio.current_time() - start >= 0.2 - EARLY  # when " two" was due


async def test_a_whole_answer_comes_once_the_stream_would_have_ended() -> None:
    fake = FakeLlama().fail(prefill=0.1).reply("one two", pace=0.05)
    response = await fake.transport().send(
        "POST", fake.url + "/v1/chat/completions", {},
        json.dumps({"messages": [], "stream": False}).encode(),
    )
    start = anyio.current_time()
    body = json.loads(await response.aread())
    assert anyio.current_time() - start >= 0.25 - EARLY  # 0.1 + two tokens + the end
    assert body["choices"][0]["message"]["content"] == "one two"


def test_timing_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="pace"):
        FakeLlama().reply("x", pace=-1)
    with pytest.raises(ValueError, match="pace"):
        Reply("x", pace=[0.1, -0.1])
    with pytest.raises(ValueError, match="prefill"):
        FakeLlama().fail(prefill=-0.5)
    with pytest.raises(ValueError, match="chunk"):
        Reply("x", chunk=0)


# -- replies computed from the request -------------------------------------------------------
async def test_a_reply_function_answers_every_request_from_what_was_sent() -> None:
    def model(request: FakeRequest) -> Reply:
        if isinstance(request.last, ToolMessage):
            return Reply(f"The file says {request.last.content}")
        return Reply(tool_calls=[{"id": "c1", "name": "read_file", "arguments": {"path": "a"}}])

    fake = FakeLlama().reply(model)
    _, first, _ = await run(fake, ChatRequest([UserMessage("read a")], tools=[READ_FILE]))
    assert first is not None
    assert first.tool_calls == (ToolCall("c1", "read_file", '{"path": "a"}'),)
    history: list[ChatMessage] = [
        UserMessage("read a"), first.message(), ToolMessage("c1", "hello")]
    _, second, _ = await run(fake, ChatRequest(history, tools=[READ_FILE]))
    assert second is not None
    assert second.content == "The file says hello"
    assert fake.pending == 1  # it stays: it answers every request that reaches it


async def test_a_reply_function_hands_over_when_it_returns_none() -> None:
    seen: list[str] = []

    def twice(request: FakeRequest) -> str | None:
        seen.append(str(request.settings.get("max_tokens")))
        return "from the function" if len(seen) <= 2 else None

    fake = FakeLlama().reply(twice).reply(Reply("queued after it"))
    answers = []
    for n in range(3):
        _, completion, _ = await run(fake, ChatRequest([UserMessage("hi")], max_tokens=10 + n))
        assert completion is not None
        answers.append(completion.content)
    assert answers == ["from the function", "from the function", "queued after it"]
    assert seen == ["10", "11", "12"]
    assert fake.pending == 0


async def test_a_fault_before_a_reply_function_applies_to_its_answers() -> None:
    fake = FakeLlama().fail(cut_after=1).reply(lambda request: "one two three")
    for _ in range(2):
        _, _, error = await run(fake)
        assert type(error) is StreamClosedEarlyError


async def test_a_reply_function_returning_something_else_is_a_type_error() -> None:
    fake = FakeLlama().reply(lambda request: 42)  # type: ignore[arg-type, return-value]
    with pytest.raises(TypeError, match="Reply, a str or None"):
        await run(fake)


def test_a_reply_object_or_function_comes_alone() -> None:
    with pytest.raises(ValueError, match="alone"):
        FakeLlama().reply(Reply("x"), chunk=2)
    with pytest.raises(ValueError, match="alone"):
        FakeLlama().reply(lambda request: "x", pace=0.1)


async def test_a_reply_object_streams_as_its_arguments_would() -> None:
    fake = FakeLlama().reply(Reply("abcdef", reasoning="r", chunk=2))
    events, completion, _ = await run(fake)
    assert texts(events, Content) == ["ab", "cd", "ef"]
    assert completion is not None
    assert completion.reasoning_content == "r"
