"""The loading phase: a large variant of the scripted model loads slowly enough to see 503s."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from devtools.llama_server import LlamaServer
from devtools.scripted_model import write_model
from devtools.scripts import request_body

LOADING = {"error": {"message": "Loading model", "type": "unavailable_error", "code": 503}}


@pytest.fixture
def large_model(tmp_path: Path) -> Iterator[Path]:
    path = write_model(tmp_path / "large.gguf", ffn_width=300_000)  # ~700 MB of zeros
    try:
        yield path
    finally:
        path.unlink()


def test_503_while_loading_then_ready(llama_server_binary: Path, large_model: Path) -> None:
    server = LlamaServer(
        large_model, "--load-mode", "none", "-np", "1", "-c", "1024", binary=llama_server_binary
    )
    server.start(wait_ready=False)
    try:
        body = request_body("reasoning_answer")
        seen: list[int] = []
        deadline = time.monotonic() + 60
        with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=30) as client:
            while not seen or seen[-1] != 200:
                assert time.monotonic() < deadline, seen
                try:
                    resp = client.post("/v1/chat/completions", json=body)
                except httpx.TransportError:  # not listening yet, or closed after the 503
                    time.sleep(0.01)
                    continue
                if resp.status_code == 503:
                    assert resp.json() == LOADING
                seen.append(resp.status_code)
        assert seen[0] == 503, "the model loaded before any request was answered"
        assert set(seen) == {503, 200}
    finally:
        server.stop()
