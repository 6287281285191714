"""The serving side of FakeLlama: each request it receives, recorded and answered as
llama-server answers it (a router's through :mod:`._router`)."""

from __future__ import annotations

import json
import time
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from urllib.parse import parse_qs, urlsplit

import anyio

from .._transports.base import TransportError
from ._request import FakeCall, FakeRequest, Reply, ReplyFunction, decode, parse
from ._response import (
    JSON,
    Cut,
    FakeResponse,
    Fault,
    Raw,
    Step,
    error_response,
    faulty,
    json_response,
)
from ._wire import Answer, fake_id, prompt_tokens, stream_chunks, whole_answer

__all__ = ["FakeModel", "Queued", "Serving"]

CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
SSE = (("Content-Type", "text/event-stream"), ("Transfer-Encoding", "chunked"))
_THROUGH_LITELLM = frozenset({"/v1/models", "/models", "/health"})  # beside the chat
PUBLIC = ("/health", "/v1/health")  # answered without the API key
NO_REPLY = "FakeLlama has no reply queued for this request: call fake.reply(...) first"
# llama-server refuses it (llama.cpp#28478); n_probs gives the same answer there.
LOGPROBS_WITH_TOOLS = "logprobs is not supported with tools + stream"

Queued = tuple[Answer | Raw | ReplyFunction | None, Fault | None]


_PROMETHEUS = (("Content-Type", "text/plain; version=0.0.4"),)
_TOKEN_ROUTES = frozenset(
    {"/tokenize", "/detokenize", "/apply-template", "/v1/chat/completions/input_tokens"}
)
_RERANK_ROUTES = frozenset({"/v1/rerank", "/rerank", "/v1/reranking", "/reranking"})
_POSTS = _TOKEN_ROUTES | _RERANK_ROUTES | {"/v1/embeddings", "/embeddings"}


def fake_template(messages: Any) -> str:
    """This fake's chat template: ``<|role|>content`` a message, one a line, then the
    assistant's turn begun (a message whose content is not text counts its JSON)."""
    lines = []
    for message in messages if isinstance(messages, list) else []:
        entry = message if isinstance(message, dict) else {}
        content = entry.get("content")
        text = content if isinstance(content, str) else json.dumps(content)
        lines.append(f"<|{entry.get('role', '?')}|>{text}")
    return "\n".join([*lines, "<|assistant|>"])


class _Settings(NamedTuple):
    completion_id: str
    model: str
    total: int
    cache: int
    created: int
    prefill: float


@dataclass
class FakeModel:
    """One model of a router ``FakeLlama(models=...)``.

    ``status`` is what ``GET /models`` shows (``unloaded``, ``loading``, ``loaded``,
    ``sleeping``); set it to start elsewhere. A ``broken`` model's loads fail: it goes back to
    ``unloaded`` with ``exit_code`` 1, as when the model's process exits while loading.
    ``aliases`` are other names the router takes for it. ``server`` is the
    :class:`FakeLlama` that answers its chats and GETs (its own replies, slots, props and
    requests); without one the router answers them itself, from its own queue and slots."""

    status: str = "unloaded"
    broken: bool = False
    aliases: tuple[str, ...] = ()
    server: Serving | None = None
    exit_code: int | None = None
    _looks: int = field(default=0, init=False, repr=False)  # looks at /models a load has left
    _used: int = field(default=0, init=False, repr=False)


