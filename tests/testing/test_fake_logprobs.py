"""The testing kit's log-probabilities: ``FakeLlama.reply(confidence=...)`` gives each token
its probability, sent the way llama-server sends it (``logprobs.content`` on each token's
chunk, ``n_probs`` alternatives) to a request that asks, so an agent's "ask again when
unsure" logic can be tested offline; and ``logprobs`` with tools while streaming is the
server's 400."""

from __future__ import annotations

import math

import msgspec
import pytest

from llamaclient import (
    ArgumentDelta,
    ChatRequest,
    Confidence,
    HTTPStatusError,
    ToolSchema,
    UserMessage,
)
from llamaclient.testing import FakeLlama, Reply

pytestmark = pytest.mark.anyio

READ = ToolSchema(
    "read_file", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}}
)
CALL = {"id": "c1", "name": "read_file", "arguments": '{"path": "notes.txt"}'}


async def test_each_token_has_the_probability_it_was_given() -> None:
    fake = FakeLlama().reply("one two three", confidence=[0.5, 0.25])
    async with fake.client() as client:
        completion = await client.complete(ChatRequest([UserMessage("hi")], top_logprobs=2))
    tokens = completion.logprobs
    assert tokens is not None
    assert [t.token for t in tokens] == ["one", " two", " three"]
    assert [t.probability for t in tokens] == pytest.approx([0.5, 0.25, 1.0])
    assert [len(t.top_logprobs) for t in tokens] == [2, 2, 1]  # the rest, when there is some
    assert tokens[0].top_logprobs[1].probability == pytest.approx(0.5)


async def test_no_logprobs_unless_asked() -> None:
    fake = FakeLlama().reply("one two", confidence=0.5)
    async with fake.client() as client:
        completion = await client.complete(ChatRequest([UserMessage("hi")]))
    assert completion.logprobs is None


async def test_an_uncertain_argument_shows_in_its_fields_confidence() -> None:
    # the call's pieces, 4 characters each: '{"pa', 'th":', ' "no', 'tes.', 'txt"', '}'
    sure = [1.0, 1.0, 1.0, 0.2, 1.0, 1.0]
    fake = FakeLlama().reply(Reply(tool_calls=[CALL], chunk=4, confidence=sure))
    request = ChatRequest([UserMessage("hi")], tools=[READ], top_logprobs=1)
    async with fake.client() as client:
        stream = client.chat(request, live_arguments=True)
        events = [e async for e in stream]
    assert fake.requests[0].body["n_probs"] == 1  # with tools: n_probs
    assert stream.completion is not None
    (call,) = stream.completion.tool_calls
    expected = Confidence(0.2, math.fsum([1.0, 0.2, 1.0]) / 3, 3)  # ' "no', 'tes.', 'txt"'
    assert call.confidence == {"path": expected}
    done = [e for e in events if isinstance(e, ArgumentDelta) and e.done]
    assert [e.confidence for e in done] == [expected]


async def test_logprobs_with_tools_while_streaming_is_the_servers_400() -> None:
    fake = FakeLlama().reply("unused")
    extra = {"logprobs": True, "top_logprobs": 2}
    request = ChatRequest([UserMessage("hi")], tools=[READ], extra=extra)
    async with fake.client() as client:
        with pytest.raises(HTTPStatusError) as caught:
            await client.complete(request)
    assert (caught.value.status, caught.value.type) == (400, "invalid_request_error")
    assert "logprobs is not supported with tools + stream" in str(caught.value)
    assert fake.pending == 1  # the reply is still queued


def test_confidence_must_be_probabilities() -> None:
    for bad in (0.0, 1.5, [0.5, -1]):
        with pytest.raises(ValueError, match="confidence"):
            Reply("x", confidence=bad)
    assert msgspec.json.encode(Reply("x").confidence) == b"1.0"
