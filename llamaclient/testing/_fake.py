"""FakeLlama: a scripted llama-server inside the test process (no sockets, any event loop)."""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qs, urlsplit

import anyio

from .._client import Client
from .._transports.base import Response, Transport, TransportError
from .._types.config import Config
from .._types.messages import (
    AssistantMessage,
    ChatMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolSchema,
    UserMessage,
)
from ._recording import load
from ._wire import Answer, Piece, error_body, fake_id, prompt_tokens, stream_chunks, whole_answer

__all__ = ["FakeLlama", "FakeRequest", "FakeResponse", "FakeTransport", "stream_body"]

URL = "http://fake-llama.test"
CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
JSON = (("Content-Type", "application/json; charset=utf-8"),)
SSE = (("Content-Type", "text/event-stream"), ("Transfer-Encoding", "chunked"))
NO_REPLY = "FakeLlama has no reply queued for this request: call fake.reply(...) first"

# Defaults for FakeLlama.client(): fail fast instead of waiting minutes on a scripted fault.
FAST: dict[str, Any] = {
    "wait_timeout": 5.0,
    "stall_timeout": 1.0,
    "load_timeout": 5.0,
    "retry_backoff": 0.01,
    "retry_max_backoff": 0.05,
}


class _Cut:
    """The connection breaks here."""


class _Stall:
    """No more bytes, ever."""


_Step = bytes | _Cut | _Stall


@dataclass(frozen=True)
class FakeRequest:
    """One chat request as the fake server received it, decoded.

    ``messages`` are the library's message types (a message it cannot decode stays a dict),
    ``tools`` the :class:`ToolSchema` list, ``settings`` every other body field (``max_tokens``,
    ``temperature``, ``chat_template_kwargs``, ...), ``body`` the whole JSON body and
    ``headers`` the request headers (lower-case names)."""

    messages: list[ChatMessage | dict[str, Any]]
    tools: list[ToolSchema]
    settings: dict[str, Any]
    body: dict[str, Any]
    headers: dict[str, str]

    @property
    def last(self) -> ChatMessage | dict[str, Any]:
        """The last message (the user's turn, or a tool result)."""
        return self.messages[-1]


class _Settings(NamedTuple):
    completion_id: str
    model: str
    total: int
    cache: int
    created: int


@dataclass
class _Fault:
    cut_after: int | None = None
    stall: bool = False
    error: str | None = None


@dataclass
class _Raw:
    """A recorded answer: status, headers and the body's HTTP chunks."""

    status: int
    headers: tuple[tuple[str, str], ...]
    chunks: list[bytes]
    cut: bool


class FakeResponse(Response):
    """A response of the fake server: its body steps are played on ``read()``."""

    __slots__ = ("_headers", "_read_timeout", "_status", "_steps", "closed")

    fair_reads = True  # every read is a scheduling point

    def __init__(
        self,
        status: int,
        headers: Iterable[tuple[str, str]],
        steps: Iterable[_Step],
        read_timeout: float | None,
    ) -> None:
        self._status = status
        self._headers = [(k.lower(), v) for k, v in headers]
        self._steps = deque(steps)
        self._read_timeout = read_timeout
        self.closed = False

    @property
    def status(self) -> int:
        return self._status

    def header(self, name: str) -> str | None:
        name = name.lower()
        return next((v for k, v in self._headers if k == name), None)

    async def read(self) -> bytes:
        await anyio.lowlevel.checkpoint()
        if self.closed:
            raise TransportError("read", "the response was closed")
        if not self._steps:
            return b""
        step = self._steps.popleft()
        if isinstance(step, bytes):
            return step
        self._steps.appendleft(step)
        if isinstance(step, _Cut):
            raise TransportError("read", "FakeLlama: the connection was cut (scripted)")
        timeout = self._read_timeout
        if timeout is None:
            await anyio.sleep_forever()
            timeout = 0.0  # not reached
        await anyio.sleep(timeout)
        raise TransportError("stall", f"no bytes for {timeout} s")

    async def aclose(self) -> None:
        self.closed = True


class FakeTransport(Transport):
    """The :class:`~llamaclient.Transport` of a :class:`FakeLlama`."""

    def __init__(self, fake: FakeLlama) -> None:
        self._fake = fake

    async def send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        *,
        read_timeout: float | None = None,
    ) -> Response:
        await anyio.lowlevel.checkpoint()
        return self._fake._serve(method, url, headers, body, read_timeout)

    async def aclose(self) -> None:
        pass


