"""Dialects of OpenAI-compatible servers, through the Client on the fault server (both
transports): Groq's ``event: error``, a string error code in a 4xx body, thinking under
``reasoning`` echoed back under the same name."""

from __future__ import annotations

import json

import pytest

from llamaclient import (
    ChatMessage,
    ChatRequest,
    Content,
    HTTPStatusError,
    Reasoning,
    ServerError,
    UserMessage,
)
from tests.conftest import CHAT, ClientFactory, drain, user
from tests.support.faultserver import FaultServer, Json, chat_chunk, chat_chunks, stream

pytestmark = pytest.mark.anyio

GROQ = {
    "error": {
        "message": "Failed to call a function. Please adjust your prompt.",
        "type": "invalid_request_error",
        "code": "tool_use_failed",
    }
}


async def test_an_error_event_ends_the_stream_with_the_servers_message(
    server: FaultServer, make_client: ClientFactory
) -> None:
    head = chat_chunks(["Let ", "me"], finish_reason=None, done=False)
    error = b"event: error\ndata: " + json.dumps(GROQ).encode() + b"\n\n"
    server.route("POST", CHAT, stream([*head, error]))
    events, failure = await drain(make_client().chat(user()))
    assert events == [Content("Let "), Content("me")]
    assert isinstance(failure, ServerError)
    assert failure.code == "tool_use_failed"
    assert failure.message == "Failed to call a function. Please adjust your prompt."
    assert failure.partial is not None
    assert failure.partial.content == "Let me"


async def test_a_4xx_with_a_string_code_keeps_the_envelope(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("POST", CHAT, [Json(400, GROQ)])
    _, failure = await drain(make_client().chat(user()))
    assert isinstance(failure, HTTPStatusError)
    assert (failure.status, failure.type, failure.code) == (
        400,
        "invalid_request_error",
        "tool_use_failed",
    )


async def test_reasoning_under_reasoning_goes_back_the_same_way(
    server: FaultServer, make_client: ClientFactory
) -> None:
    chunks = [
        b"data: " + json.dumps(chat_chunk({"reasoning": r})).encode() + b"\n\n"
        for r in ("Let me ", "think.")
    ]
    server.route("POST", CHAT, stream([*chunks, *chat_chunks(["Done."], role=False)]))
    client = make_client()
    stream_ = client.chat(user())
    events, failure = await drain(stream_)
    assert failure is None
    assert events == [Reasoning("Let me "), Reasoning("think."), Content("Done.")]
    history: list[ChatMessage] = [
        UserMessage("hi"), stream_.completion.message(), UserMessage("more")
    ]
    await drain(client.chat(ChatRequest(history)))
    sent = json.loads(server.requests[-1].body)["messages"][1]
    assert sent == {"role": "assistant", "content": "Done.", "reasoning": "Let me think."}
