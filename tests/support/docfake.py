"""The docs' llama-server (``tests/test_docs.py``): FakeLlama playing a cooperative model,
served on a real socket by the fault server, since the examples run as separate processes.

``Cooperative()`` is a reply function deciding each answer from the request alone, so one
fake serves every example without a script per page:

- the request has ``tools`` and its last message is not a tool result: the model calls the
  first tool (or the one ``tool_choice`` names), with arguments made from the tool's JSON
  Schema (``"Paris"`` for a string, ``1`` for a number, ...), streamed in small fragments;
- a request with a JSON schema (``json_schema``, or ``response_format`` of type
  ``json_schema``/``json_object``) is answered with JSON made from that schema the same way;
- otherwise it answers ``"The answer is 42."``;

after a line of reasoning when the request asked for thinking. The rest is FakeLlama's: the
stream's shape, ``max_tokens``, the prompt cache (the previous prompt and answer, echoed
exactly, are reported as ``cache_n``), ``/health``, ``/props``, ``/slots`` and ``/models``
of an idle one-slot server with its one model ``model.gguf``, no resumable streams (404).

``doc_fake(router=True)`` is a router (llama-server without ``-m``) over ``ROUTER_MODELS``,
``broken`` failing to load with exit code 1 (FakeLlama's router mode).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from llamaclient.testing import FakeLlama, FakeModel, FakeRequest, Reply
from tests.support.faultserver import (
    Chunk,
    End,
    FaultServer,
    Request,
    Response,
    Script,
    Status,
    Step,
)

__all__ = ["PLAIN_MODEL", "ROUTER_MODELS", "Cooperative", "doc_fake", "serve"]

PLAIN_MODEL = "model.gguf"  # what a plain llama-server lists as its one model
ROUTER_MODELS = ("qwen3-4b", "gemma-3-270m", "broken")  # doc_fake(router=True)'s models

_SAMPLE = {"string": "Paris", "integer": 1, "number": 1.5, "boolean": True}


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


class Cooperative:
    """A reply function: the answer an obliging model gives each request (see the module
    doc). Its tool calls are numbered ``call_0001``, ``call_0002``, ..."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, request: FakeRequest) -> Reply:
        body = request.body
        thinking = (body.get("chat_template_kwargs") or {}).get("enable_thinking", False)
        reasoning = "Let me think." if thinking else None
        tool = _tool(body)
        if tool is not None:
            self.calls += 1
            arguments = json.dumps(_sample(tool.get("parameters") or {"type": "object"}))
            call = {"id": f"call_{self.calls:04d}", "name": tool["name"], "arguments": arguments}
            return Reply(reasoning=reasoning, tool_calls=[call], chunk=6)
        schema = _schema(body)
        if schema is None:
            return Reply("The answer is 42.", reasoning=reasoning)
        return Reply(json.dumps(_sample(schema)), reasoning=reasoning, chunk=6)


def doc_fake(router: bool = False) -> FakeLlama:
    """A fresh docs' llama-server (a router over ``ROUTER_MODELS`` with ``router``)."""
    models = {m: FakeModel(broken=m == "broken") for m in ROUTER_MODELS} if router else {}
    return FakeLlama(PLAIN_MODEL, models=models).reply(Cooperative())


def serve(fake: FakeLlama, srv: FaultServer) -> FakeLlama:
    """Serve ``fake`` on ``srv``'s socket: every request goes to it, and its answer goes
    back as it gave it (a stream chunk by chunk)."""
    transport = fake.transport()

    async def answer(request: Request) -> Script:
        response = await transport.send(request.method, fake.url + request.target,
                                        dict(request.headers.raw()), request.body or None)
        kind = response.header("content-type") or "application/json"
        try:
            if kind != "text/event-stream":
                return [Response(response.status, await response.aread(), kind)]
            steps: list[Step] = [Status(response.status)]
            while piece := await response.read():
                steps.append(Chunk(piece))
            return [*steps, End()]
        finally:
            await response.aclose()

    srv.route("*", "*", answer)
    return fake
