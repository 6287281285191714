"""Test doubles for the CLI built on ``llamaclient.testing.FakeLlama`` through the public
``Transport`` interface: llama-server behind ``--api-key``, and a router in front of several
models, each answering as the real one does (seen live)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

from llamaclient import Response, Transport
from llamaclient.testing import FakeLlama, FakeResponse

Probe = Callable[[str, str, dict[str, Any]], Awaitable[int | None]]  # as doctor's

KEY = "sk-the-right-one"

JSON = (("Content-Type", "application/json"),)


def answer(status: int, obj: Any) -> FakeResponse:
    return FakeResponse(status, JSON, [json.dumps(obj).encode()], None)


def refusal(status: int, message: str, kind: str) -> FakeResponse:
    return answer(status, {"error": {"code": status, "message": message, "type": kind}})


def probe_over(transport: Transport, url: str) -> Probe:
    """doctor's raw requests, through the same (fake) transport as its client."""

    async def probe(method: str, path: str, body: dict[str, Any]) -> int | None:
        response = await transport.send(method, url + path, {}, json.dumps(body).encode())
        await response.aclose()
        return response.status

    return probe


class Keyed(Transport):
    """A FakeLlama behind llama-server's ``--api-key``: everything but /health wants
    ``Authorization: Bearer <key>``, else 401 ``Invalid API Key``."""

    def __init__(self, fake: FakeLlama, key: str) -> None:
        self.inner, self.key = fake.transport(), key

    async def send(self, method: str, url: str, headers: Mapping[str, str],
                   body: bytes | None, *, read_timeout: float | None = None) -> Response:
        sent = {k.lower(): v for k, v in headers.items()}.get("authorization")
        if urlsplit(url).path != "/health" and sent != f"Bearer {self.key}":
            return refusal(401, "Invalid API Key", "authentication_error")
        return await self.inner.send(method, url, headers, body, read_timeout=read_timeout)

    async def aclose(self) -> None:
        pass


class FakeRouter(Transport):
    """llama-server with ``--models-dir`` and no ``-m``, in front of one FakeLlama per model,
    answering as the real one does (seen live): its own ``/props`` says ``role: router`` and
    has no context or slots; ``/models`` lists the models; a GET with ``?model=`` or a POST
    whose body names a model goes to that model (loading it); without one, /slots and chats
    are a 400 ``model name is missing from the request``."""

    def __init__(self, models: Mapping[str, FakeLlama], loaded: tuple[str, ...]) -> None:
        self.models = dict(models)
        self.loaded = set(loaded)

    async def send(self, method: str, url: str, headers: Mapping[str, str],
                   body: bytes | None, *, read_timeout: float | None = None) -> Response:
        parts = urlsplit(url)
        name = (parse_qs(parts.query).get("model") or [""])[0]
        if method == "POST" and parts.path != "/v1/streams/lookup":
            name = json.loads(body or b"{}").get("model", "")
        if parts.path == "/health" or parts.path == "/v1/streams/lookup":
            return await next(iter(self.models.values())).transport().send(
                method, url, headers, body, read_timeout=read_timeout)
        if parts.path == "/models":
            return answer(200, {"data": [
                {"id": n, "status": {"value": "loaded" if n in self.loaded else "unloaded"}}
                for n in self.models]})
        if not name and parts.path == "/props":
            return answer(200, {"role": "router", "max_instances": 4, "models_autoload": True,
                                "model_alias": "llama-server", "model_path": "none",
                                "default_generation_settings": {"params": None, "n_ctx": 0}})
        if not name:
            return refusal(400, "model name is missing from the request",
                           "invalid_request_error")
        if name not in self.models:
            return refusal(400, f"model '{name}' not found", "invalid_request_error")
        self.loaded.add(name)
        return await self.models[name].transport().send(
            method, url, headers, body, read_timeout=read_timeout)

    async def aclose(self) -> None:
        pass
