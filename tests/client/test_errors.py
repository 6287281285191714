"""Each client error comes from its own condition, with the partial completion intact; the
timeouts fire when they should and not otherwise (pings, a slow consumer), and the helper
requests (``/slots``, ``/health``) are bounded too.

Every test runs over both transports (``transport`` fixture), against the fault server or a
refused port.
"""

from __future__ import annotations

import asyncio
import json
import time

import anyio
import pytest

from llamaclient import (
    AuthenticationError,
    BusyError,
    ChatEvent,
    Client,
    ConnectError,
    Content,
    ContextOverflowError,
    FinishReason,
    HTTPStatusError,
    LoadTimeoutError,
    Reasoning,
    Retrying,
    ServerError,
    StalledError,
    StreamClosedEarlyError,
    Waiting,
    WaitTimeoutError,
)
from tests.conftest import CHAT, ClientFactory, TransportName, drain, make_config, user
from tests.support.faultserver import (
    DEFAULT_ID,
    PING,
    Chunk,
    Close,
    End,
    FaultServer,
    Hold,
    Json,
    Reset,
    Response,
    Sleep,
    Status,
    Step,
    chat_chunks,
    error_body,
    error_event,
    refused_url,
    stream,
)

pytestmark = pytest.mark.anyio

LOADING = {"error": {"message": "Loading model", "type": "unavailable_error", "code": 503}}


def chat_requests(server: FaultServer) -> int:
    return sum(1 for r in server.requests if r.path == CHAT)


# -- non-2xx answers -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("status", "body", "content_type"),
    [
        (500, json.dumps(error_body(500, "Unknown reasoning format: x")), "application/json"),
        (400, json.dumps(error_body(400, "Invalid tool_choice: x")), "application/json"),
        (401, json.dumps(error_body(401, "Invalid API Key")), "application/json"),
        (500, "proxy error: connection refused", "text/plain"),
        (404, "", None),
    ],
)
async def test_non_2xx_raises_http_status_error_with_status_and_body(
    server: FaultServer,
    make_client: ClientFactory,
    status: int,
    body: str,
    content_type: str | None,
) -> None:
    server.route("POST", CHAT, [Response(status, body.encode(), content_type=content_type)])
    events, error = await drain(make_client().chat(user()))
    assert events == []
    assert type(error) is (AuthenticationError if status == 401 else HTTPStatusError)
    assert error.status == status
    assert error.body == body
    assert error.partial is None
    assert f"HTTP {status}" in str(error)
    assert chat_requests(server) == 1


@pytest.mark.parametrize("status", [400, 401, 404, 500, 503])
async def test_a_non_2xx_answer_sends_no_cancel_after_it(
    server: FaultServer, make_client: ClientFactory, status: int
) -> None:
    """No generation started, so there is nothing to cancel: a 401 costs one request, not
    a second ``DELETE /v1/stream``."""
    server.route("POST", CHAT, [Json(status, error_body(status, "no"))])
    _, error = await drain(make_client(max_retries=0).chat(user()))
    assert isinstance(error, HTTPStatusError)
    assert [(r.method, r.path) for r in server.requests] == [("POST", CHAT)]


async def test_exceed_context_size_raises_context_overflow_error(
    server: FaultServer, make_client: ClientFactory
) -> None:
    body = {
        "error": {
            "code": 400,
            "message": "request (9000 tokens) exceeds the available context size (4096 tokens),"
            " try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 9000,
            "n_ctx": 4096,
        }
    }
    server.route("POST", CHAT, [Json(400, body)])
    events, error = await drain(make_client().chat(user()))
    assert events == []
    assert isinstance(error, ContextOverflowError)
    assert isinstance(error, HTTPStatusError)
    assert (error.status, error.n_prompt_tokens, error.n_ctx) == (400, 9000, 4096)
    assert json.loads(error.body) == body
    assert error.partial is None
    assert chat_requests(server) == 1


# -- errors inside a 200 stream ----------------------------------------------------------------
async def test_in_band_error_raises_server_error_with_the_partial(
    server: FaultServer, make_client: ClientFactory
) -> None:
    chunks = chat_chunks(["Hel", "lo"], reasoning="Hmm.", finish_reason=None, done=False)
    server.route(
        "POST", CHAT, stream([*chunks, error_event("Context size has been exceeded.", 500)])
    )
    events, error = await drain(make_client().chat(user()))
    assert events == [Reasoning("Hmm."), Content("Hel"), Content("lo")]
    assert isinstance(error, ServerError)
    assert error.message == "Context size has been exceeded."
    assert error.code == 500
    assert error.type == "server_error"
    assert error.partial is not None
    assert error.partial.content == "Hello"
    assert error.partial.reasoning_content == "Hmm."
    assert error.partial.id == DEFAULT_ID
    assert error.partial.finish_reason is None
    assert chat_requests(server) == 1


