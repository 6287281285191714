"""Usage totals: ``client.usage`` and ``pool.usage`` per model, kept as each turn ends (a
finished turn, a failed one with what it had generated, a stopped one; not one stopped
before its chat went out); ``Usage``, ``ModelUsage`` and ``UsageTotals`` add up."""

from __future__ import annotations

import pytest

from llamaclient import (
    ChatRequest,
    Client,
    Config,
    ModelUsage,
    Pool,
    ServerError,
    Usage,
    UsageTotals,
    UserMessage,
    sync,
)
from llamaclient.testing import FakeLlama
from tests.conftest import CHAT, ClientFactory, drain, user
from tests.support.faultserver import (
    DEFAULT_MODEL,
    PROMPT_SPEED,
    SPEED,
    FaultServer,
    chat_chunks,
    error_event,
    stream,
)

pytestmark = pytest.mark.anyio

ANSWER = ["One", " two", " three"]  # 3 tokens, after a 20-token prompt (the fault server's)


async def test_each_finished_turn_adds_its_tokens_and_times(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("POST", CHAT, stream(chat_chunks(ANSWER)))
    client = make_client()
    assert dict(client.usage) == {}
    for _ in range(2):
        await client.chat(user()).collect()
    one = client.usage[DEFAULT_MODEL]
    assert (one.requests, one.failures) == (2, 0)
    assert (one.prompt_tokens, one.cached_tokens, one.generated_tokens) == (40, 0, 6)
    assert one.prefill_seconds == pytest.approx(2 * 20 * PROMPT_SPEED / 1000)
    assert one.decode_seconds == pytest.approx(2 * 3 * SPEED / 1000)
    assert client.usage.total == one


async def test_a_failed_turn_counts_as_a_failure_with_what_it_generated(
    server: FaultServer, make_client: ClientFactory
) -> None:
    events = chat_chunks(ANSWER, finish_reason=None, usage=False, done=False)
    server.route("POST", CHAT, stream([*events, error_event("boom")]))
    client = make_client()
    _, error = await drain(client.chat(user()))
    assert isinstance(error, ServerError)
    failed = client.usage[DEFAULT_MODEL]
    assert (failed.requests, failed.failures, failed.generated_tokens) == (1, 1, 3)


async def test_a_stream_stopped_before_its_chat_went_out_is_not_a_request(
    server: FaultServer, make_client: ClientFactory
) -> None:
    client = make_client()
    chat = client.chat(user())
    await chat.aclose()
    assert dict(client.usage) == {}


async def test_a_stopped_stream_is_a_request_with_what_it_generated(
    server: FaultServer, make_client: ClientFactory
) -> None:
    server.route("POST", CHAT, stream(chat_chunks(ANSWER), end=False))
    client = make_client()
    async with client.chat(user()) as chat:
        async for _ in chat:
            break
    stopped = client.usage.total
    assert (stopped.requests, stopped.failures) == (1, 0)


def test_the_totals_add_up() -> None:
    a = ModelUsage(1, 0, 10, 4, 5, 2, 0.5, 1.0)
    b = ModelUsage(2, 1, 20, 0, 7, 0, 0.25, 0.5)
    assert a + b == ModelUsage(3, 1, 30, 4, 12, 2, 0.75, 1.5)
    x, y = UsageTotals({"m": a}), UsageTotals({"m": b, "n": a})
    both = x + y
    assert dict(both) == {"m": a + b, "n": a}
    assert both.total == a + b + a
    assert dict(x) == {"m": a}  # a new total: the parts are left as they were
    assert Usage(10, 5, None) + Usage(2, None, None) + Usage(None, 1, 3) == Usage(12, 6, 3)
    assert sum([Usage(1, 1, 1)] * 3, Usage()) == Usage(3, 3, 3)
    with pytest.raises(TypeError):
        a + 1  # type: ignore[operator]


async def test_a_pools_usage_is_its_servers_added_up() -> None:
    fakes = [FakeLlama().reply("a").reply("a").reply("a").reply("a") for _ in range(2)]
    configs = [Config(f.url, max_tokens=16) for f in fakes]
    async with Pool(configs, transports=[f.transport() for f in fakes]) as pool:
        for session in ("s1", "s2", "s3", "s4"):
            await pool.complete(ChatRequest([UserMessage("hi")], session=session))
        total = pool.usage.total
        assert total.requests == 4
        assert total == pool.clients[0].usage.total + pool.clients[1].usage.total
        assert dict(pool.usage) == dict(pool.clients[0].usage + pool.clients[1].usage)


def test_the_sync_clients_usage() -> None:
    fake = FakeLlama().reply("a")
    with sync.Client(Config(fake.url, max_tokens=16), transport=fake.transport()) as client:
        client.complete(ChatRequest([UserMessage("hi")]))
        assert client.usage.total.requests == 1


async def test_usage_is_kept_without_anything_watching(server: FaultServer) -> None:
    """Always on: no instrument needed."""
    server.route("POST", CHAT, stream(chat_chunks(ANSWER)))
    async with Client(Config(server.url, max_tokens=16)) as client:
        client.instruments.clear()
        await client.chat(user()).collect()
        assert client.usage.total.generated_tokens == 3
