"""The API key goes only as ``Authorization: Bearer <key>``, on every request the client makes,
and never shows in ``repr(client)`` or in any error (message, repr, traceback, cause chain).
"""

from __future__ import annotations

import logging
import traceback

import httpx
import pytest
import respx

from llamaclient import (
    AuthenticationError,
    BusyError,
    Client,
    Config,
    ConnectError,
    Content,
    HTTPStatusError,
    InferError,
    LoadTimeoutError,
    Resuming,
    Retrying,
    ServerError,
    StalledError,
    StreamClosedEarlyError,
    WaitTimeoutError,
)
from tests.client.test_fault_matrix import run_fault
from tests.conftest import CHAT, CONTROL, ClientFactory, TransportName, drain, make_config, user
from tests.support.faults import EVENTS, FAULTS, HEAD, Fault, chunk, render
from tests.support.faults import KEY as MATRIX_KEY
from tests.support.faultserver import (
    Close,
    FaultServer,
    Hold,
    Json,
    Request,
    Script,
    Step,
    chat_chunks,
    error_body,
    error_event,
    refused_url,
    stream,
)
from tests.support.resumable import Sessions

pytestmark = pytest.mark.anyio

KEY = "sk-SECRET-0123456789abcdef"
LOADING = {"error": {"message": "Loading model", "type": "unavailable_error", "code": 503}}


def assert_key_only_as_bearer(request: Request) -> None:
    assert request.headers.get_list("Authorization") == [f"Bearer {KEY}"], request.headers
    for name, value in request.headers.raw():
        if name.lower() != "authorization":
            assert KEY not in value, name
    assert KEY.encode() not in request.body
    assert KEY not in request.target


