"""A chat request: the messages, the tools, and the per-request settings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import msgspec

from .checks import at_least, check_sampling, fraction, positive
from .messages import ChatMessage, ToolSchema

__all__ = ["ChatRequest", "LogitBias", "ToolChoice"]

ToolChoice = Literal["auto", "none", "required"]
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "max"]
LogitBias = (
    Mapping[int, float]
    | Mapping[str, float]
    | Mapping[int | str, float]
    | Sequence[tuple[int | str, float]]
)


class ChatRequest(msgspec.Struct, frozen=True):
    """One chat request.

    Settings left None fall back to the ``Config`` defaults, then to the server's own.

    - ``slot``: pin the server slot (``id_slot``) so this agent's prompt cache stays warm.
      Requests of one client for the same slot are served one at a time, in order.
    - ``thinking``: ask the template to think (``chat_template_kwargs.enable_thinking``).
    - ``thinking_budget``: cap reasoning at this many tokens (overrides ``Config``); 0 turns
      off the cap the config sets.
    - ``wait``: when the pinned slot is busy elsewhere, wait (default) or raise ``BusyError``.
    - ``logit_bias``: token id or text → bias. As a mapping (the OpenAI form) an ``int`` key or
      a decimal-string key (``{"364": -100}``) is that token id; any other string key is text,
      which llama-server tokenizes and biases token by token. As ``(key, bias)`` pairs the keys
      go to llama-server as given: an ``int`` is a token id, a ``str`` is always text.
    - ``json_schema``/``response_format``: constrain the answer.
    - ``model``: the model of this chat (a router's model name); None: ``Config.model``. A
      ``Pool`` sends it only to the servers whose ``Config.model`` is that name (or, if none
      is, to those that name no model).
    - ``autoload``: for a llama-server router, load the model if it is not running (the
      default); False sends ``?autoload=false`` and a model that is not running is a
      ``ModelNotLoadedError``.
    - ``session``: the conversation this request belongs to. A ``Pool`` sends its requests
      to the same server and slot, in order, so the prompt cache stays warm; every request
      of its turns carries it as ``Config.session_header`` (``X-Session-Id``), for a load
      balancer to keep it on one backend, and keys the affinity cookie.
    - ``extra``: more body fields for server options not modelled here; they override ours.
    - ``priority``: under a shared concurrency limit (a ``Limiter``), requests of a higher
      priority get a place first; requests of one priority in arrival order.
    - ``preflight``: count the prompt before sending and refuse what does not fit
      (``Config.preflight``, which None leaves to decide).
    - ``reasoning_effort``: how hard a reasoning model thinks (``"none"`` ... ``"max"``), for
      a chat template that supports it (``/props``' ``supports_reasoning_effort``, checked
      before sending: ``UnsupportedInputError`` otherwise); ``"none"`` turns thinking off.
    - ``max_time``: seconds the server may spend generating (llama-server's
      ``t_max_predict_ms``): past it, the turn ends with ``finish_reason`` ``length``, a
      whole Completion, unlike a client-side deadline, which stops the stream.
    - ``top_logprobs``: ask for each token's log-probability and its ``top_logprobs`` (0 to
      20) most likely alternatives: on the text events, in ``Completion.logprobs``, and as
      each tool-call field's ``confidence``. Sent as ``logprobs``/``top_logprobs``, or as
      llama-server's ``n_probs`` with tools (it refuses ``logprobs`` with tools while
      streaming).

    Settings are checked when the request is made (a ``ValueError`` naming the field: a
    negative ``max_tokens``, a ``top_p`` above 1, an unknown ``tool_choice``, two tools of one
    name, ...); the messages themselves when the body is built, by ``client.chat()``.
    """

    messages: Sequence[ChatMessage]
    tools: Sequence[ToolSchema] = ()
    slot: int | None = None
    thinking: bool = False
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    stop: Sequence[str] = ()
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    logit_bias: LogitBias | None = None
    response_format: Mapping[str, Any] | None = None
    json_schema: Mapping[str, Any] | None = None
    thinking_budget: int | None = None
    sse_ping_interval: int | None = None
    wait: bool = True
    extra: Mapping[str, Any] = msgspec.field(default_factory=dict)
    autoload: bool = True
    session: str | None = None
    model: str | None = None
    priority: int = 0
    preflight: bool | None = None
    reasoning_effort: ReasoningEffort | None = None
    max_time: float | None = None
    top_logprobs: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.messages, str | bytes):
            raise ValueError("ChatRequest.messages must be a sequence of messages, not a string")
        check_sampling("ChatRequest", self)
        fraction("ChatRequest", "min_p", self.min_p)
        for name in ("slot", "thinking_budget"):
            at_least("ChatRequest", name, getattr(self, name), 0)
        at_least("ChatRequest", "sse_ping_interval", self.sse_ping_interval, -1)
        if isinstance(self.stop, str):
            raise ValueError("ChatRequest.stop must be a sequence of strings, not one string")
        if self.tool_choice is not None and self.tool_choice not in _TOOL_CHOICES:
            raise ValueError(
                f"ChatRequest.tool_choice must be one of {_TOOL_CHOICES}, not "
                f"{self.tool_choice!r} (llama-server silently treats a named-function "
                "tool_choice as 'auto')"
            )
        _check_tools(self.tools)
        if self.reasoning_effort is not None and self.reasoning_effort not in _EFFORTS:
            raise ValueError(
                f"ChatRequest.reasoning_effort must be one of {_EFFORTS}, not "
                f"{self.reasoning_effort!r}"
            )
        positive("ChatRequest", "max_time", self.max_time, optional=True)
        if self.top_logprobs is not None and (
            type(self.top_logprobs) is not int or not 0 <= self.top_logprobs <= 20
        ):
            raise ValueError(
                f"ChatRequest.top_logprobs must be an int from 0 to 20, not {self.top_logprobs!r}"
            )
        if type(self.priority) is not int:
            raise ValueError(f"ChatRequest.priority must be an int, not {self.priority!r}")


_TOOL_CHOICES = ("auto", "none", "required")
_EFFORTS = ("none", "minimal", "low", "medium", "high", "max")


def _check_tools(tools: Sequence[object]) -> None:
    names: set[str] = set()
    for tool in tools:
        name = getattr(tool, "name", None)
        if not isinstance(name, str) or not name:
            raise ValueError("ChatRequest.tools: every tool needs a non-empty name")
        if name in names:
            raise ValueError(f"ChatRequest.tools: two tools are named {name!r}")
        names.add(name)
