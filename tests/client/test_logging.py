"""Logging, on the fault server (both transports): DEBUG has each request and its outcome
and each decision (a retry, a resume, a wait), INFO one line per finished turn, WARNING
every error that escapes; never the API key, and never the prompt or the answer."""

from __future__ import annotations

import logging

import pytest

from llamaclient import AuthenticationError, Content
from tests.conftest import CHAT, ClientFactory, drain, user
from tests.support.faultserver import (
    Close,
    FaultServer,
    Json,
    Status,
    chat_chunks,
    error_body,
    stream,
)
from tests.support.resumable import Sessions

pytestmark = pytest.mark.anyio

KEY = "sk-do-not-log-me-4242"
PROMPT = "the secret plan is pineapple"
ANSWER = ["Zebra", " crossing", " today"]


def lines(caplog: pytest.LogCaptureFixture, level: int | None = None) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("llamaclient") and (level is None or r.levelno == level)
    ]


def nothing_secret(caplog: pytest.LogCaptureFixture) -> None:
    text = "\n".join(lines(caplog))
    assert KEY not in text
    assert "pineapple" not in text
    assert "Zebra" not in text


async def test_info_is_one_line_per_turn_and_debug_shows_each_request(
    server: FaultServer, make_client: ClientFactory, caplog: pytest.LogCaptureFixture
) -> None:
    server.route("POST", CHAT, stream(chat_chunks(ANSWER)))
    caplog.set_level(logging.DEBUG, logger="llamaclient")
    client = make_client(api_key=KEY, model="scripted")
    events, error = await drain(client.chat(user(PROMPT)))
    assert error is None
    assert [e.text for e in events if isinstance(e, Content)] == ANSWER
    assert lines(caplog, logging.DEBUG) == ["GET /models -> 404", f"POST {CHAT} -> 200"]
    [info] = lines(caplog, logging.INFO)
    assert info.startswith("chat scripted ok: ")
    assert "prompt tokens" in info
    assert "cached" in info
    assert "generated" in info
    assert "first token" in info
    assert "prefill" in info
    assert "decode" in info
    assert lines(caplog, logging.WARNING) == []
    nothing_secret(caplog)


async def test_a_retry_is_a_debug_decision(
    server: FaultServer, make_client: ClientFactory, caplog: pytest.LogCaptureFixture
) -> None:
    server.route(
        "POST", CHAT, [Json(503, error_body(503, "busy"))], stream(chat_chunks(ANSWER))
    )
    caplog.set_level(logging.DEBUG, logger="llamaclient")
    _, error = await drain(make_client(api_key=KEY).chat(user(PROMPT)))
    assert error is None
    debug = lines(caplog, logging.DEBUG)
    assert debug[0] == f"POST {CHAT} -> 503"
    assert any(line.startswith("chat: retry 1 in ") and "HTTP 503" in line for line in debug)
    assert debug[-1] == f"POST {CHAT} -> 200"
    nothing_secret(caplog)


async def test_a_resume_is_a_debug_decision(
    server: FaultServer, make_client: ClientFactory, caplog: pytest.LogCaptureFixture
) -> None:
    events = chat_chunks(ANSWER)
    Sessions(server, events, cuts=[(len(events[0]) + len(events[1]), "close")])
    caplog.set_level(logging.DEBUG, logger="llamaclient")
    _, error = await drain(make_client(api_key=KEY).chat(user(PROMPT)))
    assert error is None
    debug = lines(caplog, logging.DEBUG)
    assert any(line.startswith("chat: resume 1 from byte ") for line in debug), debug
    assert any(line.startswith("GET /v1/stream?conv_id=") for line in debug), debug
    [info] = lines(caplog, logging.INFO)
    assert "1 resume(s)" in info
    nothing_secret(caplog)


async def test_an_error_that_escapes_is_a_warning_even_with_the_default_levels(
    server: FaultServer, make_client: ClientFactory, caplog: pytest.LogCaptureFixture
) -> None:
    server.route("POST", CHAT, [Json(401, error_body(401, "Invalid API Key"))])
    caplog.set_level(logging.WARNING, logger="llamaclient")
    _, error = await drain(make_client(api_key=KEY, model="m1").chat(user(PROMPT)))
    assert isinstance(error, AuthenticationError)
    [warning] = lines(caplog)
    assert warning.startswith("chat m1 failed: AuthenticationError: HTTP 401")
    nothing_secret(caplog)


async def test_a_stopped_turn_is_info_not_a_warning(
    server: FaultServer, make_client: ClientFactory, caplog: pytest.LogCaptureFixture
) -> None:
    server.route("POST", CHAT, stream(chat_chunks(ANSWER), end=False))
    caplog.set_level(logging.INFO, logger="llamaclient")
    async with make_client(api_key=KEY).chat(user(PROMPT)) as chat:
        async for _ in chat:
            break
    assert [line.split(":")[0] for line in lines(caplog)] == ["chat - stopped"]
    nothing_secret(caplog)


async def test_a_broken_stream_without_resume_is_a_warning_with_its_partial_kept_out(
    server: FaultServer, make_client: ClientFactory, caplog: pytest.LogCaptureFixture
) -> None:
    events = chat_chunks(ANSWER)
    server.route("POST", CHAT, [Status(200, {"Content-Type": "text/event-stream"}),
                                *stream(events[:2], end=False)[1:], Close()])
    caplog.set_level(logging.INFO, logger="llamaclient")
    _, error = await drain(make_client(api_key=KEY, resume=False).chat(user(PROMPT)))
    assert error is not None
    warning = lines(caplog, logging.WARNING)
    assert [w.split(":")[0] for w in warning] == ["chat - failed"]
    [info] = lines(caplog, logging.INFO)
    assert info.startswith(f"chat - {type(error).__name__}: ")
    nothing_secret(caplog)


async def test_with_the_default_levels_nothing_watches_a_turn(
    server: FaultServer, make_client: ClientFactory
) -> None:
    """The cost when logging is not configured: no observer, no event batch looked at."""
    assert not logging.getLogger("llamaclient.turn").isEnabledFor(logging.INFO)
    server.route("POST", CHAT, stream(chat_chunks(ANSWER)))
    chat = make_client().chat(user(PROMPT))
    assert chat._io.observer is None
    await chat.collect()
