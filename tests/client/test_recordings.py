"""Real llama-server exchanges (``recordings/*.http``) replayed, without a server.

For every streamed 200 response:

1. its SSE ``data:`` payloads go through ``Assembler`` and the Completion is compared with the
   independent reference decoder (``tests/reference.fold``); the in-band error stream must raise
   ``ServerError`` whose partial is the reference fold of the payloads before the error;
2. the raw body is replayed through respx with the httpx transport, whole, in the server's own
   chunks, every N bytes and at random boundaries: the events and the Completion (or error)
   are exactly the Assembler's, and the request the client sent is ``build_body``'s;
3. the recorded request body (built by hand by ``devtools.record``) is rebuilt as an equivalent
   ``ChatRequest``: ``build_body`` sends the same value for every recorded field, plus only the
   fields our conventions always send (``stream``, ``cache_prompt``, ...).

The error responses are replayed too (``ContextOverflowError`` with the numbers,
``HTTPStatusError`` with status and body, 503 ``Loading model`` → ``Waiting`` then whatever comes
next), and the thinking-control pair is replayed as a thinking-budget run. Every file must be a
real capture: ``Server: llama.cpp``, ``chatcmpl-`` ids of 32 characters, one id per stream.

``LLAMACLIENT_RECORDINGS=DIR`` runs all this against another directory, for example a fresh
``python -m devtools.record --out DIR``.
"""

from __future__ import annotations

import json
import os
import random
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import respx

from devtools.recording import Recording, load
from llamaclient import (
    Assembler,
    ChatEvent,
    ChatRequest,
    Client,
    Completion,
    Config,
    ContextOverflowError,
    HTTPStatusError,
    Reasoning,
    Resuming,
    ServerError,
    ThinkingCapped,
    ToolSchema,
    UserMessage,
    Waiting,
    build_body,
    from_openai,
)
from tests.conftest import drain
from tests.support.reference import fold

pytestmark = pytest.mark.anyio

DIRECTORY = Path(
    os.environ.get("LLAMACLIENT_RECORDINGS", Path(__file__).parents[2] / "recordings")
)
RECORDINGS: dict[str, Recording] = {p.stem: load(p) for p in sorted(DIRECTORY.glob("*.http"))}

STREAMED = (
    "answer_no_thinking",
    "inband_error",
    "logprobs_answer",
    "logprobs_tool_call",
    "long_answer",
    "progress",
    "reasoning_answer",
    "reasoning_length",
    "thinking_control",
    "timings_per_token",
    "tool_call",
    "tool_call_escaped",
    "two_tool_calls",
    "usage",
)
ERRORS = (
    "context_overflow",
    "image_unsupported",
    "loading_503",
    "logprobs_tools_refused",
    "not_found",
    "validation_error",
    "validation_error_500",
)
INFO = ("props", "slots")  # GET answers, replayed in test_server_info.py
CONTROL_CALL = "thinking_control_call"
RESUMED = ("resumed_cut", "resumed_rest")  # a cut stream and its rest (X-Conversation-Id)
CHAT_POSTS = (
    *STREAMED,
    "context_overflow",
    "image_unsupported",
    "loading_503",
    "logprobs_tools_refused",
    "validation_error",
    "validation_error_500",
)

BASE = "http://llama.test"
CHAT = "/v1/chat/completions"
CONTROL = "/v1/chat/completions/control"
ID_RE = re.compile(r"^chatcmpl-[0-9A-Za-z]{32}$")
ALWAYS_SENT = {
    "cache_prompt": True,
    "stream": True,
    "stream_options": {"include_usage": True},
    "return_progress": True,
    "timings_per_token": True,
    "reasoning_control": True,
}

TEST_CONFIG: dict[str, Any] = {
    "transport": "httpx",
    "connect_timeout": 2.0,
    "wait_timeout": 5.0,
    "stall_timeout": 5.0,
    "load_timeout": 5.0,
    "max_retries": 0,
}


# -- reading the recordings ------------------------------------------------------------------
def rec(name: str) -> Recording:
    return RECORDINGS[name]


def payloads(recording: Recording) -> list[str]:
    """The ``data:`` payload of every SSE event, the obvious way (no llamaclient code)."""
    out = []
    for event in recording.sse_events():
        assert event.startswith(b"data: "), event
        out.append(event[len(b"data: ") :].decode())
    return out