@pytest.mark.parametrize("ending", [End(), Close(), Reset()], ids=["end", "close", "reset"])
async def test_body_ending_before_a_finish_reason_raises_stream_closed_early(
    server: FaultServer, make_client: ClientFactory, ending: Step
) -> None:
    chunks = chat_chunks(["Hel", "lo"], reasoning="Hmm.", finish_reason=None, done=False)
    server.route("POST", CHAT, [*stream(chunks, end=False), ending])
    events, error = await drain(make_client().chat(user()))
    assert events == [Reasoning("Hmm."), Content("Hel"), Content("lo")]
    assert isinstance(error, StreamClosedEarlyError)
    assert error.partial is not None
    assert error.partial.content == "Hello"
    assert error.partial.reasoning_content == "Hmm."
    assert error.partial.id == DEFAULT_ID
    assert error.partial.finish_reason is None
    assert chat_requests(server) == 1


@pytest.mark.parametrize("ending", [End(), Close()], ids=["end", "close"])
async def test_stream_that_ends_before_any_event_has_no_partial(
    server: FaultServer, make_client: ClientFactory, ending: Step
) -> None:
    # _errors.py: "partial is the Completion assembled so far when any chunk had arrived,
    # else None".
    server.route("POST", CHAT, [Status(200), ending])
    events, error = await drain(make_client().chat(user()))
    assert events == []
    assert isinstance(error, StreamClosedEarlyError)
    assert error.partial is None


