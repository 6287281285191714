"""Waiting and safe retries, counted on the fault server (both transports).

- 503 ``Loading model``: ``Waiting(slot_busy=False)``, ``/health`` polled until 200, success;
- pinned slot busy in ``GET /slots``: ``Waiting(slot_busy=True)``, then success;
- 503 (not loading), 502, 504 and 429: ``Retrying(attempt, after_ms, error)``, honouring
  ``Retry-After``, then success; the last status once retries run out;
- never a retry of a 500 or a 400, nor once the stream has started;
- a stale keep-alive connection is retried once, silently, on a fresh connection.
"""

from __future__ import annotations

import json

import anyio
import pytest

from llamaclient import (
    Client,
    ConnectError,
    Content,
    HTTPStatusError,
    Retrying,
    ServerError,
    StreamClosedEarlyError,
    Waiting,
)
from tests.conftest import CHAT, ClientFactory, TransportName, drain, make_config, user
from tests.support.faultserver import (
    Close,
    FaultServer,
    Json,
    Request,
    Reset,
    Response,
    Sleep,
    Status,
    Step,
    chat_chunks,
    error_body,
    error_event,
    stream,
)

pytestmark = pytest.mark.anyio

LOADING = {"error": {"message": "Loading model", "type": "unavailable_error", "code": 503}}
OK = stream(chat_chunks(["Hi"]))


def posts(server: FaultServer) -> list[Request]:
    return [r for r in server.requests if r.path == CHAT]


def paths(server: FaultServer) -> list[str]:
    return [r.path for r in server.requests]


