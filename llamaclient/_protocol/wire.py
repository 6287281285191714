"""The server's JSON, as msgspec structs: exactly the fields we read, nothing more.

Unknown fields are ignored at every level (msgspec's default), so newer servers that add keys
keep working. Decoders are built once, here, and reused.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .._types.completion import Timings
from .._types.events import Progress

__all__ = [
    "ANY_DECODER",
    "CHUNK_DECODER",
    "ENTRY_KEYS_DECODER",
    "ERROR_BODY_DECODER",
    "RESPONSE_DECODER",
    "TIMINGS_DECODER",
    "TOOL_CALL_DECODER",
    "WireChoice",
    "WireChunk",
    "WireDelta",
    "WireError",
    "WireErrorBody",
    "WireMessage",
    "WireResponse",
    "WireToolCall",
    "WireUsage",
]


_NONE = msgspec.Raw()  # a field that did not come (empty: false)


class WireFunction(msgspec.Struct, gc=False):
    name: str | None = None
    arguments: str | None = None


class WireToolCall(msgspec.Struct, gc=False):
    index: int | None = None
    id: str | None = None
    function: WireFunction | None = None


class WireDelta(msgspec.Struct, gc=False):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None  # vLLM, Groq, OpenRouter: the thinking under this name
    tool_calls: list[msgspec.Raw] | None = None


class WireChoice(msgspec.Struct, gc=False):
    index: int = 0
    finish_reason: str | None = None
    delta: WireDelta | None = None
    logprobs: msgspec.Raw = _NONE  # decoded only when it came (asked for with top_logprobs)


class WirePromptDetails(msgspec.Struct, gc=False):
    cached_tokens: int | None = None


class WireUsage(msgspec.Struct, gc=False):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_tokens_details: WirePromptDetails | None = None


class WireError(msgspec.Struct, gc=False):
    """llama-server's error object, in-band (``data: {"error": ...}``) or as an HTTP body."""

    message: str = ""
    code: int | str | None = None  # llama-server: an int; OpenAI, Groq, LiteLLM: a string
    type: str | None = None
    n_prompt_tokens: int = 0  # exceed_context_size_error only
    n_ctx: int = 0


class WireErrorBody(msgspec.Struct, gc=False):
    """A non-2xx answer's body: ``{"error": {...}}``."""

    error: WireError


class WireChunk(msgspec.Struct, gc=False):
    """One ``chat.completion.chunk`` (or an in-band ``{"error": ...}`` payload)."""

    id: str | None = None
    model: str | None = None
    choices: list[WireChoice] | None = None
    timings: msgspec.Raw = _NONE  # decoded only when asked for: they come with every chunk
    usage: WireUsage | None = None
    prompt_progress: Progress | None = None
    error: WireError | str | None = None


class WireMessage(msgspec.Struct, gc=False):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[msgspec.Raw] | None = None


class WireResponseChoice(msgspec.Struct, gc=False):
    index: int = 0
    finish_reason: str | None = None
    message: WireMessage | None = None
    logprobs: msgspec.Raw = _NONE


class WireResponse(msgspec.Struct, gc=False):
    """A non-streamed ``chat.completion`` body."""

    id: str | None = None
    model: str | None = None
    choices: list[WireResponseChoice] | None = None
    timings: msgspec.Raw = _NONE
    usage: WireUsage | None = None
    error: WireError | str | None = None


CHUNK_DECODER = msgspec.json.Decoder(WireChunk)
ERROR_BODY_DECODER = msgspec.json.Decoder(WireErrorBody)
RESPONSE_DECODER = msgspec.json.Decoder(WireResponse)
TIMINGS_DECODER = msgspec.json.Decoder(Timings | None)
TOOL_CALL_DECODER = msgspec.json.Decoder(WireToolCall)
# A tool-call entry's keys, values left undecoded: finds server extension fields cheaply.
ENTRY_KEYS_DECODER = msgspec.json.Decoder(dict[str, msgspec.Raw])
ANY_DECODER: msgspec.json.Decoder[Any] = msgspec.json.Decoder()
