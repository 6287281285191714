"""The thinking budget: past ``budget`` reasoning tokens, ask the server to end the reasoning
(``POST /v1/chat/completions/control``, once); past ``budget + grace``, stop the stream.

``ThinkingCapped`` is yielded only when the server accepted the call. Checked after every
payload, so the cap does not depend on how the bytes were split into reads.
"""

from __future__ import annotations

import msgspec

from .._protocol.assembler import Assembler
from .._types.errors import ConnectError, ThinkingOverrunError, WaitTimeoutError
from .._types.events import ChatEvent, ThinkingCapped
from .endpoint import Endpoint

__all__ = ["CONTROL_PATH", "ThinkingBudget", "end_reasoning"]

CONTROL_PATH = "/v1/chat/completions/control"


async def end_reasoning(endpoint: Endpoint, completion_id: str | None) -> bool:
    """Ask the server to end the reasoning of ``completion_id`` now; True if it accepted."""
    if not completion_id:
        return False
    body: dict[str, str] = {"id": completion_id, "action": "reasoning_end"}
    if endpoint.config.model:
        body["model"] = endpoint.config.model
    try:
        status, data = await endpoint.call("POST", CONTROL_PATH, msgspec.json.encode(body))
    except (ConnectError, WaitTimeoutError):
        return False
    return status == 200 and b'"success":true' in data


class ThinkingBudget:
    """One stream's budget; ``capped`` once the server accepted the end of the reasoning."""

    __slots__ = ("_asked", "_endpoint", "budget", "capped", "grace")

    def __init__(self, endpoint: Endpoint, budget: int, grace: int) -> None:
        self._endpoint = endpoint
        self.budget = budget
        self.grace = grace
        self._asked = False
        self.capped = False

    @classmethod
    def for_request(cls, endpoint: Endpoint, requested: int | None) -> ThinkingBudget | None:
        """The request's budget (0 turns the config's off), else the config's, else None."""
        config = endpoint.config
        budget = config.thinking_budget if requested is None else requested or None
        return None if budget is None else cls(endpoint, budget, config.thinking_grace)

    async def check(self, asm: Assembler, events: list[ChatEvent]) -> None:
        """After a payload: end the reasoning once past the budget (appending
        ``ThinkingCapped`` to ``events``); raise once past budget + grace."""
        if not asm.in_reasoning:
            return
        tokens = asm.reasoning_tokens
        if not self._asked and tokens >= self.budget:
            self._asked = True
            if await end_reasoning(self._endpoint, asm.id):
                self.capped = True
                events.append(ThinkingCapped(tokens))
        elif self._asked and tokens > self.budget + self.grace:
            raise ThinkingOverrunError(
                f"reasoning went on for {tokens} tokens past a budget of {self.budget}"
                + ("" if self.capped else " (the server refused to end it)"),
                partial=asm.partial(self.capped),
            )
