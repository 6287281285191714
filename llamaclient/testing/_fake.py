"""FakeLlama: a scripted llama-server inside the test process (no sockets, any event loop)."""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qs, urlsplit

import anyio
import msgspec

from .._client import Client
from .._transports.base import Response, Transport, TransportError
from .._types.config import Config
from .._types.messages import AssistantMessage, ChatMessage, ToolCall, ToolSchema
from .._types.openai import from_openai
from ._recording import load
from ._wire import Answer, Piece, error_body, fake_id, prompt_tokens, stream_chunks, whole_answer

__all__ = ["FakeLlama", "FakeRequest", "FakeResponse", "FakeTransport", "Reply", "stream_body"]

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
_Timed = tuple[float, _Step]  # a step and when it is due, in seconds after the headers


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


@dataclass(frozen=True)
class Reply:
    """One scripted answer: what :meth:`FakeLlama.reply` takes, and what a reply function
    returns. ``pace`` is the seconds between the answer's HTTP chunks (each token, then
    the finish chunk): one number for every chunk, or one per chunk in order (0 past the
    end of the list)."""

    content: str | None = None
    reasoning: str | None = None
    tool_calls: Sequence[ToolCall | Mapping[str, Any]] = ()
    chunk: int | None = None
    finish: str | None = None
    pace: float | Sequence[float] = 0.0

    def __post_init__(self) -> None:
        if self.chunk is not None and self.chunk < 1:
            raise ValueError(f"chunk must be >= 1, not {self.chunk}")
        paces = [self.pace] if isinstance(self.pace, (int, float)) else list(self.pace)
        if any(not isinstance(p, (int, float)) or p < 0 for p in paces):
            raise ValueError(f"pace must be seconds >= 0, not {self.pace!r}")


ReplyFunction = Callable[[FakeRequest], Reply | str | None]
"""A reply computed from the request: a :class:`Reply`, a ``str`` (the content), or None."""


class _Settings(NamedTuple):
    completion_id: str
    model: str
    total: int
    cache: int
    created: int
    prefill: float


@dataclass
class _Fault:
    cut_after: int | None = None
    stall: bool = False
    error: str | None = None
    prefill: float = 0.0

    @property
    def breaks(self) -> bool:
        """Whether the stream ends early (cut, stall or in-band error)."""
        return self.cut_after is not None or self.stall or self.error is not None


@dataclass
class _Raw:
    """A recorded answer: status, headers and the body's HTTP chunks."""

    status: int
    headers: tuple[tuple[str, str], ...]
    chunks: list[bytes]
    cut: bool


class FakeResponse(Response):
    """A response of the fake server: its body steps are played on ``read()``, each when it
    is due on the server's clock (a wait longer than ``read_timeout`` is a stall)."""

    __slots__ = ("_headers", "_read_timeout", "_start", "_status", "_steps", "closed")

    fair_reads = True  # every read is a scheduling point

    def __init__(
        self,
        status: int,
        headers: Iterable[tuple[str, str]],
        steps: Iterable[_Step | _Timed],
        read_timeout: float | None,
    ) -> None:
        self._status = status
        self._headers = [(k.lower(), v) for k, v in headers]
        self._steps = deque(s if isinstance(s, tuple) else (0.0, s) for s in steps)
        self._read_timeout = read_timeout
        self._start: float | None = None  # when the headers were sent (the server's clock)
        self.closed = False

    @property
    def status(self) -> int:
        return self._status

    def header(self, name: str) -> str | None:
        name = name.lower()
        return next((v for k, v in self._headers if k == name), None)

    def started(self, now: float) -> FakeResponse:
        """Start the server's clock: each step is due its seconds after ``now``."""
        self._start = now
        return self

    async def read(self) -> bytes:
        await anyio.lowlevel.checkpoint()
        if self.closed:
            raise TransportError("read", "the response was closed")
        if not self._steps:
            return b""
        at, step = self._steps[0]
        await self._until(float("inf") if isinstance(step, _Stall) else at)
        if isinstance(step, bytes):
            self._steps.popleft()
            return step
        raise TransportError("read", "FakeLlama: the connection was cut (scripted)")

    async def _until(self, at: float) -> None:
        """Wait for the step due ``at`` seconds after the headers; a wait longer than the
        read timeout is a stall, as on a socket."""
        if self._start is None:
            self._start = anyio.current_time()
        wait = self._start + at - anyio.current_time()
        if wait <= 0:
            return
        timeout = self._read_timeout
        if timeout is not None and wait > timeout:
            await anyio.sleep(timeout)
            raise TransportError("stall", f"no bytes for {timeout} s")
        if wait == float("inf"):
            await anyio.sleep_forever()
        await anyio.sleep(wait)

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
        response = self._fake._serve(method, url, headers, body, read_timeout)
        return response.started(anyio.current_time())

    async def aclose(self) -> None:
        pass


