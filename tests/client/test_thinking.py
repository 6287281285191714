"""The thinking budget: the client ends the reasoning through the control endpoint.

Once the reasoning passes the budget the client POSTs ``/v1/chat/completions/control``
``{"id": ..., "action": "reasoning_end"}`` once, yields ``ThinkingCapped(tokens)`` and the
Completion says ``thinking_capped``; reasoning that goes on past budget + grace raises
``ThinkingOverrunError`` with the partial. Fault server, both transports.
"""

from __future__ import annotations

import asyncio

import pytest

from llamaclient import (
    ChatEvent,
    Content,
    Reasoning,
    ThinkingCapped,
    ThinkingOverrunError,
)
from tests.conftest import CHAT, CONTROL, ClientFactory, drain, user
from tests.support.faultserver import (
    DEFAULT_ID,
    FaultServer,
    Hold,
    Json,
    Request,
    Script,
    Step,
    Wait,
    chat_chunks,
    stream,
)

pytestmark = pytest.mark.asyncio

REASONING = [f"r{i} " for i in range(1, 7)]  # timings.predicted_n = 1..6
GAP = 0.02  # between HTTP chunks, so that each event arrives in a read of its own


def spaced(chunks: list[bytes], *, end: bool = True) -> list[Step]:
    return stream(chunks, delay=GAP, end=end)


def controls(server: FaultServer) -> list[Request]:
    return [r for r in server.requests if r.path == CONTROL]


def route_control(server: FaultServer) -> asyncio.Event:
    """Answer the control call like llama-server; the event is set when it arrives."""
    called = asyncio.Event()

    def handler(request: Request) -> Script:
        called.set()
        return [Json(200, {"success": True})]

    server.route("POST", CONTROL, handler)
    return called


def reasoning_events(n: int) -> list[ChatEvent]:
    return [Reasoning(text) for text in REASONING[:n]]


async def test_budget_ends_the_reasoning_once(
    server: FaultServer, make_client: ClientFactory
) -> None:
    called = route_control(server)
    chunks = chat_chunks(["Answer"], reasoning=REASONING[:3])
    # The server goes on only once the control call arrived: it must come mid-stream.
    steps: list[Step] = [*spaced(chunks[:3], end=False), Wait(called, timeout=3.0),
                         *spaced(chunks[3:])[1:]]
    server.route("POST", CHAT, steps)
    stream_ = make_client(thinking_budget=3).chat(user(thinking=True))
    events, error = await drain(stream_)
    assert error is None
    assert events == [*reasoning_events(3), ThinkingCapped(3), Content("Answer")]
    assert stream_.completion.thinking_capped is True
    assert stream_.completion.reasoning_tokens == 3
    assert stream_.completion.content == "Answer"
    [control] = controls(server)
    assert control.method == "POST"
    assert control.json() == {"id": DEFAULT_ID, "action": "reasoning_end"}


async def test_control_call_names_the_model_when_configured(
    server: FaultServer, make_client: ClientFactory
) -> None:
    route_control(server)
    server.route("POST", CHAT, spaced(chat_chunks(["A"], reasoning=REASONING[:2])))
    stream_ = make_client(thinking_budget=1, model="qwen3").chat(user(thinking=True))
    events, error = await drain(stream_)
    assert error is None
    assert events == [Reasoning(REASONING[0]), ThinkingCapped(1), Reasoning(REASONING[1]),
                      Content("A")]
    [control] = controls(server)
    assert control.json() == {"id": DEFAULT_ID, "action": "reasoning_end", "model": "qwen3"}


async def test_reasoning_within_the_budget_is_left_alone(
    server: FaultServer, make_client: ClientFactory
) -> None:
    route_control(server)
    server.route("POST", CHAT, spaced(chat_chunks(["A"], reasoning=REASONING[:4])))
    stream_ = make_client(thinking_budget=5).chat(user(thinking=True))
    events, error = await drain(stream_)
    assert error is None
    assert events == [*reasoning_events(4), Content("A")]
    assert stream_.completion.thinking_capped is False
    assert controls(server) == []


