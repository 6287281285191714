"""Answers that stop half-way or are not what llama-server sends never hang the client and
only raise our own errors."""

from __future__ import annotations

import time

import pytest

from llamaclient import Content, ProtocolError, StalledError
from tests.conftest import CHAT, ClientFactory, drain, user
from tests.support.faultserver import FaultServer, Hold, Json, Raw, Response, Status, Step

pytestmark = pytest.mark.anyio

HALF_BODY = [
    Status(500, {"Content-Type": "application/json", "Content-Length": "100"}, chunked=False),
    Raw(b'{"error":'),
    Hold(),
]
HALF_JSON_200 = [
    Status(200, {"Content-Type": "application/json", "Content-Length": "100"}, chunked=False),
    Raw(b'{"id":'),
    Hold(),
]


@pytest.mark.parametrize("script", [HALF_BODY, HALF_JSON_200], ids=["error-body", "json-200"])
async def test_a_body_that_stops_half_way_is_a_stall(
    server: FaultServer, make_client: ClientFactory, script: list[Step]
) -> None:
    server.route("POST", CHAT, script)
    started = time.monotonic()
    events, error = await drain(make_client(stall_timeout=0.3).chat(user()))
    assert time.monotonic() - started < 3
    assert isinstance(error, StalledError), error
    assert events == []


async def test_helper_answers_that_are_not_json_are_protocol_errors(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("GET", "/slots", [Response(200, b"<html>proxy</html>", "text/html")])
    with pytest.raises(ProtocolError, match="not JSON"):
        await make_client().slots()


@pytest.mark.parametrize("body", [{"slots": []}, [1, 2], ["x"]])
async def test_a_slots_answer_of_another_shape_does_not_block_a_pinned_chat(
    server: FaultServer, make_client: ClientFactory, body: object
) -> None:
    from tests.support.faultserver import chat_chunks, stream

    server.route("GET", "/slots", [Json(200, body)])
    server.route("POST", CHAT, stream(chat_chunks(["Hi"])))
    events, error = await drain(make_client().chat(user(slot=1, wait=False)))
    assert error is None, error
    assert events == [Content("Hi")]


@pytest.mark.parametrize("ending", ["close", "reset"])
async def test_a_cut_after_the_finish_reason_is_a_whole_answer(
    server: FaultServer, make_client: ClientFactory, ending: str
) -> None:
    from tests.support.faultserver import Close, Reset, chat_chunks, stream

    chunks = chat_chunks(["Hel", "lo"], usage=False, done=False)
    server.route(
        "POST", CHAT, [*stream(chunks, end=False), Close() if ending == "close" else Reset()]
    )
    chat = make_client().chat(user())
    events, error = await drain(chat)
    assert error is None, error
    assert chat.completion.content == "Hello"
    assert events == [Content("Hel"), Content("lo")]