# -- waiting ---------------------------------------------------------------------------------
async def test_loading_model_waits_for_health_then_succeeds(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("POST", CHAT, [Json(503, LOADING)], OK)
    server.route("GET", "/health", [Json(503, LOADING)], [Json(503, LOADING)],
                 [Json(200, {"status": "ok"})])
    stream_ = make_client().chat(user())
    events, error = await drain(stream_)
    assert error is None
    assert events == [Waiting(slot_busy=False), Content("Hi")]  # no Retrying
    assert stream_.completion.content == "Hi"
    assert paths(server) == [CHAT, "/health", "/health", "/health", CHAT]


async def test_loading_twice_waits_once(server: FaultServer, make_client: ClientFactory) -> None:
    # /health says ok but the chat route still answers Loading model: keep waiting, one event.
    server.route("POST", CHAT, [Json(503, LOADING)], [Json(503, LOADING)], OK)
    server.route("GET", "/health", [Json(200, {"status": "ok"})])
    events, error = await drain(make_client().chat(user()))
    assert error is None
    assert events == [Waiting(slot_busy=False), Content("Hi")]
    assert len(posts(server)) == 3


async def test_busy_pinned_slot_waits_then_succeeds(
    server: FaultServer, make_client: ClientFactory
) -> None:
    slots = [{"id": 0, "is_processing": False}, {"id": 1, "is_processing": True}]
    server.route("GET", "/slots", [Json(200, slots)])
    # The server defers the request (no headers) until the slot frees up.
    server.route("POST", CHAT, [Sleep(0.2), *OK])
    stream_ = make_client().chat(user(slot=1))
    events, error = await drain(stream_)
    assert error is None
    assert events == [Waiting(slot_busy=True), Content("Hi")]
    assert paths(server) == ["/slots", CHAT]
    assert posts(server)[0].json()["id_slot"] == 1


async def test_unavailable_slots_endpoint_does_not_block_a_pinned_request(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("GET", "/slots", [Json(501, error_body(501, "This server does not support "
                                                        "slots endpoint."))])
    server.route("POST", CHAT, OK)
    events, error = await drain(make_client().chat(user(slot=0, wait=False)))
    assert error is None
    assert events == [Content("Hi")]


# -- retries -------------------------------------------------------------------------------------
@pytest.mark.parametrize("status", [502, 503, 504, 429])
async def test_retryable_status_is_retried_then_succeeds(
    server: FaultServer, make_client: ClientFactory, status: int
) -> None:
    failure = Json(status, error_body(status, "try again"))
    server.route("POST", CHAT, [failure], [failure], OK)
    stream_ = make_client(max_retries=3).chat(user())
    events, error = await drain(stream_)
    assert error is None
    assert events[-1] == Content("Hi")
    retries = events[:-1]
    assert [type(e) for e in retries] == [Retrying, Retrying]
    assert [e.attempt for e in retries if isinstance(e, Retrying)] == [1, 2]
    for event in retries:
        assert isinstance(event, Retrying)
        assert str(status) in event.error
        assert 0 <= event.after_ms <= 20  # retry_max_backoff=0.02
    assert stream_.completion.content == "Hi"
    assert len(posts(server)) == 3


async def test_retry_after_is_honoured(server: FaultServer, make_client: ClientFactory) -> None:
    busy = Json(429, error_body(429, "busy"), headers={"Retry-After": "1"})
    server.route("POST", CHAT, [busy], OK)
    events, error = await drain(make_client(retry_max_backoff=2.0).chat(user()))
    assert error is None
    assert len(events) == 2
    retrying = events[0]
    assert isinstance(retrying, Retrying)
    assert retrying.attempt == 1
    assert retrying.after_ms >= 1000
    first, second = posts(server)
    assert second.time - first.time >= 0.95


async def test_retries_run_out_with_the_last_status(
    server: FaultServer, make_client: ClientFactory
) -> None:
    body = json.dumps(error_body(503, "no slot available"))
    server.route("POST", CHAT, [Response(503, body.encode(), content_type="application/json")])
    events, error = await drain(make_client(max_retries=2).chat(user()))
    assert [e.attempt for e in events if isinstance(e, Retrying)] == [1, 2]
    assert len(events) == 2
    assert isinstance(error, HTTPStatusError)
    assert error.status == 503
    assert error.body == body
    assert len(posts(server)) == 3


@pytest.mark.parametrize("status", [500, 400, 401, 404])
async def test_non_retryable_status_is_never_retried(
    server: FaultServer, make_client: ClientFactory, status: int
) -> None:
    server.route("POST", CHAT, [Json(status, error_body(status, "no"))], OK)
    events, error = await drain(make_client(max_retries=3).chat(user()))
    assert events == []
    assert isinstance(error, HTTPStatusError)
    assert error.status == status
    await anyio.sleep(0.05)
    assert len(posts(server)) == 1


async def test_no_retry_once_the_stream_has_started(
    server: FaultServer, make_client: ClientFactory
) -> None:
    head = chat_chunks(["Hel"], finish_reason=None, done=False)
    server.route("POST", CHAT, [*stream(head, end=False), Close()], OK)
    events, error = await drain(make_client(max_retries=3).chat(user()))
    assert events == [Content("Hel")]
    assert isinstance(error, StreamClosedEarlyError)
    await anyio.sleep(0.05)
    assert len(posts(server)) == 1


async def test_no_retry_after_an_in_band_error(
    server: FaultServer, make_client: ClientFactory
) -> None:
    head = chat_chunks(["Hel"], finish_reason=None, done=False)
    server.route("POST", CHAT, stream([*head, error_event("Compute error.", 503,
                                                          "unavailable_error")]), OK)
    events, error = await drain(make_client(max_retries=3).chat(user()))
    assert events == [Content("Hel")]
    assert isinstance(error, ServerError)
    assert error.code == 503
    await anyio.sleep(0.05)
    assert len(posts(server)) == 1


async def test_no_retry_of_a_started_stream_without_events(
    server: FaultServer, make_client: ClientFactory
) -> None:
    # 200 and headers went out (the slot started), then the connection dropped.
    server.route("POST", CHAT, [Status(200), Close()], OK)
    events, error = await drain(make_client(max_retries=3).chat(user()))
    assert events == []
    assert isinstance(error, StreamClosedEarlyError)
    await anyio.sleep(0.05)
    assert len(posts(server)) == 1


# -- stale keep-alive connections --------------------------------------------------------------
IDLE_SLOT = [{"id": 0, "is_processing": False}]


async def test_stale_keep_alive_connection_is_retried_once_silently(
    server: FaultServer, make_client: ClientFactory
) -> None:
    # GET /slots leaves a kept-alive connection in the pool; the chat request goes out on
    # it, and the server closes it without answering (it had timed the connection out): the
    # client sends again on a fresh connection, without a Retrying event.
    server.route("GET", "/slots", [Json(200, IDLE_SLOT)])
    server.route("POST", CHAT, [Close()], stream(chat_chunks(["two"])))
    client = make_client(max_retries=0)
    assert [slot.raw for slot in await client.slots()] == IDLE_SLOT
    events, error = await drain(client.chat(user()))
    assert (events, error) == ([Content("two")], None)
    slots, stale, fresh = server.requests
    assert stale.path == CHAT
    assert stale.conn_id == slots.conn_id  # it was the pooled connection
    assert stale.index_on_conn == 1
    assert fresh.conn_id != slots.conn_id


async def test_stale_connection_is_retried_silently_only_once(
    server: FaultServer, make_client: ClientFactory
) -> None:
    """The silent retry goes out on a fresh connection; when that one is closed unanswered
    too, the server may have read the request: it is never sent a third time."""
    server.route("GET", "/slots", [Json(200, IDLE_SLOT)])
    server.route("POST", CHAT, [Close()], [Close()], stream(chat_chunks(["two"])))
    client = make_client(max_retries=3)
    await client.slots()
    events, error = await drain(client.chat(user()))
    assert events == []
    assert isinstance(error, StreamClosedEarlyError)
    assert error.partial is None
    assert len(posts(server)) == 2


@pytest.mark.parametrize("max_retries", [0, 2])
@pytest.mark.parametrize("ending", [Close(), Reset()], ids=["close", "reset"])
async def test_a_fresh_connection_closed_unanswered_is_never_sent_again(
    server: FaultServer, make_client: ClientFactory, max_retries: int, ending: Step
) -> None:
    """A server that reads the request and closes (or resets) before any byte may have
    started the generation: the POST goes out once, whatever ``max_retries`` says."""
    server.route("POST", CHAT, [ending], stream(chat_chunks(["never"])))
    events, error = await drain(make_client(max_retries=max_retries).chat(user()))
    assert events == []
    assert isinstance(error, StreamClosedEarlyError)
    assert not isinstance(error, ConnectError)
    assert len(posts(server)) == 1


async def test_connection_closed_by_the_server_while_idle(transport: TransportName) -> None:
    async with FaultServer(idle_timeout=0.1) as server:
        server.route("GET", "/slots", [Json(200, IDLE_SLOT)])
        server.route("POST", CHAT, stream(chat_chunks(["two"])))
        async with Client(make_config(server.url, transport, max_retries=0)) as client:
            assert [slot.raw for slot in await client.slots()] == IDLE_SLOT
            await server.wait_for(lambda: server.connections_open == 0, timeout=2.0)
            assert server.connections[0].close_reason == "idle"
            assert (await drain(client.chat(user()))) == ([Content("two")], None)
        slots, chat = server.requests
        assert chat.conn_id != slots.conn_id
        assert len(server.requests) == 2
        await server.wait_closed_connections()
