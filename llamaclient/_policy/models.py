"""Router mode: the models a llama-server router offers, loading and unloading them, and
getting a chat's model ready before the chat goes out.

A router holds a chat for a model that is not running with no bytes at all while it loads
it. So before a chat the client looks at ``GET /models``: a model that is not ready is loaded
(``POST /models/load``) and watched every ``POLL`` seconds, each change of status yielded as
``ModelLoading``, a failed load raised as ``ModelLoadError`` with the child's exit code, the
whole wait bounded by ``load_timeout``. Whether the server is a router is learnt once, from
the same answer (a plain llama-server lists its one model without a status).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing

import anyio
import msgspec

from .._protocol.models import decode_models, router_error
from .._protocol.retry import RETRYABLE_STATUS, backoff_seconds
from .._protocol.status import is_loading, status_error
from .._types.errors import (
    ConnectError,
    HTTPStatusError,
    InferError,
    LoadTimeoutError,
    ModelLoadError,
    ModelNotLoadedError,
    ProtocolError,
)
from .._types.events import ChatEvent, ModelLoading, Retrying, Waiting
from .._types.models import ModelInfo
from .attempts import LoadingWait
from .endpoint import Endpoint
from .secret import redact

__all__ = ["POLL", "ModelGate"]

POLL = 0.1  # seconds between looks at a loading model (the router itself polls every 0.2 s)


class ModelGate:
    """One endpoint's view of its router; ``router`` is None until learnt."""

    __slots__ = ("_endpoint", "router")

    def __init__(self, endpoint: Endpoint) -> None:
        self._endpoint = endpoint
        self.router: bool | None = None

    async def models(self) -> list[ModelInfo]:
        """``GET /models``, typed."""
        status, data = await self._endpoint.call("GET", "/models")
        if status >= 400:
            raise status_error(status, data)
        try:
            infos, router = decode_models(data)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            raise ProtocolError("GET /models: not a list of models", data) from None
        self.router = router
        return infos

    async def find(self, name: str) -> ModelInfo | None:
        """The model called ``name`` (or with that alias), None if the router has none."""
        for info in await self.models():
            if name == info.id or name in info.aliases:
                return info
        return None

    async def load(self, name: str, *, wait: bool) -> bool:
        """``POST /models/load``; False if it was already running. With ``wait``, return once
        it is ready (``ModelLoadError`` if it fails, ``LoadTimeoutError`` past
        ``load_timeout``)."""
        started = await self._post("/models/load", name, running_ok=True)
        if wait:
            async with aclosing(self._watch(name)) as watch:
                async for _ in watch:
                    pass
        return started

    async def unload(self, name: str, *, wait: bool) -> bool:
        """``POST /models/unload``; False if it was not running. With ``wait``, return once
        the router shows it ``unloaded`` (its process has exited), bounded by
        ``load_timeout``."""
        stopped = await self._post("/models/unload", name, running_ok=False)
        deadline = anyio.current_time() + self._endpoint.config.load_timeout
        while wait and stopped:
            info = await self.find(name)
            if info is None or info.status == "unloaded":
                break
            if anyio.current_time() > deadline:
                raise LoadTimeoutError(f"model {name!r} was still running after the unload")
            await anyio.sleep(POLL)
        return stopped

    async def _post(self, path: str, name: str, *, running_ok: bool) -> bool:
        body = msgspec.json.encode({"model": name})
        status, data = await self._endpoint.call("POST", path, body)
        if status < 300:
            return True
        error = router_error(status_error(status, data), name, model_route=True)
        if running_ok and status == 400 and b"already running" in data:
            return False
        if not running_ok and isinstance(error, ModelNotLoadedError):
            return False
        raise error

    async def ready(self, name: str, autoload: bool) -> AsyncGenerator[ChatEvent, None]:
        """Before a chat for ``name``: nothing on a plain server or a ready model; else load
        it (unless ``autoload`` is False: the router then answers for itself) and yield
        ``ModelLoading`` as its status changes, until it is ready."""
        if not name or self.router is False:
            return
        looking = self._look(name)
        async with aclosing(looking):
            async for item in looking:
                if not isinstance(item, ModelInfo | None):
                    yield item
                    continue
                info = item
                break
            else:
                return  # no /models here: a plain server, or an old one
        if not self.router or info is None or info.ready or not autoload:
            return  # an unknown model: the chat's own answer names it
        yield ModelLoading(name, info.status)
        last = info.status
        if last not in ("loading", "downloading") and await self._post(
            "/models/load", name, running_ok=True
        ):
            last = "loading"  # the router marks it loading before it answers
            yield ModelLoading(name, last)
        async with aclosing(self._watch(name, last=last)) as watch:
            async for event in watch:
                yield event

    async def _look(self, name: str) -> AsyncGenerator[ChatEvent | ModelInfo | None, None]:
        """:meth:`find` with the chat's own policies: a refused connection or a retryable
        status is retried with backoff (``Retrying``), a loading server is waited for
        (``Waiting``); then the model's info (None: not known). Ends without it when the
        server has no ``/models`` (a plain server, or an old one)."""
        config = self._endpoint.config
        loading = LoadingWait(self._endpoint)
        attempt = 0
        while True:
            try:
                yield await self.find(name)
                return
            except ConnectError as exc:
                failure: InferError = exc
            except HTTPStatusError as exc:
                if is_loading(exc.status, exc.body.encode()):
                    if loading.since is None:
                        yield Waiting(slot_busy=False)
                    await loading.wait()
                    continue
                if exc.status not in RETRYABLE_STATUS or attempt >= config.max_retries:
                    self.router = False
                    return
                failure = exc
            except ProtocolError:
                self.router = False
                return
            if attempt >= config.max_retries:
                raise failure
            attempt += 1
            delay = backoff_seconds(attempt, config.retry_backoff, config.retry_max_backoff)
            yield Retrying(attempt, int(delay * 1000), redact(f"{failure}", config.api_key))
            await anyio.sleep(delay)

    async def _watch(
        self, name: str, last: str | None = None
    ) -> AsyncGenerator[ModelLoading, None]:
        """Look every ``POLL`` s until ``name`` is ready; yield each new status. A model back
        at ``unloaded`` after the load started has failed."""
        limit = self._endpoint.config.load_timeout
        deadline = anyio.current_time() + limit
        while True:  # no cancel scope around the yields: the consumer may stop at any one
            if anyio.current_time() > deadline:
                raise LoadTimeoutError(f"model {name!r} was still loading after {limit} s")
            info = await self.find(name)
            if info is None:
                raise ModelLoadError(name)
            if info.status != last:
                last = info.status
                yield ModelLoading(name, info.status)
            if info.ready:
                return
            if info.status == "unloaded":
                raise ModelLoadError(name, info.exit_code)
            await anyio.sleep(POLL)
