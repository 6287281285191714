"""What ``Client.rerank`` returns: each document's place by relevance to the query."""

from __future__ import annotations

import msgspec

__all__ = ["RerankResult"]


class RerankResult(msgspec.Struct, frozen=True, gc=False):
    """Document ``index`` (its place in the list given) with its relevance ``score`` (the
    reranker's raw score: higher is more relevant; not a probability) and its text."""

    index: int
    score: float
    document: str
