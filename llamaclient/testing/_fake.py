"""FakeLlama: a scripted llama-server inside the test process (no sockets, any event loop)."""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio

from .._client import Client
from .._driver.limiter import Limiter
from .._types.config import Config
from .._types.messages import ToolCall
from ._recording import load
from ._request import FakeCall, FakeRequest, Reply, ReplyFunction, per_item, tool_call
from ._response import FakeResponse, FakeTransport, Fault, Raw
from ._router import serve_router
from ._serving import FakeModel, Queued, Serving
from ._wire import Answer, fake_id, stream_chunks

__all__ = [
    "FakeCall",
    "FakeLlama",
    "FakeRequest",
    "FakeResponse",
    "FakeTransport",
    "Reply",
    "stream_body",
]

URL = "http://fake-llama.test"

# Defaults for FakeLlama.client(): fail fast instead of waiting minutes on a scripted fault.
FAST: dict[str, Any] = {
    "wait_timeout": 5.0,
    "stall_timeout": 1.0,
    "load_timeout": 5.0,
    "retry_backoff": 0.01,
    "retry_max_backoff": 0.05,
}


class FakeLlama(Serving):
    """A scripted llama-server for tests, in-process: no sockets, no model.

    Queue answers with :meth:`reply` (or :meth:`replay` a recorded one; or a reply function
    that computes them from each request), faults with :meth:`fail`, then run your code
    against ``fake.client()`` (or ``Client(config, transport=fake.transport())``). Each chat
    request takes the next queued answer; ``fake.requests`` is what was sent, decoded, and
    ``fake.calls`` every HTTP request.

    ``model`` is the model name in the chunks, ``n_ctx``/``n_slots`` the server's ``-c``
    and ``-np`` (``/props`` and ``/slots`` report a slot's context, ``n_ctx // n_slots``, as
    llama-server does; ``slots_endpoint=False``: ``/slots`` answers 501, as with
    ``--no-slots``), ``metrics`` the samples ``/metrics`` shows (None: 501, no
    ``--metrics``), ``slot_save_path`` whether slots save to files (``--slot-save-path``),
    ``resumable`` whether it offers resumable streams (a cut stream is then
    picked up where it broke, as llama-server with ``X-Conversation-Id`` does), ``api_key``
    the key every route but ``/health`` wants (``401 Invalid API Key`` without it, as with
    ``--api-key``). Its tokenizer (``/tokenize``, ``/detokenize``, ``/apply-template``,
    ``/v1/chat/completions/input_tokens``) makes a token of each character and a line of
    each message (``<|role|>content``).

    ``litellm``: it is reached through LiteLLM's proxy of that version (``"1.108.7"``): every
    chat answer carries ``x-litellm-version``, the request's ``X-Conversation-Id`` is not
    passed on (nothing resumes), and every route but the chat, ``/models`` and ``/health``
    answers ``404 {"detail": "Not Found"}``, as the real proxy does.

    With ``models`` it is a router (llama-server without ``-m``): see :class:`FakeModel`.
    A load takes ``load_looks`` looks at ``GET /models``; at most ``models_max`` models run
    at once (a load past it stops the least recently used idle one, or fails when none is).

    State you may set at any time: ``down`` (every connection is refused, as a killed
    server's), ``busy`` (the slots another client keeps busy: ``/slots`` shows them
    processing, as it shows each slot a chat of yours is on).
    """

    def __init__(
        self,
        model: str = "fake-model",
        *,
        n_ctx: int = 4096,
        n_slots: int = 1,
        resumable: bool = False,
        url: str = URL,
        slots_endpoint: bool = True,
        models: Iterable[str] | Mapping[str, FakeModel] = (),
        load_looks: int = 2,
        models_max: int = 4,
        api_key: str | None = None,
        metrics: dict[str, float] | None = None,
        slot_save_path: bool = False,
        embeddings: bool = False,
        reranking: bool = False,
        litellm: str | None = None,
    ) -> None:
        self.model = model
        self.litellm = litellm
        self.n_ctx = n_ctx
        self.n_slots = n_slots
        self.resumable = resumable
        self.url = url
        self.slots_endpoint = slots_endpoint
        self.metrics = metrics  # GET /metrics's samples (None: 501, no --metrics)
        # Saved slot files (name -> tokens), with --slot-save-path; None: 501 without it.
        self.slot_files: dict[str, int] | None = {} if slot_save_path else None
        self.embeddings = embeddings  # POST /v1/embeddings answers (else 501)
        self.reranking = reranking  # POST /v1/rerank answers (else 501)
        self.models: dict[str, FakeModel] = (
            dict(models) if isinstance(models, Mapping) else {m: FakeModel() for m in models}
        )
        self.load_looks = load_looks
        self.models_max = models_max
        self.api_key = api_key
        self.requests: list[FakeRequest] = []
        self.calls: list[FakeCall] = []
        self.down = False
        self.busy: set[int] = set()
        self._answers: deque[Queued] = deque()
        self._fault: Fault | None = None  # for the answer queued next
        self._loading_for: float | None = None  # seconds, from the next request on
        self._loading_until = 0.0
        self._dies = False  # the next chat finds the server down
        self._running: Counter[int] = Counter()  # slot -> chats of ours on it
        self._cached: list[dict[str, Any]] = []
        self._conversations: dict[str, bytes] = {}
        self._count = 0

    def __repr__(self) -> str:
        kind = f"router of {list(self.models)}" if self.models else repr(self.model)
        return f"FakeLlama({kind}, {self.pending} answers queued)"

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
        confidence: float | Sequence[float] = 1.0,
    ) -> FakeLlama:
        """Queue the next answer. It streams the way llama-server streams: ``reasoning``
        first, then ``content``, then the ``tool_calls`` (each a :class:`ToolCall` or a
        mapping ``{"name": ..., "arguments": str | dict, "id": ...}``), one token per HTTP
        chunk: ``chunk`` characters each, or word by word when None. ``finish`` is the finish
        reason (default: ``tool_calls`` with calls, else ``stop``; ``length`` when the
        request's ``max_tokens`` cuts the answer). ``pace`` is the seconds between chunks
        (one number, or one per chunk: see :class:`Reply`). ``confidence`` is each token's
        probability, sent as its log-probability to a request that asks for them
        (``logprobs``, or ``n_probs``; ``logprobs`` with tools while streaming is a 400, as
        llama-server's).

        Or give a :class:`Reply`, or a function of the :class:`FakeRequest` returning one
        (or a ``str``, the content): it answers every request that reaches it, until it
        returns None; the request then takes the next queued answer. Returns ``self``, so
        calls chain."""
        if isinstance(content, Reply) or callable(content):
            given = (reasoning, tuple(tool_calls), chunk, finish, pace, confidence)
            alone = given == (None, (), None, None, 0, 1.0)
            if not alone:
                raise ValueError("give a Reply or a reply function alone, without other arguments")
            self._queue(content if callable(content) else self._answer(content))
            return self
        reply = Reply(content, reasoning, tool_calls, chunk, finish, pace, confidence)
        self._queue(self._answer(reply))
        return self

    def _queue(self, answer: Answer | Raw | ReplyFunction | None) -> None:
        self._answers.append((answer, self._fault))
        self._fault = None

    def _answer(self, reply: Reply) -> Answer:
        pace, sure = per_item(reply.pace), per_item(reply.confidence)
        calls = tuple(self._call(c) for c in reply.tool_calls)
        return Answer(reply.content, reply.reasoning, calls, reply.chunk, reply.finish, pace, sure)

    def _call(self, call: ToolCall | Mapping[str, Any]) -> ToolCall:
        if isinstance(call, ToolCall):
            return call
        self._count += 1
        return tool_call(call, fake_id(self._count))

    def fail(
        self,
        *,
        cut_after: int | None = None,
        stall: bool = False,
        error: str | None = None,
        status: int = 500,
        prefill: float = 0.0,
        hold: anyio.Event | None = None,
        loading: float = 0.0,
        down: bool = False,
    ) -> FakeLlama:
        """What goes wrong with the answer you queue next (``fake.fail(cut_after=3).reply(
        "...")``; with a reply function, with every answer it gives), or with the next
        requests:

        - ``cut_after=N``: the connection breaks after ``N`` tokens
          (``StreamClosedEarlyError``, or a resume when ``resumable``);
        - ``stall=True``: the stream goes silent (after ``cut_after`` tokens, default 0) and
          the client's ``stall_timeout`` fires (``StalledError``);
        - ``error="..."``: llama-server's error. Alone, it is queued as an answer of its own:
          that request gets an HTTP ``status`` (default 500) error envelope
          (``HTTPStatusError``; a 503 or 429 is retried). With ``cut_after=N`` (or
          ``prefill``, or ``hold``), the answer stops with an in-band error event after ``N``
          tokens (``ServerError``);
        - ``prefill=S``: the prompt takes ``S`` seconds: with ``return_progress``, progress
          events at 0, 25, 50, 75 and 100 % of it, ``S / 4`` seconds apart, then the answer
          (silence instead of the progress events without it);
        - ``hold=event`` (an ``anyio.Event``): the answer waits for ``event`` before its
          first byte; the chat keeps its slot busy meanwhile (``/slots`` shows it);
        - ``loading=S``: the model is still loading for ``S`` seconds from the next request
          on: every request gets ``503 Loading model``, ``/health`` too (the client shows
          ``Waiting(slot_busy=False)`` and polls ``/health``);
        - ``down=True``: the server dies when the next chat comes: that connection is
          refused, and every later one, as ``fake.down = True`` (a retry or failover)."""
        if not isinstance(prefill, (int, float)) or prefill < 0:
            raise ValueError(f"prefill must be seconds >= 0, not {prefill!r}")
        if isinstance(loading, bool) or not isinstance(loading, (int, float)) or loading < 0:
            raise ValueError(f"loading must be seconds >= 0, not {loading!r}")
        if not 400 <= status <= 599:
            raise ValueError(f"status must be an error status (400-599), not {status}")
        if loading:
            self._loading_for = loading
        self._dies = self._dies or down
        fault = Fault(cut_after, stall, error, status, prefill, hold)
        shaped = cut_after is not None or stall or prefill or hold is not None
        if error is not None and not shaped:
            self._answers.append((None, fault))
        elif shaped:
            self._fault = fault
        return self

    def replay(self, path: str | Path) -> FakeLlama:
        """Queue the answer recorded in ``path`` (a ``recordings/*.http`` file): the next
        chat request gets its status, headers and body, HTTP chunk by HTTP chunk."""
        rec = load(path)
        framing = ("transfer-encoding", "content-length")
        headers = tuple((k, v) for k, v in rec.headers if k.lower() not in framing)
        self._queue(Raw(rec.status, headers, rec.chunks, rec.meta.get("cut") == "true"))
        return self

    def transport(self) -> FakeTransport:
        """A :class:`~llamaclient.Transport` for ``Client(config, transport=...)``."""
        return FakeTransport(self)

    def client(self, *, limiter: Limiter | None = None, **config: Any) -> Client:
        """A :class:`~llamaclient.Client` for this fake server. ``config`` overrides
        :class:`~llamaclient.Config` fields; timeouts default to a few seconds (and
        ``stall_timeout`` to 1 s), so a scripted fault fails fast. ``limiter``: a shared
        concurrency limit (``Client(..., limiter=...)``)."""
        return Client(
            Config(self.url, **{**FAST, **config}), transport=self.transport(), limiter=limiter
        )

    def _routed(
        self,
        call: FakeCall,
        request: FakeRequest | None,
        raw: tuple[str, Mapping[str, str], bytes | None, float | None],
    ) -> FakeResponse:
        return serve_router(self, call, request, raw)

    @property
    def pending(self) -> int:
        """Answers queued and not taken yet."""
        return len(self._answers)


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
    chunks = stream_chunks(
        answer,
        body,
        completion_id="chatcmpl-" + fake_id(0),
        model=model,
        total=10,
        cache=0,
        created=int(time.time()),
    )
    return b"".join(p.data for p in chunks)