async def test_no_budget_means_no_cap(server: FaultServer, make_client: ClientFactory) -> None:
    route_control(server)
    server.route("POST", CHAT, spaced(chat_chunks(["A"], reasoning=REASONING)))
    stream_ = make_client().chat(user(thinking=True))
    events, error = await drain(stream_)
    assert error is None
    assert events == [*reasoning_events(6), Content("A")]
    assert stream_.completion.thinking_capped is False
    assert controls(server) == []


async def test_request_budget_overrides_the_config(
    server: FaultServer, make_client: ClientFactory
) -> None:
    route_control(server)
    server.route("POST", CHAT, spaced(chat_chunks(["A"], reasoning=REASONING[:3])))
    stream_ = make_client(thinking_budget=100).chat(user(thinking=True, thinking_budget=2))
    events, error = await drain(stream_)
    assert error is None
    assert events == [*reasoning_events(2), ThinkingCapped(2), Reasoning(REASONING[2]),
                      Content("A")]
    assert stream_.completion.thinking_capped is True
    assert len(controls(server)) == 1


async def test_request_budget_zero_disables_the_config_cap(
    server: FaultServer, make_client: ClientFactory
) -> None:
    # ChatRequest: "thinking_budget ... 0 disables the cap the config sets".
    route_control(server)
    server.route("POST", CHAT, spaced(chat_chunks(["A"], reasoning=REASONING[:4])))
    stream_ = make_client(thinking_budget=2).chat(user(thinking=True, thinking_budget=0))
    events, error = await drain(stream_)
    assert error is None
    assert events == [*reasoning_events(4), Content("A")]
    assert stream_.completion.thinking_capped is False
    assert controls(server) == []


async def test_reasoning_past_budget_and_grace_raises_overrun(
    server: FaultServer, make_client: ClientFactory
) -> None:
    route_control(server)
    chunks = chat_chunks(["never"], reasoning=REASONING, finish_reason=None, done=False)
    server.route("POST", CHAT, [*spaced(chunks[:6], end=False), Hold()])
    client = make_client(thinking_budget=2, thinking_grace=3)  # overrun at 6 > 2 + 3
    events, error = await drain(client.chat(user(thinking=True)))
    # Every event the partial holds was delivered, the one that overran included.
    assert events == [*reasoning_events(2), ThinkingCapped(2), *reasoning_events(6)[2:]]
    assert isinstance(error, ThinkingOverrunError)
    assert error.partial is not None
    assert error.partial.reasoning_content == "".join(REASONING)
    assert error.partial.content is None
    assert error.partial.thinking_capped is True
    assert error.partial.finish_reason is None
    assert len(controls(server)) == 1
    await server.wait_disconnect(timeout=2.0)  # the client stopped the stream


async def test_a_control_call_that_never_answers_does_not_freeze_the_stream(
    server: FaultServer, make_client: ClientFactory
) -> None:
    # The control request is bounded like any other (wait_timeout): the stream goes on, and
    # never sits silent past stall_timeout or wait_timeout because of it.
    server.route("POST", CONTROL, [Hold(timeout=1.5)])
    server.route("POST", CHAT, spaced(chat_chunks(["Answer"], reasoning=REASONING[:4])))
    client = make_client(thinking_budget=1, wait_timeout=0.3, stall_timeout=0.3)
    loop = asyncio.get_running_loop()
    started = loop.time()
    stream_ = client.chat(user(thinking=True))
    events, error = await drain(stream_)
    elapsed = loop.time() - started
    assert error is None
    assert [e for e in events if not isinstance(e, ThinkingCapped)] == [
        *reasoning_events(4), Content("Answer")]
    assert stream_.completion.content == "Answer"
    assert elapsed < 1.2  # the server holds each request for 1.5 s


async def test_a_refused_control_call_is_not_reported_as_capped(
    server: FaultServer, make_client: ClientFactory
) -> None:
    # llama-server answers 200 {"success": false} when the completion has no reasoning control.
    refused = {"success": False, "message": "reasoning control not enabled for this completion"}
    server.route("POST", CONTROL, [Json(200, refused)])
    server.route("POST", CHAT, spaced(chat_chunks(["A"], reasoning=REASONING[:4])))
    stream_ = make_client(thinking_budget=1).chat(user(thinking=True))
    events, error = await drain(stream_)
    assert error is None
    assert events == [*reasoning_events(4), Content("A")]
    assert stream_.completion.thinking_capped is False
    assert len(controls(server)) == 1  # asked once, not once per token
