"""A small llama-server stand-in for the docs' examples (``tests/test_docs.py``).

It answers every chat the way a cooperative model would, decided from the request alone, so
one fake serves every example without a script per page:

- the request has ``tools`` and its last message is not a tool result: the model calls the
  first tool (or the one ``tool_choice`` names), with arguments made from the tool's JSON
  Schema (``"Paris"`` for a string, ``1`` for a number, ...), streamed in small fragments;
- a request with a JSON schema (``json_schema``, or ``response_format`` of type
  ``json_schema``/``json_object``) is answered with JSON made from that schema the same way;
- otherwise it answers ``"The answer is 42."``;

after a line of reasoning when the request asked for thinking, and honouring ``max_tokens``
as a token count of one piece per token.

Streams are shaped like llama-server's (``chat_chunk``), with ``prompt_progress``, per-token
``timings`` and the usage chunk. The prompt cache is modelled the way a pinned slot behaves
on a full-attention model: a request whose messages start with the previous request's
messages reports the previous prompt's tokens as ``cache_n``. ``GET /health``, ``/props``
and ``/slots`` answer like an idle one-slot server; the resumable-stream routes are left
out (404), so clients see a server without them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.support.faultserver import (
    DONE,
    FaultServer,
    Json,
    Request,
    Script,
    chat_chunk,
    sse,
    stream,
)

__all__ = ["ANSWER", "REASONING", "DocFake"]

ANSWER = ("The ", "answer ", "is ", "42.")
REASONING = ("Let me ", "think.")
_SAMPLE = {"string": "Paris", "integer": 1, "number": 1.5, "boolean": True}


def _tokens(messages: Sequence[Any]) -> int:
    return 10 + len(json.dumps(messages)) // 4


def _sample(schema: Mapping[str, Any]) -> Any:
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties") or {}
        return {name: _sample(sub) for name, sub in props.items()}
    if kind == "array":
        return [_sample(schema.get("items") or {"type": "string"})]
    if "enum" in schema:
        return schema["enum"][0]
    return _SAMPLE.get(str(kind), "Paris")


def _schema(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The JSON schema the answer must follow, if the request set one."""
    if isinstance(body.get("json_schema"), Mapping):
        schema: Mapping[str, Any] = body["json_schema"]
        return schema
    fmt = body.get("response_format")
    if not isinstance(fmt, Mapping) or fmt.get("type") not in ("json_schema", "json_object"):
        return None
    inner = fmt.get("json_schema")
    found = inner.get("schema") if isinstance(inner, Mapping) else fmt.get("schema")
    return found if isinstance(found, Mapping) else {"type": "object"}


def _pieces(text: str, size: int = 6) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _tool(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    tools = body.get("tools") or []
    messages = body.get("messages") or []
    if not tools or (messages and messages[-1].get("role") == "tool"):
        return None
    choice = body.get("tool_choice")
    if choice == "none":
        return None
    if isinstance(choice, Mapping):
        wanted = choice.get("function", {}).get("name")
        return next((t["function"] for t in tools if t["function"]["name"] == wanted), None)
    function: Mapping[str, Any] = tools[0]["function"]
    return function


@dataclass
class DocFake:
    """Routes a :class:`FaultServer` like an obliging llama-server; see the module doc."""

    previous: list[Any] = field(default_factory=list)
    calls: int = 0

    def install(self, srv: FaultServer) -> None:
        srv.route("POST", "/v1/chat/completions", self.chat)
        srv.route("GET", "/health", [Json(200, {"status": "ok"})])
        srv.route("GET", "/slots", [Json(200, [{"id": 0, "is_processing": False}])])
        props = {"total_slots": 1, "default_generation_settings": {"n_ctx": 4096}}
        srv.route("GET", "/props", [Json(200, props)])

    def chat(self, request: Request) -> Script:
        body = request.json()
        messages = body.get("messages") or []
        total = _tokens(messages)
        prev = self.previous
        cache = _tokens(prev) if prev and messages[: len(prev)] == prev else 0
        self.previous = list(messages)
        thinking = (body.get("chat_template_kwargs") or {}).get("enable_thinking", False)
        deltas: list[dict[str, Any]] = []
        if thinking:
            deltas += [{"reasoning_content": r} for r in REASONING]
        tool = _tool(body)
        if tool is not None:
            deltas += self._call(tool)
            finish = "tool_calls"
        else:
            schema = _schema(body)
            answer = ANSWER if schema is None else _pieces(json.dumps(_sample(schema)))
            deltas += [{"content": c} for c in answer]
            finish = "stop"
        limit = body.get("max_tokens")
        if isinstance(limit, int) and limit < len(deltas):
            deltas, finish = deltas[:limit], "length"
        return stream(_events(deltas, finish, total, cache))

    def _call(self, tool: Mapping[str, Any]) -> list[dict[str, Any]]:
        self.calls += 1
        args = json.dumps(_sample(tool.get("parameters") or {"type": "object"}))
        pieces = _pieces(args)
        first = {
            "index": 0,
            "id": f"call_{self.calls:04d}",
            "type": "function",
            "function": {"name": tool["name"], "arguments": pieces[0]},
        }
        rest = [{"index": 0, "function": {"arguments": p}} for p in pieces[1:]]
        return [{"tool_calls": [first]}, *({"tool_calls": [r]} for r in rest)]


def _timings(total: int, cache: int, n: int) -> dict[str, Any]:
    prompt_n = total - cache
    return {
        "cache_n": cache,
        "prompt_n": prompt_n,
        "prompt_ms": 2.5 * prompt_n,
        "prompt_per_token_ms": 2.5,
        "prompt_per_second": 400.0,
        "predicted_n": n,
        "predicted_ms": 10.0 * n,
        "predicted_per_token_ms": 10.0,
        "predicted_per_second": 100.0,
    }


def _events(deltas: list[dict[str, Any]], finish: str, total: int, cache: int) -> list[bytes]:
    role = {"role": "assistant", "content": None}
    progress = {"total": total, "cache": cache, "processed": total, "time_ms": 1.0}
    out = [sse(chat_chunk(role, prompt_progress=progress))]
    for n, delta in enumerate(deltas, start=1):
        out.append(sse(chat_chunk(delta, timings=_timings(total, cache, n))))
    n = len(deltas)
    usage = {
        "completion_tokens": n,
        "prompt_tokens": total,
        "total_tokens": total + n,
        "prompt_tokens_details": {"cached_tokens": cache},
    }
    out.append(
        sse(chat_chunk({}, finish_reason=finish))
        + sse(chat_chunk(None, usage=usage, timings=_timings(total, cache, n)))
    )
    out.append(DONE)
    return out