async def test_finish_reason_without_done_is_a_complete_answer(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("POST", CHAT, stream(chat_chunks(["Hi"], done=False)))
    stream_ = make_client().chat(user())
    events, error = await drain(stream_)
    assert error is None
    assert events == [Content("Hi")]
    assert stream_.completion.finish_reason is FinishReason.STOP


async def test_done_then_a_connection_held_open_ends_the_stream_at_once(
    server: FaultServer, make_client: ClientFactory
) -> None:
    """[DONE] is the end: a server (or proxy) that keeps the connection open afterwards is
    not a stall, and the client does not wait for the close."""
    server.route("POST", CHAT, [*stream(chat_chunks(["Hi"]), end=False), Hold()])
    stream_ = make_client(stall_timeout=5.0).chat(user())
    started = time.monotonic()
    events, error = await drain(stream_)
    assert error is None
    assert events == [Content("Hi")]
    assert stream_.completion.content == "Hi"
    assert time.monotonic() - started < 2.0
    await server.wait_disconnect(timeout=2.0)  # and the connection was let go


async def test_finish_reason_then_silence_is_a_whole_answer(
    server: FaultServer, make_client: ClientFactory
) -> None:
    """The finish reason arrived; the usage chunk and [DONE] never do: the stall ends the
    wait, and the answer is returned, not raised as StalledError."""
    chunks = chat_chunks(["Hi"], done=False)
    server.route("POST", CHAT, [*stream(chunks, end=False), Hold()])
    stream_ = make_client(stall_timeout=0.3).chat(user())
    events, error = await drain(stream_)
    assert error is None
    assert events == [Content("Hi")]
    assert stream_.completion.finish_reason is FinishReason.STOP


# -- timeouts ------------------------------------------------------------------------------------
async def test_no_headers_within_wait_timeout_raises_wait_timeout(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("POST", CHAT, [Hold()])
    client = make_client(wait_timeout=0.3)
    started = time.monotonic()
    events, error = await drain(client.chat(user()))
    elapsed = time.monotonic() - started
    assert events == []
    assert isinstance(error, WaitTimeoutError)
    assert error.partial is None
    assert 0.25 <= elapsed < 2.0
    await server.wait_disconnect(timeout=2.0)  # the queued request was abandoned
    assert chat_requests(server) == 1  # and not retried


async def test_wait_timeout_only_covers_the_headers(
    server: FaultServer, make_client: ClientFactory
) -> None:
    # Headers at once, then the body trickles in for longer than wait_timeout.
    chunks = chat_chunks(["a", "b", "c"])
    server.route("POST", CHAT, [Status(200), Sleep(0.2), *stream(chunks, delay=0.15)[1:]])
    stream_ = make_client(wait_timeout=0.3, stall_timeout=1.0).chat(user())
    events, error = await drain(stream_)
    assert error is None
    assert events == [Content("a"), Content("b"), Content("c")]
    assert stream_.completion.content == "abc"


async def test_silence_mid_stream_raises_stalled_with_the_partial(
    server: FaultServer, make_client: ClientFactory
) -> None:
    chunks = chat_chunks(["Hel", "lo"], finish_reason=None, done=False)
    server.route("POST", CHAT, [*stream(chunks, end=False), Hold()])
    client = make_client(stall_timeout=0.3)
    started = time.monotonic()
    events, error = await drain(client.chat(user()))
    elapsed = time.monotonic() - started
    assert events == [Content("Hel"), Content("lo")]
    assert isinstance(error, StalledError)
    assert error.partial is not None
    assert error.partial.content == "Hello"
    assert error.partial.finish_reason is None
    assert 0.25 <= elapsed < 2.0
    await server.wait_disconnect(timeout=2.0)
    assert chat_requests(server) == 1


async def test_stall_is_not_raised_into_the_callers_task_later(
    server: FaultServer, make_client: ClientFactory
) -> None:
    # After a StalledError the task must not carry a pending cancellation: it goes on
    # awaiting normally.
    chunks = chat_chunks(["a"], finish_reason=None, done=False)
    server.route("POST", CHAT, [*stream(chunks, end=False), Hold()])
    _, error = await drain(make_client(stall_timeout=0.2).chat(user()))
    assert isinstance(error, StalledError)
    await anyio.sleep(0.1)  # a cancellation left pending would strike here
    try:
        task = asyncio.current_task()
    except RuntimeError:  # trio: no asyncio task, and no cancellation outside a scope
        return
    assert task is not None
    assert task.cancelling() == 0


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # asyncio.wait_for's own tasks
async def test_stall_is_detected_when_each_read_runs_in_its_own_task(
    server: FaultServer, make_client: ClientFactory
) -> None:
    # asyncio.wait_for() (Python 3.11) runs each read in a task of its own: the watchdog
    # must stop the read that is stalled now, not the task that read first. Asyncio only:
    # trio has no such tasks.
    chunks = chat_chunks(["Hel", "lo"], finish_reason=None, done=False)
    server.route("POST", CHAT, [*stream(chunks, end=False), Hold()])
    stream_ = make_client(stall_timeout=0.3).chat(user())
    events: list[ChatEvent] = []

    async def read_each_in_a_task() -> None:
        async with stream_:
            while True:
                events.append(await asyncio.wait_for(anext(stream_), 2.0))

    started = time.monotonic()
    with pytest.raises(StalledError) as caught:
        await read_each_in_a_task()
    elapsed = time.monotonic() - started
    assert events == [Content("Hel"), Content("lo")]
    assert caught.value.partial is not None
    assert caught.value.partial.content == "Hello"
    assert elapsed < 1.5  # the stall, not wait_for's 2 s


async def test_pings_keep_a_silent_stream_alive(
    server: FaultServer, make_client: ClientFactory
) -> None:
    first, *rest = chat_chunks(["Hel", "lo"])
    pings: list[Step] = []
    for _ in range(10):  # 0.5 s without data, but a ping every 0.05 s
        pings += [Sleep(0.05), Chunk(PING)]
    server.route("POST", CHAT, [Status(200), Chunk(first), *pings, *map(Chunk, rest), End()])
    stream_ = make_client(stall_timeout=0.25).chat(user())
    events, error = await drain(stream_)
    assert error is None
    assert events == [Content("Hel"), Content("lo")]
    assert stream_.completion.content == "Hello"


async def test_a_slow_consumer_is_not_a_stall(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("POST", CHAT, stream(chat_chunks(["a", "b", "c"])))
    stream_ = make_client(stall_timeout=0.15).chat(user())
    events = []
    async with stream_:
        async for event in stream_:
            events.append(event)
            await anyio.sleep(0.25)  # longer than stall_timeout, between events
    assert events == [Content("a"), Content("b"), Content("c")]
    assert stream_.completion.content == "abc"


async def test_model_loading_past_load_timeout_raises_load_timeout(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("POST", CHAT, [Json(503, LOADING)])
    server.route("GET", "/health", [Json(503, LOADING)])
    started = time.monotonic()
    events, error = await drain(make_client(load_timeout=0.3).chat(user()))
    elapsed = time.monotonic() - started
    assert events == [Waiting(slot_busy=False)]
    assert isinstance(error, LoadTimeoutError)
    assert error.partial is None
    assert 0.3 <= elapsed < 2.0
    assert chat_requests(server) == 1
    assert any(r.path == "/health" for r in server.requests)


# -- slots ---------------------------------------------------------------------------------------
SLOTS = [{"id": 0, "is_processing": True}, {"id": 1, "is_processing": False}]


async def test_busy_pinned_slot_with_wait_false_raises_busy(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("GET", "/slots", [Json(200, SLOTS)])
    server.route("POST", CHAT, stream(chat_chunks(["Hi"])))
    events, error = await drain(make_client().chat(user(slot=0, wait=False)))
    assert events == []
    assert isinstance(error, BusyError)
    assert error.partial is None
    assert chat_requests(server) == 0  # nothing was sent to the busy slot


async def test_idle_pinned_slot_with_wait_false_runs(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("GET", "/slots", [Json(200, SLOTS)])
    server.route("POST", CHAT, stream(chat_chunks(["Hi"])))
    events, error = await drain(make_client().chat(user(slot=1, wait=False)))
    assert error is None
    assert events == [Content("Hi")]
    post = next(r for r in server.requests if r.path == CHAT)
    assert post.json()["id_slot"] == 1


async def test_a_server_that_dies_while_loading_fails_fast_not_after_load_timeout(
    server: FaultServer, make_client: ClientFactory
) -> None:
    """The model was loading (503), then the server stopped answering: after as many failed
    /health polls in a row as the retry policy allows, ConnectError, not a wait for the whole
    load_timeout (found on the main job: a llama-server that died while loading)."""
    server.route("POST", CHAT, [Json(503, LOADING)])
    server.route("GET", "/health", [Reset()])
    client = make_client(load_timeout=60.0, max_retries=2)
    started = time.monotonic()
    events, error = await drain(client.chat(user()))
    assert isinstance(error, ConnectError), error
    assert "stopped answering while the model loaded" in str(error)
    assert events == [Waiting(slot_busy=False)]
    assert time.monotonic() - started < 5.0
    assert [r.path for r in server.requests].count("/health") == 3  # max_retries + 1


# -- connection refused ------------------------------------------------------------------------
async def test_refused_connection_raises_connect_error_after_retries(
    transport: TransportName,
) -> None:
    config = make_config(refused_url(), transport, max_retries=2)
    async with Client(config) as client:
        events, error = await drain(client.chat(user()))
    assert [type(e) for e in events] == [Retrying, Retrying]
    assert [e.attempt for e in events if isinstance(e, Retrying)] == [1, 2]
    for event in events:
        assert isinstance(event, Retrying)
        assert 0 <= event.after_ms <= 20
        assert event.error
    assert isinstance(error, ConnectError)
    assert error.partial is None


# -- helper requests are bounded too ------------------------------------------------------------
async def test_a_slots_request_that_never_answers_is_bounded_by_wait_timeout(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("GET", "/slots", [Hold(timeout=1.5)])
    server.route("POST", CHAT, stream(chat_chunks(["Hi"])))
    started = time.monotonic()
    events, error = await drain(make_client(wait_timeout=0.3).chat(user(slot=0)))
    elapsed = time.monotonic() - started
    assert elapsed < 1.2  # the server holds each request for 1.5 s
    if error is None:  # /slots unanswered: treated as not busy
        assert events == [Content("Hi")]
    else:
        assert isinstance(error, WaitTimeoutError)


async def test_a_health_request_that_never_answers_is_bounded_by_load_timeout(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("POST", CHAT, [Json(503, LOADING)])
    server.route("GET", "/health", [Hold(timeout=1.5)])
    started = time.monotonic()
    events, error = await drain(make_client(load_timeout=0.3, wait_timeout=0.3).chat(user()))
    elapsed = time.monotonic() - started
    assert events == [Waiting(slot_busy=False)]
    assert isinstance(error, LoadTimeoutError)
    assert elapsed < 1.2  # the server holds each request for 1.5 s


IDLE = [{"id": 0, "is_processing": False}, {"id": 1, "is_processing": False}]


async def test_wait_false_right_after_our_own_request_is_not_busy(
    server: FaultServer, make_client: ClientFactory
) -> None:
    """The server frees the slot a moment after our own previous request on it ended; that
    is not "busy elsewhere": the client looks again before raising BusyError."""
    server.route("GET", "/slots", [Json(200, IDLE)], [Json(200, SLOTS)], [Json(200, SLOTS)],
                 [Json(200, IDLE)])
    server.route("POST", CHAT, stream(chat_chunks(["Hi"])))
    client = make_client()
    _, error = await drain(client.chat(user(slot=0, wait=False)))
    assert error is None
    second, error = await drain(client.chat(user(slot=0, wait=False)))
    assert error is None, error
    assert second == [Content("Hi")]
    assert chat_requests(server) == 2


async def test_wait_false_long_after_our_own_request_is_busy_at_once(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("GET", "/slots", [Json(200, IDLE)], [Json(200, SLOTS)])
    server.route("POST", CHAT, stream(chat_chunks(["Hi"])))
    client = make_client()
    _, error = await drain(client.chat(user(slot=0, wait=False)))
    assert error is None
    await anyio.sleep(1.6)  # past the release grace
    started = time.monotonic()
    _, error = await drain(client.chat(user(slot=0, wait=False)))
    assert isinstance(error, BusyError)
    assert time.monotonic() - started < 0.5
