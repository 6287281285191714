"""Reranking on the same client as the chats (``Client.rerank``): ``POST /v1/rerank`` (a
server started with ``--reranking``), with a chat's policies before output
(``asking.py``). The documents come back most relevant first, each with its index in
the list given and its score; ``top_n`` keeps that many."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from .._types.errors import ProtocolError
from .._types.ranking import RerankResult
from .asking import InputUsage, post_retrying
from .endpoint import Endpoint

__all__ = ["rerank"]

PATH = "/v1/rerank"


class _Item(msgspec.Struct):
    index: int
    relevance_score: float


class _Answer(msgspec.Struct):
    results: list[_Item]
    usage: InputUsage | None = None


_DECODER = msgspec.json.Decoder(_Answer)


async def rerank(
    endpoint: Endpoint,
    query: str,
    documents: Sequence[str],
    top_n: int | None,
    counted: Callable[[int], object] | None = None,
) -> list[RerankResult]:
    """The documents by relevance to ``query``, most relevant first (``top_n`` of them);
    ``counted`` gets the input tokens, as the server counted them."""
    if not documents:
        return []
    body: dict[str, object] = {"query": query, "documents": list(documents)}
    if top_n is not None:
        body["top_n"] = top_n
    data = await post_retrying(endpoint, PATH, body)
    try:
        answer = _DECODER.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ProtocolError(f"POST {PATH}: not a rerank answer ({exc})", data) from None
    indexes = [item.index for item in answer.results]
    if len(set(indexes)) != len(indexes) or any(not 0 <= i < len(documents) for i in indexes):
        raise ProtocolError(f"POST {PATH}: indexes {indexes} for {len(documents)} documents", data)
    if counted is not None and answer.usage is not None:
        counted(answer.usage.prompt_tokens)
    ranked = sorted(answer.results, key=lambda item: (-item.relevance_score, item.index))
    kept = ranked if top_n is None else ranked[:top_n]
    return [RerankResult(i.index, i.relevance_score, documents[i.index]) for i in kept]
