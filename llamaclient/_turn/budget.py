"""The thinking budget, as decisions: past ``budget`` reasoning tokens, ask the server to end
the reasoning (``POST /v1/chat/completions/control``, once); past ``budget + grace``, stop the
stream. Checked after every payload, so the cap does not depend on how the bytes were split
into reads. ``ThinkingCapped`` is shown when the server accepted the call, or when the
reasoning ended at the server's own budget (the body's ``reasoning_budget_tokens``: the
backstop ``grace`` tokens later, or, through a proxy that passes no control call, the budget
itself). llama-server's budget of ``n`` ends the reasoning after ``n - 1`` tokens as
``timings.predicted_n`` counts them (measured on the pinned build, directly and through
LiteLLM)."""

from __future__ import annotations

from typing import Literal

import msgspec

from .._protocol.assembler import Assembler
from .._protocol.body import server_budget
from .._types.errors import ThinkingOverrunError

__all__ = ["CONTROL_PATH", "Budget", "accepted", "control_body"]

CONTROL_PATH = "/v1/chat/completions/control"


class Budget:
    """One turn's budget; ``capped`` once the server accepted the end of the reasoning, or
    its own budget ended it. ``proxied``: no control call can reach the server, and the body
    carries the budget itself."""

    __slots__ = ("asked", "capped", "grace", "limit", "proxied", "reasoned", "server")

    def __init__(self, limit: int, grace: int, proxied: bool = False) -> None:
        self.limit = limit
        self.grace = grace
        self.proxied = proxied
        self.server = server_budget(limit, grace, proxied)  # the body's
        self.asked = False
        self.capped = False
        self.reasoned = False  # the reasoning has started

    @classmethod
    def of(cls, limit: int | None, grace: int, proxied: bool = False) -> Budget | None:
        """The budget of ``limit`` tokens (None: no cap)."""
        return None if limit is None else cls(limit, grace, proxied)

    def after(self, asm: Assembler) -> Literal["ask", "over", "ended"] | None:
        """After a payload: ``"ask"`` the server to end the reasoning (once, past the
        budget: the caller then calls :meth:`answered`), ``"over"`` past the grace,
        ``"ended"`` when the reasoning just ended at the server's own budget."""
        tokens = asm.reasoning_tokens
        if not asm.in_reasoning:
            if self.reasoned and not self.capped and tokens >= self.server - 1:
                self.capped = True
                return "ended"
            return None
        self.reasoned = True
        if not self.asked and tokens >= self.limit:
            self.asked = True
            return "ask" if asm.id and not self.proxied else None
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
