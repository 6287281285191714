"""What a finished chat gives back: the Completion, its timings and usage."""

from __future__ import annotations

import enum
from typing import Any

import msgspec

from .cache import CacheReport
from .logprobs import TokenLogprob
from .messages import AssistantMessage, ReasoningField, ToolCall
from .openai import message_to_openai

__all__ = ["Completion", "FinishReason", "Timings", "Usage"]


class FinishReason(enum.StrEnum):
    """Why generation ended: the model stopped, it called tools, or a token limit hit."""

    STOP = "stop"
    TOOL_CALLS = "tool_calls"
    LENGTH = "length"


class Timings(msgspec.Struct, frozen=True, gc=False):
    """The server's own timings (the latest seen). ``cache_n`` prompt tokens came from the
    prompt cache, ``prompt_n`` were evaluated, ``predicted_n`` were generated.

    With speculative decoding (llama-server ``--model-draft``), ``draft_n`` tokens were
    drafted and ``draft_n_accepted`` of them accepted (None without a draft model);
    :attr:`draft_acceptance` is their ratio."""

    cache_n: int = 0
    prompt_n: int = 0
    predicted_n: int = 0
    prompt_ms: float | None = None
    prompt_per_second: float | None = None
    predicted_ms: float | None = None
    predicted_per_second: float | None = None
    draft_n: int | None = None
    draft_n_accepted: int | None = None

    @property
    def draft_acceptance(self) -> float | None:
        """``draft_n_accepted / draft_n``: None without speculative decoding (or before any
        token was drafted)."""
        if not self.draft_n or self.draft_n_accepted is None:
            return None
        return self.draft_n_accepted / self.draft_n


class Usage(msgspec.Struct, frozen=True, gc=False):
    """Token counts from the usage chunk; None where the server did not say. ``a + b``
    adds them (None where neither said), to total a run's completions."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(
            _plus(self.prompt_tokens, other.prompt_tokens),
            _plus(self.completion_tokens, other.completion_tokens),
            _plus(self.cached_tokens, other.cached_tokens),
        )


def _plus(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else a + b


class Completion(msgspec.Struct, frozen=True):
    """One finished assistant turn.

    ``content``/``reasoning_content`` are None when no such text arrived. ``finish_reason`` is
    None only on the partial completion an error carries. ``reasoning_tokens`` is how many
    tokens the model spent thinking; ``thinking_capped`` says the thinking budget ended it.
    ``output`` is the validated instance of the type asked for with ``chat(..., output=T)``
    (None otherwise). ``reasoning_field`` is the name the thinking arrived under
    (``reasoning_content``, or ``reasoning`` from vLLM, Groq, OpenRouter); :meth:`message`
    sends it back under the same name. ``cache`` is what the prompt cache gave the turn,
    against what exact echo of the session's previous turn gives, and why not
    (:class:`CacheReport`; None without timings). ``logprobs`` is every generated token
    with its log-probability, in order, when the request asked for ``top_logprobs`` (the
    events' ``logprobs`` joined; None otherwise).
    """

    id: str
    model: str | None
    content: str | None
    reasoning_content: str | None
    tool_calls: tuple[ToolCall, ...]
    finish_reason: FinishReason | None
    timings: Timings | None
    usage: Usage
    reasoning_tokens: int = 0
    thinking_capped: bool = False
    output: Any = None
    reasoning_field: ReasoningField = "reasoning_content"
    cache: CacheReport | None = None
    logprobs: tuple[TokenLogprob, ...] | None = None

    def message(self) -> AssistantMessage:
        """The assistant turn to send back next time, identical to what arrived."""
        return AssistantMessage(
            content=self.content,
            reasoning_content=self.reasoning_content,
            tool_calls=self.tool_calls,
            reasoning_field=self.reasoning_field,
        )

    def to_openai(self, *, created: int = 0) -> dict[str, Any]:
        """This turn as an OpenAI ``ChatCompletion`` dict (``object: "chat.completion"``, one
        choice, ``usage``), for code that expects what the OpenAI SDK returns.

        The stream does not keep the server's timestamp: pass ``created`` (Unix seconds) if
        you need one. ``reasoning_content`` is in the message when the model thought (the
        field llama-server, vLLM and DeepSeek use); token counts the server did not report
        are 0. A partial completion (from an error) has ``finish_reason`` None unless the finish
        reason had arrived before the error.
        """
        usage: dict[str, Any] = {
            "prompt_tokens": self.usage.prompt_tokens or 0,
            "completion_tokens": self.usage.completion_tokens or 0,
        }
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        if self.usage.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": self.usage.cached_tokens}
        finish = None if self.finish_reason is None else self.finish_reason.value
        choice = {
            "index": 0,
            "message": message_to_openai(self.message()),
            "finish_reason": finish,
            "logprobs": None,
        }
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": created,
            "model": self.model or "",
            "choices": [choice],
            "usage": usage,
        }
