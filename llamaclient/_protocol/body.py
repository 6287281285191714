"""The request body: ``build_body(config, request) -> bytes``. Pure; the same inputs always give
the same bytes.

Rules (each is what the chat template and the prompt cache need):

- system/user/tool messages: ``{"role", "content"}`` (+ ``tool_call_id`` for tool results,
  + ``name`` when set); a multi-part user ``content`` is a list of ``{"type": "text"}``,
  ``{"type": "image_url", "image_url": {"url"}}`` and ``{"type": "input_audio",
  "input_audio": {"data", "format"}}`` parts (llama-server's ``oaicompat_content_load_media``);
- an assistant ``content`` of None is sent as ``""``; ``reasoning_content`` None is left out,
  and the thinking goes under ``reasoning`` instead when that is the name it arrived under;
  ``tool_calls`` empty is left out; each call is
  ``{"id", "type": "function", "function": {"name", "arguments"}}`` plus its ``extra`` fields,
  with ``arguments`` the exact string that arrived (never parsed);
- ``tools`` is left out when empty; each tool is ``{"type": "function", "function": {...}}``;
- always ``stream``, ``cache_prompt``, ``return_progress``, ``timings_per_token``,
  ``reasoning_control``, ``stream_options.include_usage`` and
  ``chat_template_kwargs.enable_thinking``; ``id_slot`` when the request pins a slot;
- with a thinking budget, ``reasoning_budget_tokens``: the server ends the reasoning itself
  there (see :func:`server_budget`);
- request settings override the config's defaults; ``extra`` fields override everything.

Invalid requests raise ``ValueError`` naming the problem, before any network.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import msgspec

from .._types.config import Config
from .._types.messages import (
    AssistantMessage,
    AudioPart,
    ImagePart,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    ToolSchema,
    UserMessage,
)
from .._types.request import ChatRequest, LogitBias

__all__ = ["build_body", "server_budget", "thinking_limit"]


class _Function(msgspec.Struct, gc=False):
    name: str
    arguments: str


class _ToolCall(msgspec.Struct, kw_only=True, gc=False):
    id: str
    type: Literal["function"] = "function"
    function: _Function


class _Message(msgspec.Struct, omit_defaults=True, gc=False):
    role: str
    content: str | list[Any]
    tool_call_id: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None  # the thinking, for a server that sent it under this name
    tool_calls: list[Any] | None = None
    name: str | None = None  # last: a message without it keeps its exact bytes


class _Text(msgspec.Struct, tag_field="type", tag="text", gc=False):
    text: str


class _Url(msgspec.Struct, gc=False):
    url: str


class _Image(msgspec.Struct, tag_field="type", tag="image_url", gc=False):
    image_url: _Url


class _Audio(msgspec.Struct, gc=False):
    data: str
    format: str


class _InputAudio(msgspec.Struct, tag_field="type", tag="input_audio", gc=False):
    input_audio: _Audio


class _ToolFunction(msgspec.Struct, gc=False):
    name: str
    description: str
    parameters: Mapping[str, Any]


class _Tool(msgspec.Struct, kw_only=True, gc=False):
    type: Literal["function"] = "function"
    function: _ToolFunction


class _StreamOptions(msgspec.Struct, gc=False):
    include_usage: bool = True


class _TemplateKwargs(msgspec.Struct, gc=False):
    enable_thinking: bool


class _Body(msgspec.Struct, omit_defaults=True, kw_only=True, gc=False):
    model: str | None = None
    messages: list[_Message]
    tools: list[_Tool] | None = None
    tool_choice: str | None = None
    parallel_tool_calls: bool | None = None
    id_slot: int | None = None
    cache_prompt: bool = False  # always sent: True is not the default here
    stream: bool = False
    stream_options: _StreamOptions | None = None
    return_progress: bool = False
    timings_per_token: bool = False
    reasoning_control: bool = False
    reasoning_budget_tokens: int | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    stop: list[str] | None = None
    logit_bias: Any = None
    response_format: Mapping[str, Any] | None = None
    json_schema: Mapping[str, Any] | None = None
    sse_ping_interval: int | None = None
    reasoning_effort: str | None = None
    t_max_predict_ms: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    n_probs: int | None = None
    chat_template_kwargs: _TemplateKwargs


_ENCODER = msgspec.json.Encoder()


def thinking_limit(config: Config, request: ChatRequest) -> int | None:
    """The thinking budget of ``request``: its own (0 turns the config's off), else the
    config's; None: no cap."""
    requested = request.thinking_budget
    return config.thinking_budget if requested is None else requested or None


def server_budget(limit: int, grace: int, proxied: bool) -> int:
    """The ``reasoning_budget_tokens`` sent with a thinking budget of ``limit``. The client
    ends the reasoning at ``limit`` with the control call, and the server's own budget is a
    backstop ``grace`` tokens later (a server the call cannot reach still ends it, with no
    error); through a proxy, which passes the body on but not the control call, the server's
    budget is the limit itself."""
    return limit if proxied else limit + grace


def build_body(
    config: Config, request: ChatRequest, *, stream: bool = True, proxied: bool = False
) -> bytes:
    """The JSON body for ``POST /v1/chat/completions`` (``proxied``: through a proxy that
    passes no control call, see :func:`server_budget`)."""
    _check_request(request)
    limit = thinking_limit(config, request)
    body = _Body(
        model=request.model or config.model or None,
        messages=[_message(m, i) for i, m in enumerate(request.messages)],
        tools=[_tool(t) for t in request.tools] or None,
        tool_choice=request.tool_choice,
        parallel_tool_calls=request.parallel_tool_calls,
        id_slot=request.slot,
        cache_prompt=True,
        stream=stream,
        stream_options=_StreamOptions() if stream else None,
        return_progress=stream,
        timings_per_token=stream,
        reasoning_control=True,
        reasoning_budget_tokens=(
            None if limit is None else server_budget(limit, config.thinking_grace, proxied)
        ),
        max_tokens=_pick(request.max_tokens, config.max_tokens),
        temperature=_pick(request.temperature, config.temperature),
        top_p=_pick(request.top_p, config.top_p),
        top_k=_pick(request.top_k, config.top_k),
        min_p=request.min_p,
        seed=request.seed,
        stop=list(request.stop) or None,
        logit_bias=_logit_bias(request.logit_bias),
        response_format=request.response_format,
        json_schema=request.json_schema,
        sse_ping_interval=request.sse_ping_interval,
        reasoning_effort=request.reasoning_effort,
        t_max_predict_ms=None if request.max_time is None else round(request.max_time * 1000),
        **_logprobs(request, stream),
        chat_template_kwargs=_TemplateKwargs(enable_thinking=request.thinking),
    )
    if not request.extra:
        return _ENCODER.encode(body)
    merged = msgspec.to_builtins(body)
    merged.update(request.extra)
    return _ENCODER.encode(merged)


def _logprobs(request: ChatRequest, stream: bool) -> dict[str, Any]:
    """``top_logprobs`` as the server takes it: OpenAI's ``logprobs``/``top_logprobs``, or,
    for a stream with tools, llama-server's ``n_probs`` (the same answer; ``logprobs`` is
    refused there, llama.cpp#28478). llama-server sends no log-probabilities at all for
    0 alternatives: 0 asks for 1, and the assembler keeps none."""
    k = request.top_logprobs
    if k is None:
        return {}
    if stream and request.tools:
        return {"n_probs": max(k, 1)}
    return {"logprobs": True, "top_logprobs": max(k, 1)}


def _pick(value: Any, default: Any) -> Any:
    return value if value is not None else default


def _message(message: object, position: int) -> _Message:
    if isinstance(message, UserMessage):
        content = message.content
        if isinstance(content, str):
            return _Message("user", content, name=message.name)
        return _Message("user", _parts(content, position), name=message.name)
    if isinstance(message, AssistantMessage):
        content = message.content if message.content is not None else ""
        thought = message.reasoning_content
        named = message.reasoning_field == "reasoning"
        return _Message(
            "assistant",
            _text(content, position),
            reasoning_content=None if named else thought,
            reasoning=thought if named else None,
            tool_calls=[_tool_call(c, position) for c in message.tool_calls] or None,
            name=message.name,
        )
    if isinstance(message, ToolMessage):
        return _Message(
            "tool",
            _text(message.content, position),
            tool_call_id=message.tool_call_id,
            name=message.name,
        )
    if isinstance(message, SystemMessage):
        return _Message("system", _text(message.content, position), name=message.name)
    raise ValueError(
        f"messages[{position}] is a {type(message).__name__}, not a SystemMessage, "
        "UserMessage, AssistantMessage or ToolMessage"
    )


def _text(content: object, position: int) -> str:
    if not isinstance(content, str):
        kind = type(content).__name__
        raise ValueError(f"messages[{position}].content must be a str, not {kind}")
    return content


def _parts(parts: object, position: int) -> list[Any]:
    if isinstance(parts, (bytes, bytearray)) or not isinstance(parts, Sequence) or not parts:
        kind = "empty sequence" if parts == () else type(parts).__name__
        raise ValueError(
            f"messages[{position}].content must be a str, not {kind} "
            "(or a non-empty sequence of TextPart, ImagePart and AudioPart)"
        )
    return [_part(part, position) for part in parts]


def _part(part: object, position: int) -> Any:
    if isinstance(part, TextPart):
        return _Text(_text(part.text, position))
    if isinstance(part, ImagePart):
        return _Image(_Url(part.wire_url()))
    if isinstance(part, AudioPart):
        return _InputAudio(_Audio(_base64(part.data), part.format))
    raise ValueError(
        f"messages[{position}].content holds a {type(part).__name__}, not a TextPart, "
        "ImagePart or AudioPart"
    )


def _base64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _tool_call(call: ToolCall, position: int) -> Any:
    if not isinstance(call.arguments, str):
        raise ValueError(
            f"messages[{position}]: tool call {call.id!r} arguments must be the raw JSON str"
        )
    wire = _ToolCall(id=call.id, function=_Function(call.name, call.arguments))
    if not call.extra:
        return wire
    return {**msgspec.to_builtins(wire), **call.extra}


def _tool(tool: object) -> _Tool:
    if not isinstance(tool, ToolSchema):
        raise ValueError(f"tools must hold ToolSchema values, not {type(tool).__name__}")
    name, params = tool.name, tool.parameters
    if not isinstance(params, Mapping) or params.get("type", "object") != "object":
        raise ValueError(
            f"tool {name!r}: parameters must be a JSON Schema object "
            '({"type": "object", "properties": {...}})'
        )
    return _Tool(function=_ToolFunction(tool.name, tool.description, params))


def _logit_bias(bias: LogitBias | None) -> Any:
    # llama-server reads an int in a pair as a token id and a str as *text to tokenize*. The
    # OpenAI form {"364": -100} means token 364, so a mapping's decimal-string key becomes the
    # int; any other string stays text. Pairs are llama-server's own form and go as given.
    if bias is None:
        return None
    if isinstance(bias, Mapping):
        return [[_token_key(k), v] for k, v in bias.items()]
    return [list(pair) for pair in bias]


def _token_key(key: int | str) -> int | str:
    if isinstance(key, str) and key.isascii() and key.isdecimal():
        return int(key)
    return key


def _check_request(request: ChatRequest) -> None:
    """What only the body shows (the settings were checked when the request was made)."""
    if not request.messages:
        raise ValueError("the request has no messages")
    _check_tool_results(request.messages)


def _check_tool_results(messages: Sequence[object]) -> None:
    open_calls: set[str] = set()
    for position, message in enumerate(messages):
        if isinstance(message, AssistantMessage):
            open_calls.update(call.id for call in message.tool_calls)
        elif isinstance(message, ToolMessage) and message.tool_call_id not in open_calls:
            raise ValueError(
                f"messages[{position}] answers tool call {message.tool_call_id!r}, "
                "which no earlier assistant message made"
            )