@dataclass
class FakeLlama:
    """A scripted llama-server for tests, in-process: no sockets, no model.

    Queue answers with :meth:`reply` (or :meth:`replay` a recorded one), faults with
    :meth:`fail`, then run your code against ``fake.client()`` (or
    ``Client(config, transport=fake.transport())``). Each chat request takes the next queued
    answer; ``fake.requests`` is what was sent, decoded.

    ``model`` is the model name in the chunks, ``n_ctx``/``n_slots`` what ``/props`` and
    ``/slots`` report, ``resumable`` whether it offers resumable streams (a cut stream is then
    picked up where it broke, as llama-server with ``X-Conversation-Id`` does).
    """

    model: str = "fake-model"
    n_ctx: int = 4096
    n_slots: int = 1
    resumable: bool = False
    url: str = URL
    requests: list[FakeRequest] = field(default_factory=list)
    calls: list[tuple[str, str]] = field(default_factory=list)
    """Every HTTP request: ``(method, path)``, in order."""
    _answers: deque[tuple[Answer | _Raw | None, _Fault | None]] = field(default_factory=deque)
    _fault: _Fault | None = None  # for the answer queued next
    _loading: int = 0
    _busy: int = 0
    _cached: list[dict[str, Any]] = field(default_factory=list)
    _conversations: dict[str, bytes] = field(default_factory=dict)
    _count: int = 0

    # -- scripting ---------------------------------------------------------------------
    def reply(
        self,
        content: str | None = None,
        *,
        reasoning: str | None = None,
        tool_calls: Sequence[ToolCall | Mapping[str, Any]] = (),
        chunk: int | None = None,
        finish: str | None = None,
    ) -> FakeLlama:
        """Queue the next answer. It streams the way llama-server streams: ``reasoning``
        first, then ``content``, then the ``tool_calls`` (each a :class:`ToolCall` or a
        mapping ``{"name": ..., "arguments": str | dict, "id": ...}``), one token per HTTP
        chunk: ``chunk`` characters each, or word by word when None. ``finish`` is the finish
        reason (default: ``tool_calls`` with calls, else ``stop``; ``length`` when the
        request's ``max_tokens`` cuts the answer). Returns ``self``, so calls chain."""
        calls = tuple(self._call(c) for c in tool_calls)
        self._queue(Answer(content, reasoning, calls, chunk, finish))
        return self

    def _queue(self, answer: Answer | _Raw | None) -> None:
        self._answers.append((answer, self._fault))
        self._fault = None

    def _call(self, call: ToolCall | Mapping[str, Any]) -> ToolCall:
        if isinstance(call, ToolCall):
            return call
        arguments = call.get("arguments", {})
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        self._count += 1
        return ToolCall(str(call.get("id") or fake_id(self._count)), str(call["name"]), arguments)

    def fail(
        self,
        *,
        cut_after: int | None = None,
        stall: bool = False,
        error: str | None = None,
        loading: bool | int = False,
        busy: bool | int = False,
    ) -> FakeLlama:
        """What goes wrong with the answer you queue next (``fake.fail(cut_after=3).reply(
        "...")``), or with the next requests:

        - ``cut_after=N``: the connection breaks after ``N`` tokens
          (``StreamClosedEarlyError``, or a resume when ``resumable``);
        - ``stall=True``: the stream goes silent (after ``cut_after`` tokens, default 0) and
          the client's ``stall_timeout`` fires (``StalledError``);
        - ``error="..."``: llama-server's error. Alone, it is queued as an answer of its own:
          that request gets an HTTP 500 error envelope (``HTTPStatusError``). With
          ``cut_after=N``, the next answer stops with an in-band error event after ``N``
          tokens (``ServerError``);
        - ``loading=True`` (or a count): the next chat requests get ``503 Loading model``
          (the client shows ``Waiting(slot_busy=False)`` and waits for ``/health``);
        - ``busy=True`` (or a count): the next ``/slots`` answers show every slot processing
          (a request pinned to a slot shows ``Waiting(slot_busy=True)``, or raises
          ``BusyError`` with ``wait=False``)."""
        if loading:
            self._loading += int(loading)
        if busy:
            self._busy += int(busy)
        if error is not None and cut_after is None and not stall:
            self._answers.append((None, _Fault(error=error)))
        elif cut_after is not None or stall or error is not None:
            self._fault = _Fault(cut_after, stall, error)
        return self

    def replay(self, path: str | Path) -> FakeLlama:
        """Queue the answer recorded in ``path`` (a ``recordings/*.http`` file): the next
        chat request gets its status, headers and body, HTTP chunk by HTTP chunk."""
        rec = load(path)
        framing = ("transfer-encoding", "content-length")
        headers = tuple((k, v) for k, v in rec.headers if k.lower() not in framing)
        self._queue(_Raw(rec.status, headers, rec.chunks, rec.meta.get("cut") == "true"))
        return self

    def transport(self) -> FakeTransport:
        """A :class:`~llamaclient.Transport` for ``Client(config, transport=...)``."""
        return FakeTransport(self)

    def client(self, **config: Any) -> Client:
        """A :class:`~llamaclient.Client` for this fake server. ``config`` overrides
        :class:`~llamaclient.Config` fields; timeouts default to a few seconds (and
        ``stall_timeout`` to 1 s), so a scripted fault fails fast."""
        return Client(Config(self.url, **{**FAST, **config}), transport=self.transport())

    @property
    def pending(self) -> int:
        """Answers queued and not taken yet."""
        return len(self._answers)

    # -- serving -----------------------------------------------------------------------
    def _serve(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        read_timeout: float | None,
    ) -> FakeResponse:
        parts = urlsplit(url)
        path, query = parts.path, parse_qs(parts.query)
        self.calls.append((method, path))
        if method == "POST" and path in CHAT_PATHS:
            lower = {k.lower(): v for k, v in headers.items()}
            return self._chat(lower, body or b"{}", read_timeout)
        if method == "GET" and path == "/health":
            return _json(200, {"status": "ok"})
        if method == "GET" and path == "/props":
            return _json(200, self.props())
        if method == "GET" and path == "/slots":
            return _json(200, self._slots())
        if method == "GET" and path in ("/v1/models", "/models"):
            return _json(200, {"object": "list", "data": [{"id": self.model,
                                                            "object": "model"}]})
        if method == "POST" and path == "/v1/chat/completions/control":
            return _json(200, {"success": True})
        if self.resumable and path.startswith("/v1/stream"):
            return self._stream_route(method, path, query, read_timeout)
        return _error(404, "File Not Found", "not_found_error")

    def props(self) -> dict[str, Any]:
        """What ``GET /props`` answers."""
        return {
            "default_generation_settings": {"n_ctx": self.n_ctx, "params": {}},
            "total_slots": self.n_slots,
            "model_alias": self.model,
            "model_path": f"/models/{self.model}.gguf",
            "modalities": {"vision": False, "audio": False},
            "chat_template": "{# fake #}",
            "chat_template_caps": {"supports_tools": True, "supports_tool_calls": True,
                                   "supports_system_role": True},
            "build_info": "b0-fakellama",
            "is_sleeping": False,
        }

    def _slots(self) -> list[dict[str, Any]]:
        busy = self._busy > 0
        if busy:
            self._busy -= 1
        return [
            {"id": i, "n_ctx": self.n_ctx // self.n_slots, "is_processing": busy}
            for i in range(self.n_slots)
        ]

    def _chat(
        self, headers: dict[str, str], raw: bytes, read_timeout: float | None
    ) -> FakeResponse:
        body = json.loads(raw)
        self.requests.append(_decode(body, headers))
        if self._loading:
            self._loading -= 1
            return _error(503, "Loading model", "unavailable_error")
        if not self._answers:
            return _error(500, NO_REPLY, "server_error")
        answer, fault = self._answers.popleft()
        if answer is None:
            return _error(500, fault.error if fault and fault.error else NO_REPLY, "server_error")
        if isinstance(answer, _Raw):
            steps: list[_Step] = [*answer.chunks, *([_Cut()] if answer.cut else [])]
            return FakeResponse(answer.status, answer.headers, steps, read_timeout)
        messages = [m for m in body.get("messages", []) if isinstance(m, dict)]
        total = sum(map(prompt_tokens, messages))
        cache = self._cache_hit(messages)
        self._cached = [*messages, answer.echo()]
        self._count += 1
        settings = _Settings("chatcmpl-" + fake_id(self._count), self.model, total, cache,
                             int(time.time()))
        if not body.get("stream"):
            return FakeResponse(200, JSON, [whole_answer(answer, body, **settings._asdict())], None)
        chunks = stream_chunks(answer, body, **settings._asdict())
        conversation = headers.get("x-conversation-id")
        if conversation is not None and self.resumable:
            self._conversations[conversation] = b"".join(p.data for p in chunks)
        return FakeResponse(200, SSE, _with_fault(chunks, fault), read_timeout)

    def _cache_hit(self, messages: list[dict[str, Any]]) -> int:
        """Tokens of the longest common message prefix with the previous turn (its messages
        and the answer exactly as sent), as the prompt cache would reuse them."""
        hit = 0
        for new, old in zip(messages, self._cached, strict=False):
            if new != old:
                break
            hit += prompt_tokens(new)
        return hit

    def _stream_route(
        self, method: str, path: str, query: dict[str, list[str]], read_timeout: float | None
    ) -> FakeResponse:
        if method == "POST" and path == "/v1/streams/lookup":
            return _json(200, [])
        conv = self._conversations.get((query.get("conv_id") or [""])[0])
        if method == "DELETE":
            return FakeResponse(204, (), [], None)
        if conv is None:
            return _error(404, "conversation not found", "not_found_error")
        start = int((query.get("from") or ["0"])[0])
        return FakeResponse(200, SSE, [conv[start:]], read_timeout)


def stream_body(
    content: str | None = None,
    *,
    reasoning: str | None = None,
    tool_calls: Sequence[ToolCall | Mapping[str, Any]] = (),
    chunk: int | None = None,
    finish: str | None = None,
    model: str = "fake-model",
) -> bytes:
    """The whole body of a llama-server stream answering with ``content`` (the arguments of
    :meth:`FakeLlama.reply`), for mocks of your own, e.g. respx:
    ``respx.post(url).respond(200, headers={"Content-Type": "text/event-stream"},
    content=stream_body("Hi"))``."""
    fake = FakeLlama()
    calls = tuple(fake._call(c) for c in tool_calls)
    answer = Answer(content, reasoning, calls, chunk, finish)
    body = {"stream": True, "stream_options": {"include_usage": True}}
    chunks = stream_chunks(answer, body, completion_id="chatcmpl-" + fake_id(0), model=model,
                           total=10, cache=0, created=int(time.time()))
    return b"".join(p.data for p in chunks)


def _with_fault(chunks: list[Piece], fault: _Fault | None) -> list[_Step]:
    if fault is None:
        return [p.data for p in chunks]
    after = fault.cut_after or 0
    kept: list[_Step] = [p.data for p in chunks[: _cut_index(chunks, after)]]
    if fault.error is not None:
        kept.append(b"data: " + error_body(500, fault.error, "server_error") + b"\n\n")
        return kept
    kept.append(_Stall() if fault.stall else _Cut())
    return kept


def _cut_index(chunks: list[Piece], after: int) -> int:
    """How many HTTP chunks go out before the break: those with at most ``after`` tokens,
    never the final chunk (finish reason) or ``[DONE]``."""
    n = 0
    for piece in chunks[:-2]:
        if piece.tokens > after:
            break
        n += 1
    return n


def _decode(body: dict[str, Any], headers: dict[str, str]) -> FakeRequest:
    messages = [_message(m) for m in body.get("messages", [])]
    tools = [
        ToolSchema(f["name"], f.get("description", ""), f.get("parameters", {}))
        for t in body.get("tools") or []
        if isinstance(f := t.get("function"), dict)
    ]
    settings = {k: v for k, v in body.items() if k not in ("messages", "tools")}
    return FakeRequest(messages, tools, settings, body, dict(headers))


def _message(m: Any) -> ChatMessage | dict[str, Any]:
    if not isinstance(m, dict):
        return {"raw": m}
    role, content = m.get("role"), m.get("content")
    if role in ("system", "user") and isinstance(content, str) and len(m) == 2:
        return SystemMessage(content) if role == "system" else UserMessage(content)
    if role == "tool" and isinstance(content, str):
        return ToolMessage(str(m.get("tool_call_id", "")), content)
    if role == "assistant":
        calls = tuple(
            ToolCall(c["id"], c["function"]["name"], c["function"]["arguments"],
                     {k: v for k, v in c.items() if k not in ("id", "type", "function")})
            for c in m.get("tool_calls") or []
        )
        return AssistantMessage(
            content=content or None, reasoning_content=m.get("reasoning_content"), tool_calls=calls
        )
    return m


def _json(status: int, obj: Any) -> FakeResponse:
    return FakeResponse(status, JSON, [json.dumps(obj).encode()], None)


def _error(status: int, message: str, type: str) -> FakeResponse:
    headers = (*JSON, ("Connection", "close"))
    return FakeResponse(status, headers, [error_body(status, message, type)], None)
