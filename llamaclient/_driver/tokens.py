"""Counting and tokenizing on the server: ``Client.count_tokens``, ``tokenize`` and
``detokenize`` (the pre-flight stage of a turn counts the same way, ``_turn/preflight.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from .._protocol.wire import ANY_DECODER
from .._turn.known import Known
from .._turn.preflight import INPUT_TOKENS_PATH, count_body, tokens_counted
from .._types.errors import HTTPStatusError, ProtocolError
from .._types.server import TokenPiece
from .endpoint import Endpoint

__all__ = ["count_tokens", "detokenize", "tokenize"]

_MISSING = frozenset({404, 405, 501})


async def count_tokens(endpoint: Endpoint, known: Known, body: bytes) -> int:
    """The prompt tokens of the chat ``body``: the server's own count where the build has
    ``/v1/chat/completions/input_tokens`` (learnt once), else its template then its
    tokenizer."""
    if known.input_tokens is not False:
        try:
            data = await endpoint.post(INPUT_TOKENS_PATH, body)
        except HTTPStatusError as exc:
            if exc.status not in _MISSING:
                raise
            known.input_tokens = False
        else:
            known.input_tokens = True
            return _counted(data, INPUT_TOKENS_PATH)
    data = await endpoint.post("/apply-template", body)
    prompt = _decoded(data, "/apply-template").get("prompt")
    if not isinstance(prompt, str):
        raise ProtocolError("POST /apply-template: no prompt in the answer", data)
    data = await endpoint.post("/tokenize", count_body(prompt))
    return _counted(data, "/tokenize")


async def tokenize(
    endpoint: Endpoint, text: str, add_special: bool, parse_special: bool, pieces: bool
) -> list[int] | list[TokenPiece]:
    body = {"content": text, "add_special": add_special, "parse_special": parse_special}
    answer = await endpoint.post_json("/tokenize", {**body, "with_pieces": pieces})
    tokens = answer.get("tokens") if isinstance(answer, dict) else None
    try:
        if pieces:
            return msgspec.convert(tokens, list[TokenPiece])
        return msgspec.convert(tokens, list[int])
    except msgspec.ValidationError as exc:
        raise ProtocolError(f"POST /tokenize: not a token list ({exc})", f"{answer}") from None


async def detokenize(endpoint: Endpoint, ids: Sequence[int]) -> str:
    answer = await endpoint.post_json("/detokenize", {"tokens": list(ids)})
    content = answer.get("content") if isinstance(answer, dict) else None
    if not isinstance(content, str):
        raise ProtocolError("POST /detokenize: no content in the answer", f"{answer}")
    return content


def _decoded(data: bytes, path: str) -> dict[str, Any]:
    try:
        answer = ANY_DECODER.decode(data)
    except (msgspec.DecodeError, RecursionError):
        answer = None
    if not isinstance(answer, dict):
        raise ProtocolError(f"POST {path}: the answer is not a JSON object", data)
    return answer


def _counted(data: bytes, path: str) -> int:
    count = tokens_counted(data)
    if count is None:
        raise ProtocolError(f"POST {path}: no token count in the answer", data)
    return count
