"""The scripted model against a real llama-server, read with plain httpx (not our client).

Each test proves one script or one server option behaves on the wire as
:mod:`devtools.scripts` and ``llama-server-wire.md`` say.
"""

from __future__ import annotations

import json
import re
import select
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio

from devtools.llama_server import LlamaServer
from devtools.rawhttp import RawExchange, build_request
from devtools.scripts import AFTER_REASONING_END, SCRIPTS, request_body
from tests.live.wire import Stream, read_stream

ID_RE = re.compile(r"^chatcmpl-[0-9A-Za-z]{32}$")
CALL_ID_RE = re.compile(r"^[0-9A-Za-z]{32}$")
ROLE = {"role": "assistant", "content": None}


@pytest_asyncio.fixture
async def client(base_url: str) -> AsyncIterator[httpx.AsyncClient]:
    # No keep-alive: the server closes the connection after every streamed response (see
    # test_server_closes_connection_after_stream), so a pooled connection would race its FIN.
    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=base_url, limits=limits) as c:
        yield c


async def run(client: httpx.AsyncClient, script: str, **extra: Any) -> Stream:
    stream = await read_stream(client, request_body(script, **extra))
    assert stream.status == 200, stream.raw
    return stream


def assert_sse_ok(stream: Stream) -> None:
    assert stream.headers["content-type"] == "text/event-stream"
    assert stream.headers["transfer-encoding"] == "chunked"
    assert stream.done
    assert stream.raw.endswith(b"data: [DONE]\n\n")
    assert len({e["id"] for e in stream.events}) == 1
    assert ID_RE.match(stream.events[0]["id"])
    assert stream.deltas[0] == ROLE
    for delta in stream.deltas:
        assert len(delta.keys() & {"content", "reasoning_content", "tool_calls"}) <= 1


@pytest.mark.asyncio
async def test_props_report_tool_support(client: httpx.AsyncClient) -> None:
    props = (await client.get("/props")).json()
    caps = props["chat_template_caps"]
    assert caps["supports_tool_calls"] is True
    assert caps["supports_tools"] is True


@pytest.mark.asyncio
async def test_reasoning_then_answer(client: httpx.AsyncClient) -> None:
    stream = await run(client, "reasoning_answer")
    assert_sse_ok(stream)
    script = SCRIPTS["reasoning_answer"]
    assert stream.text("reasoning_content") == script.reasoning
    assert stream.text("content") == script.content
    assert stream.finish_reasons == ["stop"]
    kinds = [k for d in stream.deltas if d != ROLE for k in d]
    assert kinds == sorted(kinds, key=["reasoning_content", "content"].index)


@pytest.mark.asyncio
async def test_answer_without_thinking(client: httpx.AsyncClient) -> None:
    stream = await run(client, "answer_no_thinking")
    assert_sse_ok(stream)
    assert stream.text("reasoning_content") == ""
    assert stream.text("content") == "Done."
    assert stream.finish_reasons == ["stop"]


@pytest.mark.asyncio
async def test_string_logit_bias_keys_do_not_select_script_tokens(
    client: httpx.AsyncClient,
) -> None:
    """String keys are tokenized into single characters, so only token ids pick a branch."""
    stream = await run(client, "reasoning_answer", logit_bias={"Done.": -100})
    assert stream.text("content") == "Done."


@pytest.mark.asyncio
async def test_one_tool_call_in_fragments(client: httpx.AsyncClient) -> None:
    stream = await run(client, "tool_call")
    assert_sse_ok(stream)
    assert stream.text("reasoning_content") == "Let me check the file."
    assert stream.text("content") == ""
    deltas = stream.tool_deltas()
    assert all(d["index"] == 0 for d in deltas)
    first, rest = deltas[0], deltas[1:]
    assert CALL_ID_RE.match(first["id"])
    assert first["type"] == "function"
    assert first["function"]["name"] == "read_file"
    assert len(rest) >= 2
    assert all(set(d) == {"index", "function"} for d in rest)
    assert all(set(d["function"]) == {"arguments"} for d in rest)
    call = stream.tool_calls()[0]
    assert json.loads(call["arguments"]) == {"path": "notes.txt"}
    assert stream.finish_reasons == ["tool_calls"]


@pytest.mark.asyncio
async def test_two_tool_calls(client: httpx.AsyncClient) -> None:
    stream = await run(client, "two_tool_calls")
    assert_sse_ok(stream)
    calls = stream.tool_calls()
    assert [calls[i]["name"] for i in sorted(calls)] == ["list_dir", "read_file"]
    assert json.loads(calls[0]["arguments"]) == {"path": "."}
    assert json.loads(calls[1]["arguments"]) == {"path": "notes.txt"}
    assert calls[0]["id"] != calls[1]["id"]
    assert sum(1 for d in stream.tool_deltas() if d["index"] == 1) >= 3
    assert stream.finish_reasons == ["tool_calls"]


