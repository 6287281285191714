"""A router's models, as the client's own helpers see them: ``GET /models`` typed, and
loading or unloading a model (waiting for it, as a turn does: ``_turn/before.py``)."""

from __future__ import annotations

import anyio
import msgspec

from .._protocol.models import decode_models, router_error
from .._protocol.status import status_error
from .._turn.before import POLL, find, watch_step
from .._turn.known import Known
from .._types.errors import LoadTimeoutError, ModelLoadError, ModelNotLoadedError, ProtocolError
from .._types.models import ModelInfo
from .endpoint import Endpoint

__all__ = ["list_models", "load_model", "unload_model"]


async def _models(endpoint: Endpoint) -> bytes:
    status, data = await endpoint.call("GET", "/models")
    if status >= 400:
        raise status_error(status, data)
    return data


async def list_models(endpoint: Endpoint, known: Known) -> list[ModelInfo]:
    """``GET /models``, typed (and whether the server is a router, learnt on the way)."""
    data = await _models(endpoint)
    try:
        infos, router = decode_models(data)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        raise ProtocolError("GET /models: not a list of models", data) from None
    known.router = router
    return infos


async def _info(endpoint: Endpoint, name: str) -> ModelInfo | None:
    data = await _models(endpoint)
    try:
        return find(data, name)[0]
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        raise ProtocolError("GET /models: not a list of models", data) from None


async def load_model(endpoint: Endpoint, name: str, *, wait: bool) -> bool:
    """``POST /models/load``; False if it was already running. With ``wait``, return once it
    is ready (``ModelLoadError`` if it fails, ``LoadTimeoutError`` past ``load_timeout``)."""
    started = await _post(endpoint, "/models/load", name, running_ok=True)
    limit = endpoint.config.load_timeout
    last: str | None = None
    with anyio.move_on_after(limit) as scope:
        while wait:
            info = await _info(endpoint, name)
            shown, verdict = watch_step(last, info)
            last = shown or last
            if verdict == "ready":
                return started
            if verdict != "wait":
                raise ModelLoadError(name, info.exit_code if info else None)
            await anyio.sleep(POLL)
    if scope.cancelled_caught:
        raise LoadTimeoutError(f"model {name!r} was still loading after {limit} s")
    return started


async def unload_model(endpoint: Endpoint, name: str, *, wait: bool) -> bool:
    """``POST /models/unload``; False if it was not running. With ``wait``, return once the
    router shows it ``unloaded`` (its process has exited), bounded by ``load_timeout``."""
    stopped = await _post(endpoint, "/models/unload", name, running_ok=False)
    with anyio.move_on_after(endpoint.config.load_timeout) as scope:
        while wait and stopped:
            info = await _info(endpoint, name)
            if info is None or info.status == "unloaded":
                return stopped
            await anyio.sleep(POLL)
    if scope.cancelled_caught:
        raise LoadTimeoutError(f"model {name!r} was still running after the unload")
    return stopped


async def _post(endpoint: Endpoint, path: str, name: str, *, running_ok: bool) -> bool:
    status, data = await endpoint.call("POST", path, msgspec.json.encode({"model": name}))
    if status < 300:
        return True
    error = router_error(status_error(status, data), name, model_route=True)
    if running_ok and status == 400 and b"already running" in data:
        return False
    if not running_ok and isinstance(error, ModelNotLoadedError):
        return False
    raise error
