"""In-band error (wire §9 scenario 25): concurrent streams overflow a small unified KV pool."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from devtools.scripts import request_body
from tests.live.wire import Stream, read_stream

LLAMA_SERVER_FLAGS = ("-c", "256", "-np", "4", "--kv-unified")
ERROR = {"code": 500, "message": "Context size has been exceeded.", "type": "server_error"}


@pytest.mark.asyncio
async def test_unified_kv_overflow_is_an_in_band_error(base_url: str) -> None:
    body = request_body(
        "long_answer", max_tokens=90, chat_template_kwargs={"enable_thinking": False}
    )
    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=base_url, limits=limits) as client:
        streams: list[Stream] = await asyncio.gather(*(read_stream(client, body) for _ in range(4)))
    assert [s.status for s in streams] == [200] * 4
    failed = [s for s in streams if not s.done]
    assert failed, "no stream overflowed"
    for stream in failed:
        assert stream.events[-1] == {"error": ERROR}
        assert stream.raw.endswith(b'data: {"error":' + stream.raw.rsplit(b'{"error":', 1)[1])
        assert b"[DONE]" not in stream.raw
        assert stream.finish_reasons == []
    for stream in streams:
        if stream.done:
            assert stream.finish_reasons == ["length"]