@pytest.mark.asyncio
async def test_write_file_escaped_argument(client: httpx.AsyncClient) -> None:
    stream = await run(client, "write_file")
    assert_sse_ok(stream)
    (call,) = stream.tool_calls().values()
    assert call["name"] == "write_file"
    assert json.loads(call["arguments"]) == SCRIPTS["write_file"].tool_calls[0][1]
    assert len(stream.tool_deltas()) >= 5
    assert stream.finish_reasons == ["tool_calls"]


@pytest.mark.asyncio
async def test_endless_reasoning_stops_at_max_tokens(client: httpx.AsyncClient) -> None:
    stream = await run(client, "endless_reasoning", max_tokens=40)
    assert_sse_ok(stream)
    reasoning = stream.text("reasoning_content")
    assert reasoning.startswith("Hmm, still thinking. Hmm, still thinking.")
    assert stream.text("content") == ""
    assert stream.finish_reasons == ["length"]
    assert stream.last_timings["predicted_n"] == 40


@pytest.mark.asyncio
async def test_control_reasoning_end(client: httpx.AsyncClient, base_url: str) -> None:
    replies: list[dict[str, Any]] = []

    async def on_event(event: dict[str, Any]) -> None:
        delta = event["choices"][0]["delta"] if event.get("choices") else {}
        if "reasoning_content" in delta and not replies:
            body = {"id": event["id"], "action": "reasoning_end"}
            async with httpx.AsyncClient(base_url=base_url) as other:
                resp = await other.post("/v1/chat/completions/control", json=body)
            replies.append(resp.json())

    body = request_body("endless_reasoning", max_tokens=8000, reasoning_control=True)
    stream = await read_stream(client, body, on_event=on_event)
    assert replies == [{"success": True}]
    assert_sse_ok(stream)
    assert stream.text("reasoning_content").startswith("Hmm,")
    assert stream.text("content") == AFTER_REASONING_END
    assert stream.finish_reasons == ["stop"]
    assert stream.last_timings["predicted_n"] < 8000


@pytest.mark.asyncio
async def test_long_answer(client: httpx.AsyncClient) -> None:
    stream = await run(
        client, "long_answer", max_tokens=500, stream_options={"include_usage": True}
    )
    assert_sse_ok(stream)
    content = stream.text("content")
    assert content.startswith("Counting: tick tock tick tock")
    assert stream.finish_reasons == ["length"]
    assert stream.usage["completion_tokens"] == 500
    assert len([d for d in stream.deltas if "content" in d]) > 400


@pytest.mark.asyncio
async def test_return_progress(client: httpx.AsyncClient) -> None:
    prompt = "Please read this. " * 20  # ~360 tokens; the server runs with -b 64 -ub 64
    messages = [{"role": "user", "content": prompt}]
    stream = await run(client, "answer_no_thinking", messages=messages, return_progress=True)
    assert_sse_ok(stream)
    progress = [e for e in stream.events if "prompt_progress" in e]
    assert len(progress) >= 5
    first, last = progress[0]["prompt_progress"], progress[-1]["prompt_progress"]
    assert first["processed"] == first["cache"]
    assert last["processed"] == last["total"] > 300
    processed = [p["prompt_progress"]["processed"] for p in progress]
    assert processed == sorted(set(processed))
    assert all(p["choices"][0]["delta"] == ROLE for p in progress)
    assert stream.text("content") == "Done."


@pytest.mark.asyncio
async def test_timings_per_token(client: httpx.AsyncClient) -> None:
    stream = await run(client, "long_answer", max_tokens=10, timings_per_token=True)
    assert_sse_ok(stream)
    timed = [e for e in stream.chunks if "timings" in e]
    counts = [e["timings"]["predicted_n"] for e in timed]
    assert counts == sorted(counts)
    assert counts[-1] == 10
    content_events = [e for e in stream.chunks if e["choices"][0]["delta"].get("content")]
    assert content_events
    assert all("timings" in e for e in content_events)


