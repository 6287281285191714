"""A llama-server router's answers, decoded. Pure.

``GET /models`` is ``{"data": [{"id", "aliases", "status": {"value", "failed", "exit_code"}},
...]}``; a plain llama-server answers the same route with its one model and no ``status``,
which is how a router is told apart. The router's errors are plain llama-server error bodies
whose messages name the case (``server-models.cpp``).
"""

from __future__ import annotations

from urllib.parse import quote

import msgspec

from .._types.errors import (
    HTTPStatusError,
    InferError,
    ModelLimitError,
    ModelLoadError,
    ModelNotFoundError,
    ModelNotLoadedError,
)
from .._types.models import ModelInfo

__all__ = ["decode_models", "model_query", "router_error"]


class _WireStatus(msgspec.Struct, gc=False):
    value: str = "unloaded"
    failed: bool = False
    exit_code: int | None = None


class _WireModel(msgspec.Struct, gc=False):
    id: str
    aliases: list[str] = []
    status: _WireStatus | None = None


class _WireModels(msgspec.Struct, gc=False):
    data: list[_WireModel] = []


_MODELS_DECODER = msgspec.json.Decoder(_WireModels)


def decode_models(data: bytes) -> tuple[list[ModelInfo], bool]:
    """The models of a ``GET /models`` answer, and whether it came from a router (its entries
    have a ``status``). Raises ``msgspec.DecodeError``/``ValidationError`` on other bytes."""
    models = _MODELS_DECODER.decode(data).data
    router = any(m.status is not None for m in models)
    infos = []
    for m in models:
        status = m.status or _WireStatus("loaded")
        infos.append(
            ModelInfo(
                m.id,
                tuple(m.aliases),
                status.value,
                status.failed,
                status.exit_code if status.failed else None,
            )
        )
    return infos, router


def model_query(path: str, model: str) -> str:
    """``path`` with ``?model=<model>`` (or ``&model=``) when ``model`` is not empty."""
    if not model:
        return path
    return f"{path}{'&' if '?' in path else '?'}model={quote(model, safe='')}"


def router_error(error: InferError, model: str, *, model_route: bool = False) -> InferError:
    """The router's meaning of a generic ``error`` (from :func:`status_error`), for ``model``:
    unknown model, not loaded, model limit, failed load; else ``error`` itself. A 404 means
    an unknown model only on the router's own routes (``model_route``: ``/models/load`` and
    ``/models/unload``)."""
    if not isinstance(error, HTTPStatusError):
        return error
    status, body = error.status, error.body
    unknown = status == 400 and "not found" in body and f"model '{model}'" in body
    if unknown or (status == 404 and model_route):
        return ModelNotFoundError(
            status, body, message=error.message, type=error.type, code=error.code
        )
    if status == 400 and ("model is not loaded" in body or "model is not running" in body):
        return ModelNotLoadedError(
            status, body, message=error.message, type=error.type, code=error.code
        )
    if status == 500 and "model limit reached" in body:
        return ModelLimitError(
            status, body, message=error.message, type=error.type, code=error.code
        )
    if status == 500 and "failed to load" in body and "model name=" in body:
        return ModelLoadError(model)
    return error