def is_error_payload(payload: str) -> bool:
    return payload != "[DONE]" and "error" in json.loads(payload)


def as_json(completion: Completion) -> dict[str, Any]:
    """The Completion as the reference decoder's JSON (without the fields it does not know)."""
    out: dict[str, Any] = json.loads(msgspec.json.encode(completion))
    out.pop("reasoning_tokens")
    out.pop("thinking_capped")
    out.pop("output")  # typed output: not part of the wire
    return out


class Folded(msgspec.Struct):
    """What the Assembler makes of a recording: events, then a Completion or an error."""

    events: list[ChatEvent]
    completion: Completion | None
    error: ServerError | None


def assemble(recording: Recording) -> Folded:
    asm = Assembler()
    events: list[ChatEvent] = []
    try:
        for payload in payloads(recording):
            events += asm.push(payload)
    except ServerError as exc:
        return Folded(events, None, exc)
    return Folded(events, asm.finish(), None)


def equivalent_request(body: dict[str, Any]) -> ChatRequest:
    """The ChatRequest that says what a hand-built recorded body says."""
    messages = from_openai(body["messages"])
    assert all(isinstance(message, UserMessage) for message in messages)
    tools = [
        ToolSchema(t["function"]["name"], t["function"]["description"], t["function"]["parameters"])
        for t in body.get("tools", [])
    ]
    bias: dict[int | str, float] | None = {
        int(k): v for k, v in body.get("logit_bias", {}).items()
    } or None
    thinking = body.get("chat_template_kwargs", {}).get("enable_thinking", True)
    modelled = {
        "messages",
        "tools",
        "logit_bias",
        "chat_template_kwargs",
        "max_tokens",
        "temperature",
        *ALWAYS_SENT,
    }
    # Not modelled by ChatRequest (or invalid on purpose, like tool_choice "bogus"): extra.
    extra = {k: v for k, v in body.items() if k not in modelled}
    return ChatRequest(
        messages,
        tools=tools,
        logit_bias=bias,
        thinking=thinking,
        max_tokens=body.get("max_tokens"),
        temperature=body.get("temperature"),
        extra=extra,
    )


