"""FakeLlama's router mode: llama-server without ``-m``, in front of several models (wire
notes §6). The router answers ``GET /models``, ``POST /models/load`` and ``/models/unload``
itself; a chat (by its body's ``model``) or a GET (by ``?model=``) goes to that model's
server, loaded first unless ``?autoload=false``, or gets the router's error."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import count
from typing import TYPE_CHECKING, Any

from ._response import FakeResponse, error_response, json_response
from ._serving import FakeModel, Serving

if TYPE_CHECKING:
    from ._request import FakeCall, FakeRequest

__all__ = ["serve_router"]

RUNNING = ("loading", "loaded", "sleeping")  # a process is up for the model
_clock = count(1)  # when a model was last used, for the least-recently-used stop


Raw = tuple[str, Mapping[str, str], bytes | None, float | None]  # url, headers, body, timeout


def serve_router(
    fake: Serving, call: FakeCall, request: FakeRequest | None, raw: Raw
) -> FakeResponse:
    """The router's answer to ``call``, or that of the model it names."""
    if call.method == "GET" and call.path in ("/models", "/v1/models"):
        _advance(fake)
        entries = [_entry(name, model) for name, model in fake.models.items()]
        return json_response(200, {"data": entries, "object": "list"})
    if call.method == "POST" and call.path in ("/models/load", "/models/unload"):
        return _load(fake, call)
    body = call.body if isinstance(call.body, dict) else {}
    name = body.get("model") if call.method == "POST" else call.query.get("model")
    if not name:
        return _own(fake, call, raw[3])
    found = _find(fake.models, str(name))
    if found is None:
        return error_response(400, f"model '{name}' not found")
    canonical, model = found
    refused = _admit(fake, canonical, model, call.query.get("autoload") != "false")
    if refused is not None:
        return refused
    if model.server is not None:
        return model.server._serve(call.method, *raw)
    return fake._as_model(call, request, raw[3], canonical)


def _own(fake: Serving, call: FakeCall, read_timeout: float | None) -> FakeResponse:
    """A request naming no model: the router's own routes, or its 400."""
    if call.method == "GET" and call.path == "/props":
        return json_response(
            200,
            {
                "role": "router",
                "max_instances": fake.models_max,
                "models_autoload": True,
                "model_alias": "llama-server",
                "model_path": "none",
                "default_generation_settings": {"params": None, "n_ctx": 0},
            },
        )
    if call.path == "/health" or call.path.startswith("/v1/stream"):
        return fake._as_model(call, None, read_timeout)
    return error_response(400, "model name is missing from the request")


def _find(models: dict[str, FakeModel], name: str) -> tuple[str, FakeModel] | None:
    """The model named (by its name or an alias), with its canonical name."""
    if name in models:
        return name, models[name]
    return next(((n, m) for n, m in models.items() if name in m.aliases), None)


def _entry(name: str, model: FakeModel) -> dict[str, Any]:
    status: dict[str, Any] = {"value": model.status, "args": []}
    if model.exit_code is not None:
        status.update(exit_code=model.exit_code, failed=True)
    return {
        "id": name,
        "aliases": list(model.aliases),
        "tags": [],
        "object": "model",
        "owned_by": "llamacpp",
        "status": status,
    }


def _advance(fake: Serving) -> None:
    """One look at ``/models``: each load under way gets a step nearer its end."""
    for model in fake.models.values():
        if model.status != "loading" or model._looks < 1:
            continue
        model._looks -= 1
        if model._looks == 0 and model.broken:
            _failed(model)
        elif model._looks == 0:
            _loaded(model)


def _loaded(model: FakeModel) -> None:
    model.status, model._used = "loaded", next(_clock)


def _failed(model: FakeModel) -> None:
    model.status, model.exit_code = "unloaded", 1


def _load(fake: Serving, call: FakeCall) -> FakeResponse:
    body = call.body if isinstance(call.body, dict) else {}
    found = _find(fake.models, str(body.get("model", "")))
    if found is None:
        return error_response(404, "File Not Found")
    name, model = found
    running = model.status in RUNNING
    if call.path == "/models/unload":
        if not running:
            return error_response(400, "model is not running")
        model.status = "unloaded"
        return json_response(200, {"success": True})
    if running:
        return error_response(400, "model is already running")
    full = _make_room(fake, name)
    if full is not None:
        return full
    model.status, model.exit_code, model._looks = "loading", None, max(fake.load_looks, 1)
    return json_response(200, {"success": True})


def _admit(fake: Serving, name: str, model: FakeModel, autoload: bool) -> FakeResponse | None:
    """Before the model's server gets the request: None (the model ready, loaded now if it
    was not, as the router's autoload holds the request while it loads), or the router's
    error."""
    if model.status in ("loaded", "sleeping"):
        model._used = next(_clock)
        return None
    if not autoload:
        if model.status == "loading":  # proxied to the child, whose middleware says so
            return error_response(503, "Loading model")
        return error_response(400, "model is not loaded")
    if model.broken:
        _failed(model)
        return error_response(500, f"model name={name} failed to load")
    full = _make_room(fake, name)
    if full is not None:
        return full
    _loaded(model)
    return None


def _make_room(fake: Serving, name: str) -> FakeResponse | None:
    """At ``models_max`` running models, stop the least recently used idle one; when every
    one is busy, the router's ``500 model limit reached``."""
    running = [(m._used, n) for n, m in fake.models.items() if n != name and m.status in RUNNING]
    if len(running) < fake.models_max:
        return None
    idle = [
        (used, n)
        for used, n in running
        if fake.models[n].status != "loading" and not _busy(fake, fake.models[n])
    ]
    if not idle:
        return error_response(500, "model limit reached, try again later")
    fake.models[min(idle)[1]].status = "unloaded"
    return None


def _busy(fake: Serving, model: FakeModel) -> bool:
    """Whether the model's server has a slot busy (models the router answers itself share
    its slots)."""
    server = model.server or fake
    return bool(server.busy) or any(n > 0 for n in server._running.values())