async def test_every_request_carries_the_key_as_bearer_only(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("GET", "/slots", [Json(200, [{"id": 0, "is_processing": False}])])
    server.route("GET", "/health", [Json(200, {"status": "ok"})])
    server.route("POST", CHAT, [Json(503, LOADING)],
                 stream(chat_chunks(["A"], reasoning=["r1", "r2"])))
    server.route("POST", CONTROL, [Json(200, {"success": True})])
    client = make_client(api_key=KEY, thinking_budget=1)
    events, error = await drain(client.chat(user(slot=0, thinking=True)))
    assert error is None
    assert events[-1] == Content("A")
    assert await client.health() == {"status": "ok"}
    paths = [r.path for r in server.requests]
    assert {"/slots", "/health", CHAT, CONTROL} <= set(paths)
    for request in server.requests:
        assert_key_only_as_bearer(request)


async def test_no_key_no_authorization_header(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("POST", CHAT, stream(chat_chunks(["A"])))
    await drain(make_client().chat(user()))
    [request] = server.requests
    assert "Authorization" not in request.headers
    assert "X-Api-Key" not in request.headers


async def test_key_is_not_in_the_client_repr(make_client: ClientFactory) -> None:
    client = make_client(api_key=KEY)
    assert KEY not in repr(client)
    assert KEY not in str(client)
    assert KEY not in repr(client.config)


def assert_key_not_in(error: BaseException) -> None:
    assert isinstance(error, InferError), error
    text = "".join(traceback.format_exception(error)) + repr(error) + str(error)
    text += repr(error.partial)
    assert KEY not in text


@pytest.mark.parametrize(
    ("expected", "setup"),
    [
        (HTTPStatusError, "401"),
        (WaitTimeoutError, "hold"),
        (StalledError, "stall"),
        (StreamClosedEarlyError, "cut"),
        (ServerError, "in-band"),
        (LoadTimeoutError, "loading"),
        (BusyError, "busy"),
    ],
)
async def test_key_is_not_in_any_error(
    server: FaultServer, make_client: ClientFactory, expected: type[InferError], setup: str
) -> None:
    head = chat_chunks(["Hel"], finish_reason=None, done=False)
    scripts: dict[str, Script] = {
        "401": [Json(401, error_body(401, "Invalid API Key"))],
        "hold": [Hold()],
        "stall": [*stream(head, end=False), Hold()],
        "cut": [*stream(head, end=False), Close()],
        "in-band": stream([*head, error_event("Compute error.")]),
        "loading": [Json(503, LOADING)],
        "busy": stream(chat_chunks(["never sent"])),
    }
    server.route("POST", CHAT, scripts[setup])
    server.route("GET", "/health", [Json(503, LOADING)])
    server.route("GET", "/slots", [Json(200, [{"id": 0, "is_processing": True}])])
    client = make_client(api_key=KEY, wait_timeout=0.3, stall_timeout=0.3, load_timeout=0.2)
    request = user(slot=0, wait=False) if setup == "busy" else user()
    _, error = await drain(client.chat(request))
    assert isinstance(error, expected)
    assert_key_not_in(error)


@pytest.mark.parametrize("status", [401, 403])
async def test_a_refused_key_is_an_authentication_error_never_retried(
    server: FaultServer, make_client: ClientFactory, status: int
) -> None:
    """llama-server with ``--api-key`` answers a wrong key 401 (a gateway may say 403):
    ``AuthenticationError``, an ``HTTPStatusError`` as peers have it, sent once."""
    server.route("POST", CHAT, [Json(status, error_body(status, "Invalid API Key"))])
    client = make_client(api_key=KEY)
    events, error = await drain(client.chat(user()))
    assert events == []
    assert isinstance(error, AuthenticationError)
    assert isinstance(error, HTTPStatusError)
    assert (error.status, error.message) == (status, "Invalid API Key")
    assert [r.path for r in server.requests].count(CHAT) == 1
    assert_key_not_in(error)


async def test_key_is_not_in_a_connect_error(transport: TransportName) -> None:
    async with Client(make_config(refused_url(), transport, api_key=KEY, max_retries=1)) as c:
        events, error = await drain(c.chat(user()))
    assert isinstance(error, ConnectError)
    assert_key_not_in(error)
    assert all(KEY not in repr(event) for event in events)


async def test_key_as_bearer_over_your_own_httpx_client() -> None:
    base = "http://llama.test"
    async with respx.mock(base_url=base) as router, httpx.AsyncClient() as http:
        route = router.post(CHAT).respond(
            200, headers={"Content-Type": "text/event-stream"},
            content=b"".join(chat_chunks(["A"])),
        )
        async with Client(Config(base, api_key=KEY), http_client=http) as client:
            assert KEY not in repr(client)
            completion = await client.complete(user())
        assert completion.content == "A"
        [call] = route.calls
        assert call.request.headers.get_list("authorization") == [f"Bearer {KEY}"]
        assert KEY.encode() not in call.request.content
        assert KEY not in str(call.request.url)


# -- the whole fault matrix, run with a recognisable key ----------------------------------------
# The key, or any start of it long enough to recognise (a clipped echo), is searched for in
# everything a failure leaves behind: the error's message, repr, args and fields, every
# exception of its cause/context chain, the formatted traceback, every event (Retrying.error,
# Resuming.error, ...) and every log record of llamaclient, httpx and httpcore at DEBUG.
# Some faults are servers that quote the key back (``secret_*``): the client hides it there too.
SEEN = MATRIX_KEY[:12]


def leak_texts(error: BaseException) -> list[str]:
    texts = ["".join(traceback.format_exception(error))]
    seen: set[int] = set()
    stack = [error]
    while stack:
        exc = stack.pop()
        if id(exc) in seen:
            continue
        seen.add(id(exc))
        # Third-party exceptions are never chained to ours: httpx's hold the request, and
        # with it the Authorization header.
        assert not type(exc).__module__.startswith(("httpx", "httpcore", "h11")), repr(exc)
        texts += [str(exc), repr(exc), repr(exc.args), repr(getattr(exc, "__dict__", {}))]
        stack += [e for e in (exc.__cause__, exc.__context__) if e is not None]
    return texts


def log_texts(records: list[logging.LogRecord], echo: bool = False) -> list[str]:
    """The text of every record. ``echo``: the server quoted the key back, so httpcore's own
    DEBUG trace (it logs the response head it received, and h11's complaints with the bytes)
    shows it: that is the server's text in a third-party trace, left out here but checked
    to be exactly that (a response it received, quoted)."""
    texts = []
    for record in records:
        message = record.getMessage()
        if echo and record.name.startswith("httpcore") and SEEN in message:
            assert "receive_response" in message, message
            continue
        texts += [record.getMessage(), repr(record.args), record.name]
        if record.exc_info and record.exc_info[1] is not None:
            texts.append("".join(traceback.format_exception(record.exc_info[1])))
    return texts


def watch_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    for name in ("llamaclient", "httpx", "httpcore", "h11"):
        caplog.set_level(logging.DEBUG, logger=name)


# Every fault that ends in an error (on either transport) or shows an event with a text.
ERROR_PATHS = [f for f in FAULTS if f.outcome.error or (f.httpx and f.httpx.error) or f.events]


@pytest.mark.parametrize("fault", ERROR_PATHS, ids=[f.name for f in ERROR_PATHS])
async def test_key_never_appears_on_any_fault(
    server: FaultServer,
    make_client: ClientFactory,
    transport: TransportName,
    fault: Fault,
    caplog: pytest.LogCaptureFixture,
) -> None:
    watch_logs(caplog)
    events, error = await run_fault(server, make_client, transport, fault, api_key=MATRIX_KEY)
    echo = fault.kind == "secret" and transport == "httpx"
    texts = [repr(event) for event in events] + log_texts(caplog.records, echo)
    if error is not None:
        texts += leak_texts(error)
    leaks = [text for text in texts if SEEN in text]
    assert leaks == [], leaks[:3]
    for request in server.requests:
        assert request.headers.get("Authorization") == f"Bearer {MATRIX_KEY}"


async def test_key_never_appears_in_resuming(
    server: FaultServer,
    make_client: ClientFactory,
    transport: TransportName,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A break that quotes the key (a chunk-size line echoing the Authorization header) is
    resumed; its Resuming event names the break without the key."""
    watch_logs(caplog)
    sessions = Sessions(server, list(EVENTS))
    bearer = f"Bearer {MATRIX_KEY}".encode()

    def chat(request: Request) -> list[Step]:
        sessions.known[request.headers["x-conversation-id"]] = sessions.body
        return render([HEAD + chunk(EVENTS[0]) + bearer + b"\r\n"])

    server.route("POST", CHAT, chat)
    client = make_client(api_key=MATRIX_KEY)
    stream_ = client.chat(user())
    events, error = await drain(stream_)
    assert error is None
    assert stream_.completion.content == "Hello"
    assert [type(e) for e in events if not isinstance(e, Content)] == [Resuming]
    texts = [repr(e) for e in events] + log_texts(caplog.records, transport == "httpx")
    assert [t for t in texts if SEEN in t] == []


async def test_key_never_appears_in_retrying(
    server: FaultServer,
    make_client: ClientFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    watch_logs(caplog)
    server.route("POST", CHAT, [Json(503, error_body(503, f"busy; your key {MATRIX_KEY}"))],
                 stream(chat_chunks(["A"])))
    events, error = await drain(make_client(api_key=MATRIX_KEY).chat(user()))
    assert error is None
    assert any(isinstance(e, Retrying) for e in events)
    texts = [repr(e) for e in events] + log_texts(caplog.records)
    assert [t for t in texts if SEEN in t] == []