class Serving:
    """What a FakeLlama does with a request: its state, set up by ``FakeLlama``."""

    model: str
    n_ctx: int
    n_slots: int
    resumable: bool
    slots_endpoint: bool
    metrics: dict[str, float] | None
    slot_files: dict[str, int] | None
    embeddings: bool
    reranking: bool
    models: dict[str, FakeModel]
    load_looks: int
    models_max: int
    api_key: str | None
    litellm: str | None
    requests: list[FakeRequest]
    calls: list[FakeCall]
    down: bool
    busy: set[int]
    _answers: deque[Queued]
    _loading_for: float | None
    _loading_until: float
    _dies: bool
    _running: Counter[int]
    _cached: list[dict[str, Any]]
    _conversations: dict[str, bytes]
    _count: int

    def _answer(self, reply: Reply) -> Answer:
        raise NotImplementedError  # FakeLlama's: a Reply as the answer it streams

    def _routed(
        self,
        call: FakeCall,
        request: FakeRequest | None,
        raw: tuple[str, Mapping[str, str], bytes | None, float | None],
    ) -> FakeResponse:
        raise NotImplementedError  # FakeLlama's: a router's answer (._router)

    def _serve(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        read_timeout: float | None,
    ) -> FakeResponse:
        parts = urlsplit(url)
        path = parts.path
        chat = method == "POST" and path in CHAT_PATHS
        if chat and self._dies:
            self._dies, self.down = False, True
        if self.down:
            raise TransportError("connect", "FakeLlama: connection refused (the server is down)")
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        data = parse(body)
        lower = {k.lower(): v for k, v in headers.items()}
        if self.litellm is not None:
            lower.pop("x-conversation-id", None)  # LiteLLM does not pass it on
        call = FakeCall(method, path, query, data, lower)
        self.calls.append(call)
        if self.litellm is not None and not chat and path not in _THROUGH_LITELLM:
            return json_response(404, {"detail": "Not Found"})
        request = None
        if chat:
            request = decode(data if isinstance(data, dict) else {}, lower, query)
            self.requests.append(request)
        if self._still_loading():
            return error_response(503, "Loading model")
        if self.api_key is not None and path not in PUBLIC and not self._keyed(lower):
            return error_response(401, "Invalid API Key")
        if self.models:
            response = self._routed(call, request, (url, headers, body, read_timeout))
        else:
            response = self._as_model(call, request, read_timeout)
        if self.litellm is not None:
            response.add_header("x-litellm-version", self.litellm)
        return response

    def _keyed(self, headers: Mapping[str, str]) -> bool:
        """Whether the request carries the API key, in any of llama-server's three ways."""
        given = headers.get("authorization", "")
        given = given.removeprefix("Bearer ") or headers.get("x-api-key", "")
        return given == self.api_key

    def _still_loading(self) -> bool:
        if self._loading_for is None and not self._loading_until:
            return False
        now = anyio.current_time()
        if self._loading_for is not None:
            self._loading_until, self._loading_for = now + self._loading_for, None
        return now < self._loading_until

    def _as_model(
        self,
        call: FakeCall,
        request: FakeRequest | None,
        read_timeout: float | None,
        model: str | None = None,
    ) -> FakeResponse:
        """The answer of the server itself (or, in a router, of its ``model``)."""
        method, path = call.method, call.path
        if request is not None:
            return self._chat(request, read_timeout, model or self.model)
        if method == "GET" and path == "/health":
            return json_response(200, {"status": "ok"})
        if method == "GET" and path == "/props":
            return json_response(200, {**self.props(), **({"model_alias": model} if model else {})})
        if method == "GET" and path == "/slots":
            return self._slots()
        if method == "GET" and path == "/metrics":
            return self._metrics()
        if method == "POST" and path in _POSTS:
            return self._post(path, call.body)
        if method == "POST" and path.startswith("/slots/"):
            return self._slot_file(path, call.query.get("action"), call.body)
        if method == "GET" and path in ("/v1/models", "/models"):
            return json_response(
                200, {"object": "list", "data": [{"id": self.model, "object": "model"}]}
            )
        if method == "POST" and path == "/v1/chat/completions/control":
            return json_response(200, {"success": True})
        if self.resumable and path.startswith("/v1/stream"):
            return self._stream_route(call, read_timeout)
        return error_response(404, "File Not Found")

    def props(self) -> dict[str, Any]:
        """What ``GET /props`` answers."""
        return {
            "default_generation_settings": {"n_ctx": self.n_ctx // self.n_slots, "params": {}},
            "total_slots": self.n_slots,
            "model_alias": self.model,
            "model_path": f"/models/{self.model}.gguf",
            "modalities": {"vision": False, "audio": False},
            "chat_template": "{# fake #}",
            "chat_template_caps": {
                "supports_tools": True,
                "supports_tool_calls": True,
                "supports_system_role": True,
            },
            "build_info": "b0-fakellama",
            "is_sleeping": False,
        }

    def _metrics(self) -> FakeResponse:
        """``GET /metrics`` in Prometheus text (``metrics``: the samples, None: the server
        runs without ``--metrics`` and answers 501, as llama-server does)."""
        if self.metrics is None:
            return error_response(501, "This server does not support metrics endpoint.")
        text = "".join(f"# TYPE {k} gauge\n{k} {v}\n" for k, v in self.metrics.items())
        return FakeResponse(200, _PROMETHEUS, [text.encode()], None)

    def _embeddings(self, body: Any) -> FakeResponse:
        """``POST /v1/embeddings``: this fake's vector of a text is its length, its count of
        spaces and 1.0, and its usage the characters (``embeddings=False``: 501, as without
        ``--embeddings``)."""
        if not self.embeddings:
            return error_response(501, "This server does not support embeddings.")
        given = body.get("input", []) if isinstance(body, dict) else []
        texts = [given] if isinstance(given, str) else list(given)
        data = [
            {"object": "embedding", "index": i, "embedding": [len(t), t.count(" "), 1.0]}
            for i, t in enumerate(map(str, texts))
        ]
        tokens = sum(map(len, map(str, texts)))  # this fake's tokens are characters
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        answer = {"object": "list", "data": data, "model": self.model, "usage": usage}
        return json_response(200, answer)

    def _post(self, path: str, body: Any) -> FakeResponse:
        """The POST routes beside chat: embeddings, reranking, the tokenizer."""
        if path in ("/v1/embeddings", "/embeddings"):
            return self._embeddings(body)
        if path in _RERANK_ROUTES:
            return self._rerank(body)
        return self._tokens(path, body)

    def _rerank(self, body: Any) -> FakeResponse:
        """``POST /v1/rerank``: this fake's score of a document is how many of the query's
        words it has (case aside), most relevant first, ``top_n`` of them; its usage the
        characters (``reranking=False``: 501, as without ``--reranking``)."""
        if not self.reranking:
            return error_response(501, "This server does not support reranking.")
        body = body if isinstance(body, dict) else {}
        query = set(str(body.get("query", "")).lower().split())
        documents = [str(d) for d in body.get("documents", [])]
        scores = [float(len(query & set(d.lower().split()))) for d in documents]
        order = sorted(range(len(documents)), key=lambda i: (-scores[i], i))
        top = body.get("top_n")
        kept = order[:top] if isinstance(top, int) and top > 0 else order
        results = [{"index": i, "relevance_score": scores[i]} for i in kept]
        tokens = sum(map(len, documents)) + len(str(body.get("query", ""))) * len(documents)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        answer = {"model": self.model, "object": "list", "usage": usage, "results": results}
        return json_response(200, answer)

    def _tokens(self, path: str, body: Any) -> FakeResponse:
        """The tokenizer routes. This fake's tokens are characters (the id is the code
        point) and its template one line per message, ``<|role|>content``; a chat's prompt
        is that, counted the same way (``input_tokens``)."""
        body = body if isinstance(body, dict) else {}
        if path == "/detokenize":
            return json_response(200, {"content": "".join(map(chr, body.get("tokens", [])))})
        if path == "/tokenize":
            text = str(body.get("content", ""))
            if body.get("with_pieces"):
                return json_response(200, {"tokens": [{"id": ord(c), "piece": c} for c in text]})
            return json_response(200, {"tokens": [ord(c) for c in text]})
        prompt = fake_template(body.get("messages", []))
        if path == "/apply-template":
            return json_response(200, {"prompt": prompt})
        return json_response(200, {"object": "response.input_tokens", "input_tokens": len(prompt)})

    def _slot_file(self, path: str, action: str | None, body: Any) -> FakeResponse:
        """``POST /slots/{id}?action=save|restore|erase``: ``slot_files`` (None: 501, as
        without ``--slot-save-path``) holds each saved file's token count."""
        files = self.slot_files
        if files is None:
            return error_response(501, "This server does not support slots action.")
        slot = int(path.rsplit("/", 1)[1]) % self.n_slots
        name = body.get("filename", "") if isinstance(body, dict) else ""
        tokens = 100 + 10 * slot  # what a slot holds, as far as this fake knows
        if action == "save":
            files[name] = tokens
            saved = {"n_saved": tokens, "n_written": tokens * 400, "timings": {"save_ms": 1.0}}
            return json_response(200, {"id_slot": slot, "filename": name, **saved})
        if action == "restore":
            if name not in files:
                return error_response(400, "Unable to restore slot: invalid slot save file")
            n = files[name]
            read = {"n_restored": n, "n_read": n * 400, "timings": {"restore_ms": 1.0}}
            return json_response(200, {"id_slot": slot, "filename": name, **read})
        return json_response(200, {"id_slot": slot, "n_erased": tokens})

    def _slots(self) -> FakeResponse:
        if not self.slots_endpoint:
            return error_response(501, "This server does not support slots endpoint.")
        return json_response(
            200,
            [
                {
                    "id": i,
                    "n_ctx": self.n_ctx // self.n_slots,
                    "is_processing": i in self.busy or self._running[i] > 0,
                }
                for i in range(self.n_slots)
            ],
        )

    def _slot(self, asked: Any) -> int:
        """The slot a chat runs on: the one it is pinned to, else the first free one."""
        if isinstance(asked, int) and 0 <= asked < self.n_slots:
            return asked
        free = [i for i in range(self.n_slots) if i not in self.busy and not self._running[i]]
        return free[0] if free else 0

    def _occupy(self, request: FakeRequest, response: FakeResponse) -> FakeResponse:
        """``response`` keeps its slot busy until it is closed."""
        slot = self._slot(request.settings.get("id_slot"))
        self._running[slot] += 1

        def release() -> None:
            self._running[slot] -= 1

        return response.on_close(release)

    def _chat(self, request: FakeRequest, read_timeout: float | None, model: str) -> FakeResponse:
        body = request.body
        if body.get("logprobs") is True and body.get("tools") and body.get("stream"):
            return error_response(400, LOGPROBS_WITH_TOOLS, "invalid_request_error")
        taken = self._take(request)
        if taken is None:
            return error_response(500, NO_REPLY)
        answer, fault = taken
        if answer is None:
            error = fault.error if fault and fault.error else NO_REPLY
            return error_response(fault.status if fault else 500, error)
        if isinstance(answer, Raw):
            steps: list[Step] = [*answer.chunks, *([Cut()] if answer.cut else [])]
            return self._occupy(
                request, FakeResponse(answer.status, answer.headers, steps, read_timeout)
            )
        messages = [m for m in body.get("messages", []) if isinstance(m, dict)]
        total = sum(map(prompt_tokens, messages))
        cache = self._cache_hit(messages)
        self._cached = [*messages, answer.echo()]
        self._count += 1
        settings = _Settings(
            "chatcmpl-" + fake_id(self._count),
            model,
            total,
            cache,
            int(time.time()),
            fault.prefill if fault else 0.0,
        )
        chunks = stream_chunks(answer, {**body, "stream": True}, **settings._asdict())
        if not body.get("stream"):  # the whole answer once the stream would have ended
            whole = whole_answer(answer, body, **settings._asdict())
            response = FakeResponse(200, JSON, [(chunks[-1].at, whole)], read_timeout)
            return self._occupy(request, response)
        conversation = request.headers.get("x-conversation-id")
        if conversation is not None and self.resumable:
            self._conversations[conversation] = b"".join(p.data for p in chunks)
        response = FakeResponse(200, SSE, faulty(chunks, fault), read_timeout)
        return self._occupy(request, response)

    def _take(self, request: FakeRequest) -> tuple[Answer | Raw | None, Fault | None] | None:
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

    def _stream_route(self, call: FakeCall, read_timeout: float | None) -> FakeResponse:
        if call.method == "POST" and call.path == "/v1/streams/lookup":
            return json_response(200, [])
        conv = self._conversations.get(call.query.get("conv_id", ""))
        if call.method == "DELETE":
            return FakeResponse(204, (), [], None)
        if conv is None:
            return error_response(404, "conversation not found")
        start = int(call.query.get("from", "0"))
        return FakeResponse(200, SSE, [conv[start:]], read_timeout)
