"""The thinking budget, as decisions: past ``budget`` reasoning tokens, ask the server to end
the reasoning (``POST /v1/chat/completions/control``, once); past ``budget + grace``, stop the
stream. Checked after every payload, so the cap does not depend on how the bytes were split
into reads. ``ThinkingCapped`` is shown only when the server accepted the call."""

from __future__ import annotations

from typing import Literal

import msgspec

from .._protocol.assembler import Assembler
from .._types.errors import ThinkingOverrunError

__all__ = ["CONTROL_PATH", "Budget", "accepted", "control_body"]

CONTROL_PATH = "/v1/chat/completions/control"


class Budget:
    """One turn's budget; ``capped`` once the server accepted the end of the reasoning."""

    __slots__ = ("asked", "capped", "grace", "limit")

    def __init__(self, limit: int, grace: int) -> None:
        self.limit = limit
        self.grace = grace
        self.asked = False
        self.capped = False

    @classmethod
    def of(cls, requested: int | None, configured: int | None, grace: int) -> Budget | None:
        """The request's budget (0 turns the config's off), else the config's, else None."""
        limit = configured if requested is None else requested or None
        return None if limit is None else cls(limit, grace)

    def after(self, asm: Assembler) -> Literal["ask", "over"] | None:
        """After a payload: ``"ask"`` the server to end the reasoning (once, past the
        budget: the caller then calls :meth:`answered`), ``"over"`` past the grace."""
        if not asm.in_reasoning:
            return None
        tokens = asm.reasoning_tokens
        if not self.asked and tokens >= self.limit:
            self.asked = True
            return "ask" if asm.id else None  # without an id there is nothing to name
        if self.asked and tokens > self.limit + self.grace:
            return "over"
        return None

    def overrun(self, asm: Assembler) -> ThinkingOverrunError:
        tokens = asm.reasoning_tokens
        refused = "" if self.capped else " (the server refused to end it)"
        return ThinkingOverrunError(
            f"reasoning went on for {tokens} tokens past a budget of {self.limit}{refused}",
            partial=asm.partial(self.capped),
        )


def control_body(completion_id: str, model: str) -> bytes:
    body = {"id": completion_id, "action": "reasoning_end"}
    if model:
        body["model"] = model
    return msgspec.json.encode(body)


def accepted(status: int, data: bytes) -> bool:
    return status == 200 and b'"success":true' in data
