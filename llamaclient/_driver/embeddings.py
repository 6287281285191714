"""Embeddings on the same client as the chats (``Client.embed``): ``POST /v1/embeddings``
(a server started with ``--embeddings``), with a chat's policies for what comes before any
output (``asking.py``). The inputs go in batches, in order; the vectors come back as sent,
or scaled to length 1 (``normalize``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import msgspec

from .._types.errors import ProtocolError
from .asking import InputUsage, post_retrying
from .endpoint import Endpoint

__all__ = ["BATCH", "embed"]

BATCH = 32  # inputs a request
PATH = "/v1/embeddings"


class _Item(msgspec.Struct):
    embedding: list[float]
    index: int = 0


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
    data = await post_retrying(endpoint, PATH, {"input": inputs, "encoding_format": "float"})
    return _vectors(data, len(inputs))


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