@dataclass
class FakeLlama:
    """A scripted llama-server for tests, in-process: no sockets, no model.

    Queue answers with :meth:`reply` (or :meth:`replay` a recorded one; or a reply function
    that computes them from each request), faults with :meth:`fail`, then run your code
    against ``fake.client()`` (or ``Client(config, transport=fake.transport())``). Each chat
    request takes the next queued answer; ``fake.requests`` is what was sent, decoded.

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
    _answers: deque[tuple[Answer | _Raw | ReplyFunction | None, _Fault | None]] = field(
        default_factory=deque
    )
    _fault: _Fault | None = None  # for the answer queued next
    _loading: int = 0
    _busy: int = 0
    _cached: list[dict[str, Any]] = field(default_factory=list)
    _conversations: dict[str, bytes] = field(default_factory=dict)
    _count: int = 0

    # -- scripting ---------------------------------------------------------------------
    def reply(
        self,
        content: str | Reply | ReplyFunction | None = None,
        *,
        reasoning: str | None = None,
        tool_calls: Sequence[ToolCall | Mapping[str, Any]] = (),
        chunk: int | None = None,
        finish: str | None = None,
        pace: float | Sequence[float] = 0.0,
    ) -> FakeLlama:
        """Queue the next answer. It streams the way llama-server streams: ``reasoning``
        first, then ``content``, then the ``tool_calls`` (each a :class:`ToolCall` or a
        mapping ``{"name": ..., "arguments": str | dict, "id": ...}``), one token per HTTP
        chunk: ``chunk`` characters each, or word by word when None. ``finish`` is the finish
        reason (default: ``tool_calls`` with calls, else ``stop``; ``length`` when the
        request's ``max_tokens`` cuts the answer). ``pace`` is the seconds between chunks
        (one number, or one per chunk: see :class:`Reply`).

        Or give a :class:`Reply`, or a function of the :class:`FakeRequest` returning one
        (or a ``str``, the content): it answers every request that reaches it, until it
        returns None; the request then takes the next queued answer. Returns ``self``, so
        calls chain."""
        if isinstance(content, Reply) or callable(content):
            alone = (reasoning, tuple(tool_calls), chunk, finish, pace) == (None, (), None, None, 0)
            if not alone:
                raise ValueError("give a Reply or a reply function alone, without other arguments")
            self._queue(content if callable(content) else self._answer(content))
            return self
        self._queue(self._answer(Reply(content, reasoning, tool_calls, chunk, finish, pace)))
        return self

    def _queue(self, answer: Answer | _Raw | ReplyFunction | None) -> None:
        self._answers.append((answer, self._fault))
        self._fault = None

    def _answer(self, reply: Reply) -> Answer:
        pace = reply.pace if isinstance(reply.pace, (int, float)) else tuple(reply.pace)
        calls = tuple(self._call(c) for c in reply.tool_calls)
        return Answer(reply.content, reply.reasoning, calls, reply.chunk, reply.finish, pace)

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
        prefill: float = 0.0,
        loading: bool | int = False,
        busy: bool | int = False,
    ) -> FakeLlama:
        """What goes wrong with the answer you queue next (``fake.fail(cut_after=3).reply(
        "...")``; with a reply function, with every answer it gives), or with the next
        requests:

        - ``cut_after=N``: the connection breaks after ``N`` tokens
          (``StreamClosedEarlyError``, or a resume when ``resumable``);
        - ``stall=True``: the stream goes silent (after ``cut_after`` tokens, default 0) and
          the client's ``stall_timeout`` fires (``StalledError``);
        - ``error="..."``: llama-server's error. Alone, it is queued as an answer of its own:
          that request gets an HTTP 500 error envelope (``HTTPStatusError``). With
          ``cut_after=N`` (or ``prefill``), the answer stops with an in-band error event
          after ``N`` tokens (``ServerError``);
        - ``prefill=S``: the prompt takes ``S`` seconds: with ``return_progress``, progress
          events at 0, 25, 50, 75 and 100 % of it, ``S / 4`` seconds apart, then the answer
          (silence instead of the progress events without it);
        - ``loading=True`` (or a count): the next chat requests get ``503 Loading model``
          (the client shows ``Waiting(slot_busy=False)`` and waits for ``/health``);
        - ``busy=True`` (or a count): the next ``/slots`` answers show every slot processing
          (a request pinned to a slot shows ``Waiting(slot_busy=True)``, or raises
          ``BusyError`` with ``wait=False``)."""
        if not isinstance(prefill, (int, float)) or prefill < 0:
            raise ValueError(f"prefill must be seconds >= 0, not {prefill!r}")
        if loading:
            self._loading += int(loading)
        if busy:
            self._busy += int(busy)
        fault = _Fault(cut_after, stall, error, prefill)
        if error is not None and cut_after is None and not stall and not prefill:
            self._answers.append((None, fault))
        elif fault.breaks or prefill:
            self._fault = fault
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
        taken = self._take(self.requests[-1])
        if taken is None:
            return _error(500, NO_REPLY, "server_error")
        answer, fault = taken
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
                             int(time.time()), fault.prefill if fault else 0.0)
        chunks = stream_chunks(answer, {**body, "stream": True}, **settings._asdict())
        if not body.get("stream"):  # the whole answer once the stream would have ended
            whole = whole_answer(answer, body, **settings._asdict())
            return FakeResponse(200, JSON, [(chunks[-1].at, whole)], read_timeout)
        conversation = headers.get("x-conversation-id")
        if conversation is not None and self.resumable:
            self._conversations[conversation] = b"".join(p.data for p in chunks)
        return FakeResponse(200, SSE, _with_fault(chunks, fault), read_timeout)

    def _take(
        self, request: FakeRequest
    ) -> tuple[Answer | _Raw | None, _Fault | None] | None:
        """The next queued answer for ``request`` (a reply function's, while it gives one);
        None when there is none."""
        while self._answers:
            entry, fault = self._answers[0]
            if not callable(entry):
                self._answers.popleft()
                return entry, fault
            given = entry(request)
            if given is None:  # this function is done: the next answer in the queue
                self._answers.popleft()
                continue
            if isinstance(given, str):
                given = Reply(given)
            if not isinstance(given, Reply):
                raise TypeError(f"a reply function returns a Reply, a str or None, not {given!r}")
            return self._answer(given), fault
        return None

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


def _with_fault(chunks: list[Piece], fault: _Fault | None) -> list[_Timed]:
    steps: list[_Timed] = [(p.at, p.data) for p in chunks]
    if fault is None or not fault.breaks:
        return steps
    n = _cut_index(chunks, fault.cut_after or 0)
    at = chunks[n].at  # the break comes instead of chunk n, when it was due
    if fault.error is not None:
        event = b"data: " + error_body(500, fault.error, "server_error") + b"\n\n"
        return [*steps[:n], (at, event)]
    return [*steps[:n], (at, _Stall() if fault.stall else _Cut())]


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
    """A message of the body as the library's type (read as ``from_openai`` reads it, so
    every field the request builder writes comes back); a dict when it is none of them."""
    if not isinstance(m, dict):
        return {"raw": m}
    try:
        (message,) = from_openai([m])
    except ValueError:
        return m
    if isinstance(message, AssistantMessage) and message.content == "":
        # the request body sends an assistant content of None as "": read it back as None
        return msgspec.structs.replace(message, content=None)
    return message


def _json(status: int, obj: Any) -> FakeResponse:
    return FakeResponse(status, JSON, [json.dumps(obj).encode()], None)


def _error(status: int, message: str, type: str) -> FakeResponse:
    headers = (*JSON, ("Connection", "close"))
    return FakeResponse(status, headers, [error_body(status, message, type)], None)