@pytest.mark.asyncio
async def test_include_usage(client: httpx.AsyncClient) -> None:
    stream = await run(client, "reasoning_answer", stream_options={"include_usage": True})
    assert_sse_ok(stream)
    last = stream.events[-1]
    assert last["choices"] == []
    usage = last["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == last["timings"]["cache_n"]
    finish = stream.events[-2]
    assert finish["choices"][0]["finish_reason"] == "stop"
    assert "timings" not in finish
    assert "usage" not in finish


def assistant_echo(stream: Stream) -> dict[str, Any]:
    """The assistant message exactly as it streamed (content, reasoning, tool calls)."""
    message: dict[str, Any] = {"role": "assistant", "content": stream.text("content")}
    if reasoning := stream.text("reasoning_content"):
        message["reasoning_content"] = reasoning
    if calls := stream.tool_calls():
        message["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for _, c in sorted(calls.items())
        ]
    return message


@pytest.mark.asyncio
async def test_multi_turn_exact_echo_hits_prompt_cache(client: httpx.AsyncClient) -> None:
    """Raw HTTP, hand-built exact echo, pinned slot 0, the scripted model (full attention):
    ``cache_n == previous prompt`` on every turn, exactly. (Sliding-window models reuse
    previous prompt - 5 while the conversation is within the window: test_gemma_cache.py.)"""
    usage = {"include_usage": True}
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Read notes.txt please."}]
    tools = SCRIPTS["two_tool_calls"].fields["tools"]
    turns = ["tool_call", "reasoning_answer", "two_tool_calls", "reasoning_answer"]
    previous_prompt = 0
    for i, script in enumerate(turns):
        extra: dict[str, Any] = {"tools": tools, "id_slot": 0, "stream_options": usage}
        stream = await run(client, script, messages=messages, **extra)
        assert stream.finish_reasons, stream.raw
        timings, prompt_tokens = stream.last_timings, stream.usage["prompt_tokens"]
        if i:
            assert timings["cache_n"] == previous_prompt, (i, timings)
        previous_prompt = prompt_tokens
        echo = assistant_echo(stream)
        messages.append(echo)
        for call in echo.get("tool_calls", []):
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": "hello"})
        if "tool_calls" not in echo:
            messages.append({"role": "user", "content": "Thanks. Again?"})


@pytest.mark.asyncio
async def test_context_overflow_is_a_json_400(client: httpx.AsyncClient) -> None:
    messages = [{"role": "user", "content": "x" * 9000}]  # per-slot context is 8192
    stream = await read_stream(client, request_body("reasoning_answer", messages=messages))
    assert stream.status == 400
    assert stream.headers["content-type"].startswith("application/json")
    error = json.loads(stream.raw)["error"]
    assert error["type"] == "exceed_context_size_error"
    assert error["n_ctx"] == 8192
    assert error["n_prompt_tokens"] > 9000


def test_server_closes_connection_after_stream(live_server: LlamaServer) -> None:
    """The server closes the socket after a streamed response despite ``Keep-Alive``."""
    port = live_server.port
    for method, path, body, closed in [
        ("POST", "/v1/chat/completions", request_body("answer_no_thinking"), True),
        ("POST", "/v1/chat/completions", request_body("answer_no_thinking", stream=False), False),
        ("GET", "/health", None, False),
    ]:
        exchange = RawExchange(port, build_request(method, path, port, body), timeout=30)
        try:
            response = exchange.read_all()
            assert b"\r\nKeep-Alive: timeout=5, max=100\r\n" in response
            readable, _, _ = select.select([exchange.sock], [], [], 0.5)
            at_eof = bool(readable) and exchange.sock.recv(1) == b""
            assert at_eof == closed, (path, body)
        finally:
            exchange.close()


@pytest.mark.asyncio
async def test_control_without_live_completion(client: httpx.AsyncClient) -> None:
    stream = await run(client, "answer_no_thinking")
    control = {"id": stream.events[0]["id"], "action": "reasoning_end"}
    resp = await client.post("/v1/chat/completions/control", json=control)
    assert resp.json() == {"success": False, "message": "no active completion for this id"}
    resp = await client.post("/v1/chat/completions/control", json={"action": "reasoning_end"})
    assert resp.status_code == 400


@pytest.mark.asyncio
@pytest.mark.parametrize("name", sorted(SCRIPTS))
async def test_script_matches_its_documentation(client: httpx.AsyncClient, name: str) -> None:
    """Every entry of ``SCRIPTS`` streams what it says (endless ones: their start)."""
    script = SCRIPTS[name]
    stream = await run(client, name, max_tokens=30)
    assert_sse_ok(stream)
    assert stream.finish_reasons == [script.finish_reason]
    reasoning, content = stream.text("reasoning_content"), stream.text("content")
    if script.loop is None:
        assert reasoning == (script.reasoning or "")
        assert content == (script.content or "")
    else:
        assert reasoning.startswith(script.reasoning or "")
        assert content.startswith(script.content or "")
        assert (content or reasoning).count(script.loop.strip()) >= 5
    calls = stream.tool_calls()
    got = [(calls[i]["name"], json.loads(calls[i]["arguments"])) for i in sorted(calls)]
    assert got == list(script.tool_calls)
