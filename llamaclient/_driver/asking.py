"""The side calls that go through a chat's policies (``embed``, ``rerank``): ``POST`` with
what comes before any output handled as a chat handles it. A refused connection or a busy
answer (429, 502, 503, 504) is retried with backoff, a server still loading its model is
waited for (within ``load_timeout``), every other answer is its typed error, without the
key."""

from __future__ import annotations

from typing import Any

import anyio
import msgspec

from .._protocol.retry import RETRYABLE_STATUS, backoff_seconds
from .._protocol.status import is_loading, status_error
from .._turn.secret import hide_key
from .._types.errors import ConnectError, LoadTimeoutError
from .endpoint import Endpoint

__all__ = ["InputUsage", "post_retrying"]


class InputUsage(msgspec.Struct):
    """An answer's ``usage``: the input tokens, as the server counted them."""

    prompt_tokens: int = 0


async def post_retrying(endpoint: Endpoint, path: str, body: dict[str, Any]) -> bytes:
    """``POST path`` with ``body`` (``Config.model`` in it for a router, see
    ``Endpoint.json_body``) under a chat's policies; the answer's body."""
    config = endpoint.config
    encoded = endpoint.json_body(body)
    attempt, loading_since = 0, None
    while True:
        try:
            status, data = await endpoint.call("POST", path, encoded)
        except ConnectError:
            if attempt >= config.max_retries:
                raise
            status, data = 0, b""
        if status and status < 300:
            return data
        if status and is_loading(status, data):
            now = anyio.current_time()
            loading_since = loading_since if loading_since is not None else now
            if now - loading_since > config.load_timeout:
                raise LoadTimeoutError(f"the model was still loading after {config.load_timeout} s")
            await anyio.sleep(0.2)
            continue
        if status and (status not in RETRYABLE_STATUS or attempt >= config.max_retries):
            error = status_error(status, data)
            hide_key(error, config.api_key)
            raise error
        attempt += 1
        await anyio.sleep(backoff_seconds(attempt, config.retry_backoff, config.retry_max_backoff))
