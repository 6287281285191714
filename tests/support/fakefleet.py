"""In-memory llama-servers (and routers) behind the ``Transport`` interface: no sockets.

``FakeServer`` answers ``/slots``, ``/health``, ``/props``, ``/models``, ``/models/load``,
``/models/unload`` and streamed chats. Chats record the ``id_slot`` they carried and can be
held open (``hold``) to keep a slot busy; ``down`` refuses every connection, as a killed
server does. ``FakeRouter`` adds models with a status that a load moves through
``loading`` to ``loaded`` (or to ``unloaded`` with an exit code, for a ``broken`` one).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio

from llamaclient import TransportError
from tests.support.faultserver import chat_chunks, error_body

__all__ = ["FakeResponse", "FakeRouter", "FakeServer", "Sent"]


class Sent:
    """One request the fake received."""

    def __init__(self, method: str, url: str, body: bytes | None) -> None:
        parts = urlsplit(url)
        self.method = method
        self.path = parts.path
        self.query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        self.json: Any = json.loads(body) if body else None

    def __repr__(self) -> str:
        return f"Sent({self.method} {self.path} {self.query})"


class FakeResponse:
    """A whole answer, read in the pieces given; ``gate`` (if any) is awaited first."""

    fair_reads = False
    complete = False

    def __init__(
        self,
        status: int,
        pieces: list[bytes],
        content_type: str = "application/json",
        gate: anyio.Event | None = None,
    ) -> None:
        self.status = status
        self._pieces = list(pieces)
        self._type = content_type
        self._gate = gate
        self.closed = False

    def header(self, name: str) -> str | None:
        return self._type if name.lower() == "content-type" else None

    async def read(self) -> bytes:
        if self._gate is not None:
            await self._gate.wait()
            self._gate = None
        await anyio.lowlevel.checkpoint()
        return self._pieces.pop(0) if self._pieces else b""

    def whole(self) -> bytes:
        """The whole answer at once (for an answer without a ``gate``)."""
        return b"".join(self._pieces)

    async def aread(self) -> bytes:
        pieces = []
        while data := await self.read():
            pieces.append(data)
        return b"".join(pieces)

    async def aclose(self) -> None:
        self.closed = True


def _json(status: int, obj: Any) -> FakeResponse:
    return FakeResponse(status, [json.dumps(obj).encode()])


class FakeServer:
    """One llama-server with ``n_slots`` slots, as a Transport."""

    answer_text = "ok"  # what every chat answers (a JSON text for a typed-output test)

    def __init__(self, n_slots: int = 2, *, slots_enabled: bool = True) -> None:
        self.n_slots = n_slots
        self.slots_enabled = slots_enabled
        self.sent: list[Sent] = []
        self.down = False
        self.busy: set[int] = set()  # slots another client keeps busy
        self.hold: anyio.Event | None = None  # chats wait on this before their first byte
        self.running: dict[int, int] = {}  # slot -> chats of ours streaming on it
        self.refuse_chats = False  # chats are refused, other requests answered
        self.failing: int | None = None  # /slots and /health answer this status
        self.chat_statuses: list[int] = []  # the next chats answer these statuses first
        self.cut_chats = False  # chats break after their first piece

    @property
    def chats(self) -> list[Sent]:
        return [s for s in self.sent if s.path == "/v1/chat/completions"]

    async def send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        *,
        read_timeout: float | None = None,
    ) -> FakeResponse:
        await anyio.lowlevel.checkpoint()
        if self.down or (self.refuse_chats and "/chat/" in url):
            raise TransportError("connect", "connection refused")
        sent = Sent(method, url, body)
        self.sent.append(sent)
        return self.answer(sent)

    def answer(self, sent: Sent) -> FakeResponse:
        if self.failing is not None and sent.path in ("/slots", "/health"):
            return _json(self.failing, error_body(self.failing, "Loading model"))
        if sent.path == "/slots":
            if not self.slots_enabled:
                return _json(501, error_body(501, "This server does not support slots endpoint."))
            return _json(200, self._slots())
        if sent.path == "/health":
            return _json(200, {"status": "ok"})
        if sent.path == "/props":
            return _json(200, {"total_slots": self.n_slots})
        if sent.path == "/v1/chat/completions":
            if self.chat_statuses:
                status = self.chat_statuses.pop(0)
                return _json(status, error_body(status, "Service Unavailable"))
            return self.chat(sent)
        if sent.path == "/v1/stream" and sent.method == "DELETE":
            return FakeResponse(204, [])
        return _json(404, error_body(404, "File Not Found"))

    def _slots(self) -> list[dict[str, Any]]:
        return [
            {"id": i, "is_processing": i in self.busy or bool(self.running.get(i))}
            for i in range(self.n_slots)
        ]

    def chat(self, sent: Sent) -> FakeResponse:
        slot = sent.json.get("id_slot", -1) % self.n_slots if sent.json else 0
        self.running[slot] = self.running.get(slot, 0) + 1
        server = self

        class _Chat(FakeResponse):
            async def read(self) -> bytes:
                if server.cut_chats and len(self._pieces) < len(pieces):
                    raise TransportError("read", "connection reset")
                return await super().read()

            async def aclose(self) -> None:
                if not self.closed:
                    server.running[slot] -= 1
                self.closed = True

        pieces = chat_chunks(self.answer_text)
        return _Chat(200, pieces, "text/event-stream", self.hold)

    async def aclose(self) -> None:
        pass


class FakeRouter(FakeServer):
    """A router: ``models`` by name, each with a status; ``broken`` ones fail to load."""

    def __init__(self, *models: str, broken: tuple[str, ...] = (), steps: int = 2) -> None:
        super().__init__()
        self.status = dict.fromkeys(models, "unloaded")
        self.exit_code: dict[str, int] = {}
        self.broken = set(broken)
        self.steps = steps  # looks at /models a load takes
        self._loading: dict[str, int] = {}
        self.chat_error: tuple[int, str] | None = None  # every chat answers this error

    def answer(self, sent: Sent) -> FakeResponse:
        own = self.own_answer(sent)
        if own is not None:
            return own
        if sent.path == "/v1/chat/completions":
            if self.chat_error is not None:
                return _json(self.chat_error[0], error_body(*self.chat_error))
            refused = self.admit(sent)
            if refused is not None:
                return refused
        return super().answer(sent)

    def own_answer(self, sent: Sent) -> FakeResponse | None:
        """The router's answer on its own routes (``GET /models``, ``POST /models/load``,
        ``POST /models/unload``); None for any other request."""
        if sent.path == "/models" and sent.method == "GET":
            self._advance()
            return _json(200, {"data": [self._entry(m) for m in self.status], "object": "list"})
        if sent.path in ("/models/load", "/models/unload"):
            return self._load(sent)
        return None

    def admit(self, sent: Sent) -> FakeResponse | None:
        """Before handing a request to its model's server (the model named in the body, else
        by ``?model=``): the router's error for an unknown model, a stopped one with
        ``?autoload=false`` or a ``broken`` one; else None, the model now loaded (autoload)."""
        model = (sent.json or {}).get("model") if sent.json else sent.query.get("model")
        if model not in self.status:
            return _json(400, error_body(400, f"model '{model}' not found"))
        if self.status[model] != "loaded":
            if sent.query.get("autoload") == "false":
                return _json(400, error_body(400, "model is not loaded"))
            if model in self.broken:
                return _json(500, error_body(500, f"model name={model} failed to load"))
            self.status[model] = "loaded"
        return None

    def _entry(self, model: str) -> dict[str, Any]:
        status: dict[str, Any] = {"value": self.status[model], "args": []}
        if model in self.exit_code:
            status.update(failed=True, exit_code=self.exit_code[model])
        return {"id": model, "aliases": [f"{model}-alias"], "status": status}

    def _advance(self) -> None:
        for model, left in list(self._loading.items()):
            if left > 1:
                self._loading[model] = left - 1
                continue
            del self._loading[model]
            if model in self.broken:
                self.status[model] = "unloaded"
                self.exit_code[model] = 1
            else:
                self.status[model] = "loaded"

    def _load(self, sent: Sent) -> FakeResponse:
        model = sent.json["model"]
        if model not in self.status:
            return _json(404, {"error": {"message": "File Not Found", "code": 404}})
        running = self.status[model] in ("loaded", "loading")
        if sent.path == "/models/unload":
            if not running:
                return _json(400, error_body(400, "model is not running"))
            self.status[model] = "unloaded"
            return _json(200, {"success": True})
        if running:
            return _json(400, error_body(400, "model is already running"))
        if model == "limit":
            return _json(500, error_body(500, "model limit reached, try again later"))
        self.status[model] = "loading"
        self.exit_code.pop(model, None)
        self._loading[model] = self.steps
        return _json(200, {"success": True})
