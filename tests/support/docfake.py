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
and ``/slots`` answer like an idle one-slot server, and ``GET /models`` lists its one model
as a plain llama-server does; the resumable-stream routes are left out (404), so clients see
a server without them.

``DocFake(router=True)`` is a router (llama-server without ``-m``) over ``ROUTER_MODELS``:
``GET /models`` with each model's status, ``POST /models/load`` and ``/models/unload``, a
load moving the model ``unloaded`` -> ``loading`` -> ``loaded`` over the next two looks at
``/models`` (``broken`` goes back to ``unloaded`` with exit code 1 instead), and a chat, or a
``GET /health``, ``/props`` or ``/slots`` with ``?model=``, answered by that model (loading
it first, unless ``?autoload=false``) or with the router's error. The router's state and
answers are ``tests.support.fakefleet.FakeRouter``'s.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.support.fakefleet import FakeResponse, FakeRouter, Sent
from tests.support.faultserver import (
    DONE,
    FaultServer,
    Json,
    Request,
    Response,
    Script,
    chat_chunk,
    sse,
    stream,
)

__all__ = ["ANSWER", "PLAIN_MODEL", "REASONING", "ROUTER_MODELS", "DocFake"]

PLAIN_MODEL = "model.gguf"  # what a plain llama-server lists as its one model
ROUTER_MODELS = ("qwen3-4b", "gemma-3-270m", "broken")  # DocFake(router=True)'s models

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

    router: bool = False
    previous: list[Any] = field(default_factory=list)
    calls: int = 0
    models: FakeRouter = field(
        default_factory=lambda: FakeRouter(*ROUTER_MODELS, broken=("broken",))
    )

    def install(self, srv: FaultServer) -> None:
        srv.route("POST", "/v1/chat/completions", self._routed(self.chat))
        props = {"total_slots": 1, "default_generation_settings": {"n_ctx": 4096}}
        for path, answer in [
            ("/health", {"status": "ok"}),
            ("/slots", [{"id": 0, "is_processing": False}]),
            ("/props", props),
        ]:
            srv.route("GET", path, self._routed(_fixed([Json(200, answer)])))
        if self.router:
            srv.route("GET", "/models", self._own)
            srv.route("POST", "/models/load", self._own)
            srv.route("POST", "/models/unload", self._own)
        else:
            srv.route("GET", "/models", [Json(200, _plain_models())])

    def _routed(self, serve: Callable[[Request], Script]) -> Callable[[Request], Script]:
        """``serve`` as the model's server; in router mode the router admits the request
        first when it names a model (a GET without ``?model=`` is the router's own)."""

        def handler(request: Request) -> Script:
            sent = _sent(request)
            if self.router and (sent.json is not None or "model" in sent.query):
                refused = self.models.admit(sent)
                if refused is not None:
                    return [_response(refused)]
            return serve(request)

        return handler

    def _own(self, request: Request) -> Script:
        answer = self.models.own_answer(_sent(request))
        assert answer is not None, request.path
        return [_response(answer)]

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


def _fixed(script: Script) -> Callable[[Request], Script]:
    return lambda _: script


def _sent(request: Request) -> Sent:
    return Sent(request.method, request.target, request.body or None)


def _response(answer: FakeResponse) -> Response:
    content_type = answer.header("content-type") or "application/json"
    return Response(answer.status, answer.whole(), f"{content_type}; charset=utf-8")


def _plain_models() -> dict[str, Any]:
    model = {"id": PLAIN_MODEL, "object": "model", "owned_by": "llamacpp", "meta": {}}
    return {"object": "list", "data": [model]}


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