def recorded_body(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(rec(name).request_body)
    return body


def request_for(name: str) -> ChatRequest:
    return equivalent_request(recorded_body(name))


# -- replaying through respx ----------------------------------------------------------------
Splitter = Callable[[bytes], list[bytes]]


def every(n: int) -> Splitter:
    return lambda body: [body[i : i + n] for i in range(0, len(body), n)]


def at_random(seed: int) -> Splitter:
    def split(body: bytes) -> list[bytes]:
        rng = random.Random(seed)
        cuts = sorted(rng.sample(range(1, len(body)), min(len(body) - 1, len(body) // 40 + 3)))
        return [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]

    return split


SPLITS: dict[str, Splitter | None] = {
    "server-chunks": None,
    "whole": lambda body: [body],
    "every-1": every(1),
    "every-7": every(7),
    "every-100": every(100),
    "random-0": at_random(0),
    "random-1": at_random(1),
}


def response(recording: Recording, split: Splitter | None = None) -> httpx.Response:
    """A fresh httpx.Response with the recorded status, headers and (de-chunked) body."""
    pieces = list(recording.chunks) if split is None else split(recording.body)
    assert b"".join(pieces) == recording.body

    async def body() -> AsyncIterator[bytes]:
        for piece in pieces:
            yield piece

    headers = [(k, v) for k, v in recording.headers if k.lower() != "transfer-encoding"]
    return httpx.Response(recording.status, headers=headers, content=body())


def responder(*recordings: Recording, split: Splitter | None = None) -> Callable[..., Any]:
    """A respx side effect answering with each recording in turn (the last one repeats)."""
    queue = list(recordings)

    def answer(request: httpx.Request) -> httpx.Response:
        current = queue.pop(0) if len(queue) > 1 else queue[0]
        return response(current, split)

    return answer



# -- the files are what they claim to be -----------------------------------------------------
def test_every_recording_is_classified() -> None:
    assert sorted(RECORDINGS) == sorted({*STREAMED, *ERRORS, CONTROL_CALL, *RESUMED, *INFO})


@pytest.mark.parametrize("name", sorted(RECORDINGS))
def test_recordings_are_real_captures(name: str) -> None:
    recording = rec(name)
    assert recording.meta["scenario"] == name
    for key in ("description", "server-flags", "server-build", "model", "recorded"):
        assert recording.meta.get(key), key
    assert recording.header("Server") == "llama.cpp"
    assert recording.raw_response.startswith(f"HTTP/1.1 {recording.status} ".encode())
    assert re.match(r"^(GET|POST) /\S* HTTP/1\.1$", recording.request_line)
    host = dict((k.lower(), v) for k, v in recording.request_headers)["host"]
    assert host.startswith("127.0.0.1:")
    if name in RESUMED:
        assert recording.status == 200
        assert recording.header("Content-Type") == "text/event-stream"
        assert recording.chunked
        ended = recording.raw_body.endswith(b"0\r\n\r\n")
        assert ended is (name == "resumed_rest")  # the cut one stops mid-body
    elif name in STREAMED:
        assert recording.status == 200
        assert recording.header("Content-Type") == "text/event-stream"
        assert recording.chunked
        assert recording.raw_body.endswith(b"0\r\n\r\n")
        chunks = [json.loads(p) for p in payloads(recording) if p != "[DONE]"]
        ids = {c["id"] for c in chunks if "error" not in c}
        assert len(ids) == 1, ids
        assert ID_RE.match(ids.pop())
        assert {c["model"] for c in chunks if "error" not in c} == {"scripted"}
        done = payloads(recording)[-1] == "[DONE]"
        assert done is (name != "inband_error")
    else:
        assert recording.header("Content-Type") == "application/json; charset=utf-8"
        assert not recording.chunked
        assert len(recording.body) == int(recording.header("Content-Length") or -1)
        json.loads(recording.body)


def test_control_call_names_the_recorded_stream() -> None:
    stream_id = json.loads(payloads(rec("thinking_control"))[0])["id"]
    assert recorded_body(CONTROL_CALL) == {"id": stream_id, "action": "reasoning_end"}
    assert json.loads(rec(CONTROL_CALL).body) == {"success": True}


# -- 1. the Assembler agrees with the reference decoder --------------------------------------
@pytest.mark.parametrize("name", STREAMED)
def test_assembler_matches_reference_decoder(name: str) -> None:
    texts = payloads(rec(name))
    folded = assemble(rec(name))
    if name == "inband_error":
        assert folded.completion is None
        assert folded.error is not None
        before = [p for p in texts if not is_error_payload(p)]
        assert texts[len(before)] == texts[-1], "the error is the last event"
        assert (folded.error.code, folded.error.type) == (500, "server_error")
        assert folded.error.message == "Context size has been exceeded."
        assert folded.error.partial is not None
        assert as_json(folded.error.partial) == fold(before)
        assert folded.error.partial.content
    else:
        assert folded.error is None
        assert folded.completion is not None
        assert as_json(folded.completion) == fold(texts)


# -- 2. the client, replayed through respx at every split --------------------------------------
@pytest.mark.parametrize("split", sorted(SPLITS))
@pytest.mark.parametrize("name", STREAMED)
async def test_client_replay_matches_assembler(name: str, split: str) -> None:
    expected = assemble(rec(name))
    config = Config(BASE, **TEST_CONFIG)
    request = request_for(name)
    async with respx.mock(base_url=BASE) as router, Client(config) as client:
        route = router.post(CHAT).mock(side_effect=responder(rec(name), split=SPLITS[split]))
        stream = client.chat(request)
        events, error = await drain(stream)
    assert route.call_count == 1
    sent = route.calls.last.request
    assert sent.content == build_body(config, request)
    assert sent.headers["connection"] == "close"
    assert events == expected.events
    if expected.error is None:
        assert error is None
        assert stream.completion == expected.completion
    else:
        assert isinstance(error, ServerError), error
        assert (error.message, error.code, error.type) == (
            expected.error.message,
            expected.error.code,
            expected.error.type,
        )
        assert error.partial == expected.error.partial


# -- 3. the recorded request bodies and build_body ---------------------------------------------
def normalized(key: str, value: Any) -> Any:
    if key == "logit_bias":  # {"364": -100.0} and [[364, -100.0]] both mean token id 364
        pairs = value.items() if isinstance(value, dict) else value
        return {int(k): float(v) for k, v in pairs}
    return value


@pytest.mark.parametrize("name", CHAT_POSTS)
def test_build_body_sends_what_was_recorded(name: str) -> None:
    recorded = recorded_body(name)
    ours = json.loads(build_body(Config(BASE), request_for(name)))
    for key, value in recorded.items():
        assert key in ours, key
        assert normalized(key, ours[key]) == normalized(key, value), key
    # What we send beyond the recorded body: only our always-sent fields, and thinking on
    # (the template's default, which the recorder relied on by leaving it out).
    conventions = {**ALWAYS_SENT, "chat_template_kwargs": {"enable_thinking": True}}
    added = {k: v for k, v in ours.items() if k not in recorded}
    assert added == {k: v for k, v in conventions.items() if k not in recorded}
    # The key rules: streamed, prompt cache on, progress/timings/control/usage asked for,
    # thinking stated explicitly, no slot unless pinned, logit_bias as [id, bias] pairs.
    for key, value in ALWAYS_SENT.items():
        assert ours[key] == value, key
    assert isinstance(ours["chat_template_kwargs"]["enable_thinking"], bool)
    assert "id_slot" not in ours
    if "logit_bias" in ours:
        assert all(isinstance(k, int) for k, _ in ours["logit_bias"])


def test_build_body_key_rules_with_a_slot() -> None:
    ours = json.loads(build_body(Config(BASE), ChatRequest([UserMessage("hi")], slot=1)))
    assert ours["id_slot"] == 1
    assert ours["chat_template_kwargs"] == {"enable_thinking": False}


# -- error responses ----------------------------------------------------------------------------
async def replay_error(name: str) -> tuple[list[ChatEvent], BaseException | None, int]:
    async with respx.mock(base_url=BASE) as router, Client(Config(BASE, **TEST_CONFIG)) as client:
        route = router.post(CHAT).mock(side_effect=responder(rec(name)))
        events, error = await drain(client.chat(request_for("reasoning_answer")))
        return events, error, route.call_count


async def test_context_overflow_replay() -> None:
    events, error, calls = await replay_error("context_overflow")
    body = json.loads(rec("context_overflow").body)["error"]
    assert (events, calls) == ([], 1)
    assert isinstance(error, ContextOverflowError), error
    assert error.status == 400
    assert (error.n_prompt_tokens, error.n_ctx) == (body["n_prompt_tokens"], body["n_ctx"])
    assert error.n_prompt_tokens > error.n_ctx > 0
    assert error.body == rec("context_overflow").body.decode()
    assert error.partial is None


@pytest.mark.parametrize("name", ["validation_error", "validation_error_500", "not_found"])
async def test_status_error_replay(name: str) -> None:
    events, error, calls = await replay_error(name)
    assert (events, calls) == ([], 1)  # never retried: 400, 404 and this 500 are final
    assert type(error) is HTTPStatusError, error
    assert error.status == rec(name).status
    assert error.body == rec(name).body.decode()
    assert error.partial is None
    # The envelope's fields, read from the real body (404's keys come in another order).
    envelope = json.loads(rec(name).body)["error"]
    assert (error.message, error.type, error.code) == (
        envelope["message"],
        envelope["type"],
        envelope["code"],
    )
    assert str(error) == f"HTTP {error.status} {error.type}: {error.message}"
    assert len(str(error)) < 200


async def test_not_found_on_a_helper() -> None:
    async with respx.mock(base_url=BASE) as router, Client(Config(BASE, **TEST_CONFIG)) as client:
        router.get("/props").mock(side_effect=responder(rec("not_found")))
        with pytest.raises(HTTPStatusError) as info:
            await client.props()
    assert info.value.status == 404
    assert json.loads(info.value.body) == json.loads(rec("not_found").body)


@pytest.mark.parametrize(
    "then", ["reasoning_answer", "tool_call", "inband_error", "context_overflow"]
)
async def test_loading_503_then_the_next_response(then: str) -> None:
    loading = rec("loading_503")
    assert json.loads(loading.body)["error"]["message"] == "Loading model"
    expected = assemble(rec(then)) if then in STREAMED else None
    async with respx.mock(base_url=BASE) as router, Client(Config(BASE, **TEST_CONFIG)) as client:
        chat = router.post(CHAT).mock(side_effect=responder(loading, rec(then)))
        health = router.get("/health").mock(
            side_effect=[
                response(loading),
                httpx.Response(200, json={"status": "ok"}),
            ]
        )
        events, error = await drain(client.chat(request_for(then)))
    assert (chat.call_count, health.call_count) == (2, 2)
    assert events[0] == Waiting(slot_busy=False)
    if expected is None:
        assert events == [Waiting(slot_busy=False)]
        assert isinstance(error, ContextOverflowError)
        return
    assert events[1:] == expected.events
    if expected.error is not None:
        assert isinstance(error, ServerError)
        assert error.partial == expected.error.partial
    else:
        assert error is None


# -- the thinking-control pair as a thinking-budget run -----------------------------------------
@pytest.mark.parametrize("split", ["server-chunks", "every-7"])
async def test_thinking_budget_replay_posts_the_recorded_control_call(split: str) -> None:
    stream_rec, call_rec = rec("thinking_control"), rec(CONTROL_CALL)
    expected = assemble(stream_rec)
    config = Config(BASE, **{**TEST_CONFIG, "thinking_budget": 1})
    async with respx.mock(base_url=BASE) as router, Client(config) as client:
        router.post(CHAT).mock(side_effect=responder(stream_rec, split=SPLITS[split]))
        control = router.post(CONTROL).mock(side_effect=responder(call_rec))
        stream = client.chat(request_for("thinking_control"))
        events, error = await drain(stream)
    assert error is None
    assert control.call_count == 1
    assert json.loads(control.calls.last.request.content) == recorded_body(CONTROL_CALL)
    first = next(i for i, e in enumerate(events) if isinstance(e, Reasoning))
    assert events[first + 1] == ThinkingCapped(1)
    assert [e for e in events if not isinstance(e, ThinkingCapped)] == expected.events
    assert expected.completion is not None
    assert stream.completion == msgspec.structs.replace(expected.completion, thinking_capped=True)


# -- 3. a resumed exchange ---------------------------------------------------------------------
async def test_a_recorded_resume_replays_to_the_whole_turn() -> None:
    """``resumed_cut`` (a stream the client cut) then ``resumed_rest`` (``GET /v1/stream`` from
    the byte offset): the client, cut at the same byte, resumes and ends with the Completion
    of the joined body, events neither lost nor repeated."""
    cut, rest = rec("resumed_cut"), rec("resumed_rest")
    conversation = dict((k.lower(), v) for k, v in cut.request_headers)["x-conversation-id"]
    offset = int(rest.meta["from"])
    assert offset == len(cut.body)
    assert rest.request_line == f"GET /v1/stream?conv_id={conversation}&from={offset} HTTP/1.1"
    whole = Assembler()
    expected: list[ChatEvent] = []
    for event in (cut.body + rest.body).split(b"\n\n"):
        if event.startswith(b"data: "):
            expected += whole.push(event[6:])
    completion = whole.finish()

    async def broken() -> AsyncIterator[bytes]:
        for piece in cut.chunks:
            yield piece
        raise httpx.ReadError("cut")

    headers = [(k, v) for k, v in cut.headers if k.lower() != "transfer-encoding"]
    gets: list[str] = []

    def rest_of(request: httpx.Request) -> httpx.Response:
        gets.append(str(request.url.params))
        return response(rest)

    config = Config(BASE, **{**TEST_CONFIG, "max_retries": 1})
    async with respx.mock(base_url=BASE) as router, Client(config) as client:
        router.post(CHAT).mock(return_value=httpx.Response(200, headers=headers, content=broken()))
        router.get("/v1/stream").mock(side_effect=rest_of)
        stream = client.chat(request_for("long_answer"))
        events, error = await drain(stream)
    assert error is None
    resumes = [e for e in events if isinstance(e, Resuming)]
    assert [(r.attempt, r.offset) for r in resumes] == [(1, offset)]
    assert [e for e in events if not isinstance(e, Resuming)] == expected
    assert stream.completion == completion
    assert gets == [f"conv_id={stream.conversation_id}&from={offset}"]
