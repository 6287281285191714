"""In-band error through our ``Client`` (wire §9 scenario 25): four concurrent streams overflow
a small unified KV pool; the ones that fail raise ``ServerError`` with everything generated so
far in ``partial``, and the others finish normally."""

from __future__ import annotations

import anyio
import pytest

from llamaclient import ChatEvent, Client, Content, FinishReason, Reasoning, ServerError
from tests.live.chat import ID_RE, drain, output, script_request, text_of

LLAMA_SERVER_FLAGS = ("-c", "256", "-np", "4", "--kv-unified")
MAX_TOKENS = 160


pytestmark = pytest.mark.anyio


async def test_unified_kv_overflow_raises_server_error_with_partial(live_client: Client) -> None:
    # Any two of them running at once overflow the 256 cells (2 x 160 tokens), one alone
    # fits: with 90 each, three had to overlap, and on a loaded machine (CI, another job)
    # sometimes none did.
    request = script_request("long_answer", max_tokens=MAX_TOKENS, thinking=False)
    streams = [live_client.chat(request) for _ in range(4)]
    results: list[tuple[list[ChatEvent], BaseException | None]] = [([], None)] * len(streams)

    async def run(i: int) -> None:
        results[i] = await drain(streams[i])

    async with anyio.create_task_group() as tg:
        for i in range(len(streams)):
            tg.start_soon(run, i)
    failed = [(events, error) for events, error in results if error is not None]
    assert failed, "no stream overflowed"
    for events, error in failed:
        assert isinstance(error, ServerError), error
        assert (error.code, error.type) == (500, "server_error")
        assert error.message == "Context size has been exceeded."
        partial = error.partial
        assert partial is not None
        assert ID_RE.match(partial.id)
        assert partial.finish_reason is None
        assert partial.content is not None
        assert partial.content.startswith("Counting: tick tock")
        # Nothing generated is lost, and the events already told all of it.
        assert partial.content == text_of(events, Content)
        assert not [e for e in events if isinstance(e, Reasoning)]
    for stream, (events, end) in zip(streams, results, strict=True):
        if end is None:
            completion = stream.completion
            assert completion.finish_reason is FinishReason.LENGTH
            assert completion.usage.completion_tokens == MAX_TOKENS
            assert completion.content == text_of(output(events), Content)
    # The failed streams were closed: every slot is idle again.
    assert not [s.id for s in await live_client.slots() if s.is_processing]
