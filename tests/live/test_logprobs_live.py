"""The model's confidence on a real llama-server (the scripted model, whose logits are known
by construction: the bigram table's levels, scaled by the RMS norm's ``1/sqrt(1 + eps *
n_embd)``, and 0 for every other token).

- Every token's log-probability, and its alternatives', is the softmax of those logits to
  1e-3: on an answer (sent as ``logprobs``) and on tool calls (sent as ``n_probs``, which
  llama-server takes with tools while streaming; ``logprobs`` there is a 400).
- A tool call's fields get their confidence live (``ArgumentDelta(done=True)``), the same
  as ``ToolCall.confidence`` after; ``Completion.logprobs`` is the events' tokens. Where a
  script's logit bias forces the model's third choice, the field's confidence shows it:
  e^-20 (the probabilities are the model's, before the bias).
- ``top_logprobs=0`` keeps no alternatives, also where it went as ``n_probs: 1``.
"""

from __future__ import annotations

import math

import httpx
import msgspec
import pytest

from devtools.scripted_model import _dims
from devtools.vocab import DEFAULT_NEXT, GRAPH, LEVELS, TOKEN_IDS
from llamaclient import (
    ArgumentDelta,
    ChatEvent,
    Client,
    Completion,
    Content,
    Reasoning,
    TokenLogprob,
    ToolCallDelta,
)
from tests.live.chat import script_request

pytestmark = pytest.mark.anyio

N_VOCAB, N_EMBD, _ = _dims()
SCALE = 1 / math.sqrt(1 + 1e-6 * N_EMBD)  # llama's RMS norm of a one-hot embedding


def _logits(nexts: list[str]) -> dict[int, float]:
    """The logits that are not 0 after a token whose bigram row is ``nexts``."""
    return {TOKEN_IDS[n]: level * SCALE for level, n in zip(LEVELS, nexts, strict=False)}


def _logprob(token: int, logits: dict[int, float]) -> float:
    others = N_VOCAB - len(logits)
    norm = math.log(math.fsum(math.exp(v) for v in logits.values()) + others)
    return logits.get(token, 0.0) - norm


# Every previous token's distribution: the graph's rows (keyed by script-token names and
# texts), and the end of the turn after any other token.
DISTRIBUTIONS = [_logits(nexts) for nexts in GRAPH.values()] + [_logits([DEFAULT_NEXT])]


def explained(t: TokenLogprob) -> bool:
    """Some previous token's distribution gives this token and each alternative its
    log-probability, to 1e-3."""
    entries = [(t.id, t.logprob), *((a.id, a.logprob) for a in t.top_logprobs)]
    return any(
        all(i is not None and abs(_logprob(i, logits) - lp) < 1e-3 for i, lp in entries)
        for logits in DISTRIBUTIONS
    )


async def run(client: Client, name: str, top: int) -> tuple[list[ChatEvent], Completion]:
    stream = client.chat(script_request(name, top_logprobs=top), live_arguments=True)
    events = [e async for e in stream]
    assert stream.completion is not None
    return events, stream.completion


def carried(events: list[ChatEvent]) -> tuple[TokenLogprob, ...]:
    return tuple(
        t
        for e in events
        if isinstance(e, Reasoning | Content | ToolCallDelta) and e.logprobs
        for t in e.logprobs
    )


async def test_an_answers_tokens_are_the_known_softmax(live_client: Client) -> None:
    events, completion = await run(live_client, "reasoning_answer", 2)
    tokens = completion.logprobs
    assert tokens is not None
    assert tokens == carried(events)
    assert "".join(t.token for t in tokens) == (completion.reasoning_content or "") + (
        completion.content or ""
    )
    for t in tokens:
        assert len(t.top_logprobs) == 2
        assert t.top_logprobs[0].id == t.id  # temperature 0: the most likely token
        assert explained(t), t
    first = tokens[0]  # three candidates at 30, 20, 10: the top one misses e^-10 of 1
    assert first.probability == pytest.approx(1 - math.exp(-10 * SCALE), abs=1e-6)


@pytest.mark.parametrize("name", ["tool_call", "write_file"])
async def test_a_tool_calls_fields_get_the_confidence_of_their_tokens(
    live_client: Client, name: str
) -> None:
    events, completion = await run(live_client, name, 2)
    assert completion.logprobs == carried(events)
    assert all(explained(t) for t in completion.logprobs or ())
    (call,) = completion.tool_calls
    assert call.confidence is not None
    assert set(call.confidence) == set(msgspec.json.decode(call.arguments))
    done = {e.field: e.confidence for e in events if isinstance(e, ArgumentDelta) and e.done}
    assert done == dict(call.confidence)  # live, the same as after
    for field, sure in call.confidence.items():
        assert 0 < sure.min <= sure.mean <= 1.0, field
        assert 1 <= sure.tokens <= len(completion.logprobs or ())
    if name == "tool_call":  # every token the model's first choice
        assert call.confidence["path"].min > 0.9999
    else:  # the script's logit bias forces a third choice (level 10 of 30) in each field
        forced = math.exp(-20 * SCALE)
        assert call.confidence["path"].min == pytest.approx(forced, rel=1e-3)
        assert call.confidence["content"].min == pytest.approx(forced, rel=1e-3)
        content = call.confidence["content"]
        assert content.mean == pytest.approx((content.tokens - 1 + forced) / content.tokens)


async def test_no_alternatives_when_none_were_asked_for(live_client: Client) -> None:
    for name in ("reasoning_answer", "tool_call"):  # sent as logprobs, then as n_probs: 1
        _, completion = await run(live_client, name, 0)
        assert completion.logprobs
        assert all(t.top_logprobs == () for t in completion.logprobs)


async def test_the_server_refuses_logprobs_with_tools_while_streaming(base_url: str) -> None:
    """Why tools go as ``n_probs``: the pinned build's answer to ``logprobs`` there."""
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        "stream": True,
        "logprobs": True,
    }
    async with httpx.AsyncClient(base_url=base_url) as http:
        answer = await http.post("/v1/chat/completions", json=body)
    assert answer.status_code == 400
    assert "logprobs is not supported with tools + stream" in answer.text
