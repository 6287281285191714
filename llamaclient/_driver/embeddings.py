"""Embeddings on the same client as the chats (``Client.embed``): ``POST /v1/embeddings``
(a server started with ``--embeddings``), with a chat's policies for what comes before any
output: a refused connection or a busy answer (429, 502, 503, 504) is retried with backoff,
a server still loading its model is waited for (``/health``, within ``load_timeout``), every
other answer is its typed error. The inputs go in batches, in order; the vectors come back
as sent, or scaled to length 1 (``normalize``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import anyio
import msgspec

from .._protocol.retry import RETRYABLE_STATUS, backoff_seconds
from .._protocol.status import is_loading, status_error
from .._turn.secret import hide_key
from .._types.errors import ConnectError, LoadTimeoutError, ProtocolError
from .endpoint import Endpoint

__all__ = ["BATCH", "InputUsage", "embed", "post"]

BATCH = 32  # inputs a request
PATH = "/v1/embeddings"


class _Item(msgspec.Struct):
    embedding: list[float]
    index: int = 0


class InputUsage(msgspec.Struct):
    """An answer's ``usage``: the input tokens, as the server counted them."""

    prompt_tokens: int = 0


class _Answer(msgspec.Struct):
    data: list[_Item]
    usage: InputUsage | None = None


_DECODER = msgspec.json.Decoder(_Answer)


async def embed(
    endpoint: Endpoint,
    inputs: Sequence[str],
    normalize: bool,
    batch: int,
    counted: Callable[[int], object] | None = None,
) -> list[list[float]]:
    """The vectors of ``inputs``, in order (``batch`` inputs a request); ``counted`` gets
    each batch's input tokens, as the server counted them."""
    vectors: list[list[float]] = []
    for start in range(0, len(inputs), batch):
        found, tokens = await _batch(endpoint, list(inputs[start : start + batch]))
        vectors += found
        if counted is not None:
            counted(tokens)
    return [_unit(v) for v in vectors] if normalize else vectors


async def _batch(endpoint: Endpoint, inputs: list[str]) -> tuple[list[list[float]], int]:
    body: dict[str, object] = {"input": inputs, "encoding_format": "float"}
    if endpoint.config.model:
        body["model"] = endpoint.config.model
    data = await post(endpoint, PATH, msgspec.json.encode(body))
    return _vectors(data, len(inputs))


async def post(endpoint: Endpoint, path: str, body: bytes) -> bytes:
    """``POST path`` with a chat's policies before output: a refused connection or a busy
    answer retried with backoff, a loading model waited for, any other refusal its typed
    error (without the key); the answer's body."""
    config = endpoint.config
    attempt, loading_since = 0, None
    while True:
        try:
            status, data = await endpoint.call("POST", path, body)
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


def _vectors(data: bytes, count: int) -> tuple[list[list[float]], int]:
    """The vectors in input order, and the input tokens (0: not counted)."""
    try:
        answer = _DECODER.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ProtocolError(f"POST {PATH}: not an embeddings answer ({exc})", data) from None
    items = sorted(answer.data, key=lambda item: item.index)
    if len(items) != count:
        raise ProtocolError(f"POST {PATH}: {len(items)} vectors for {count} inputs", data)
    tokens = answer.usage.prompt_tokens if answer.usage is not None else 0
    return [item.embedding for item in items], tokens


def _unit(vector: list[float]) -> list[float]:
    length = math.sqrt(sum(x * x for x in vector))
    return vector if length == 0 else [x / length for x in vector]
