"""The loading phase through our ``Client``: a chat sent while the server still loads a large
variant of the scripted model gets 503 ``Loading model``; the client yields
``Waiting(slot_busy=False)``, polls ``/health`` and then streams the answer."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from devtools.llama_server import LlamaServer, health_status
from devtools.scripted_model import write_model
from llamaclient import Client, Content, FinishReason, Progress, Reasoning, Waiting
from tests.live.chat import TransportName, drain, live_config, script_request


@pytest.fixture(scope="module")
def large_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = write_model(tmp_path_factory.mktemp("large") / "large.gguf", ffn_width=300_000)
    try:
        yield path
    finally:
        path.unlink()


pytestmark = pytest.mark.anyio


async def test_chat_while_the_model_loads(
    llama_server_binary: Path, large_model: Path, live_transport: TransportName
) -> None:
    server = LlamaServer(
        large_model, "--load-mode", "none", "-np", "1", "-c", "1024", binary=llama_server_binary
    )
    server.start(wait_ready=False)
    try:
        deadline = time.monotonic() + 30
        while (status := health_status(server.port, timeout=1.0)) is None:
            assert server.returncode is None, server.log_text()[-2000:]
            assert time.monotonic() < deadline, "the server never listened"
            await anyio.sleep(0.005)
        assert status == 503, "the model loaded before the test could send anything"
        config = live_config(server.base_url, live_transport, max_retries=0)
        async with Client(config) as client:
            stream = client.chat(script_request("reasoning_answer"))
            events, error = await drain(stream)
        assert error is None
        assert events[0] == Waiting(slot_busy=False)
        assert events.count(Waiting(slot_busy=False)) == 1
        assert [type(e) for e in events[1:] if not isinstance(e, Progress)] == [Reasoning, Content]
        assert stream.completion.content == "Done."
        assert stream.completion.finish_reason is FinishReason.STOP
        assert health_status(server.port) == 200
    finally:
        server.stop()
