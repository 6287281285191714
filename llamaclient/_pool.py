"""Pool: several llama-servers (or routers) behind one ``chat()``, cache-affine.

A session's requests go to the same server and slot, so its prompt cache stays warm; a new
session goes to the server with the most free slots. The choice is the
:class:`~llamaclient._policy.routing.Balancer`'s (pure bookkeeping); this module only looks
at the servers (``/slots``, ``/health``) and wraps each chosen :class:`Client`'s stream so
that its first event says where it went (``Routed``) and a server that cannot be reached
before any output is left for another one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar, overload

import anyio
import msgspec

from ._arguments.stream import ArgumentStream
from ._client import Client
from ._policy.routing import Balancer, Route
from ._stream import _EMPTY, ChatStream, StreamState
from ._transports.base import Transport
from ._types.completion import Completion
from ._types.config import Config
from ._types.errors import ConnectError, HTTPStatusError, InferError, StreamClosedEarlyError
from ._types.events import ChatEvent, ModelLoading, Queued, Retrying, Routed, Waiting
from ._types.request import ChatRequest
from ._types.server import Slot

T = TypeVar("T")

__all__ = ["LOOK_TIMEOUT", "Pool", "PoolStream"]

LOOK_TIMEOUT = 2.0  # seconds for a /slots or /health look; /slots answers even under load
_BEFORE_OUTPUT = (Queued, Waiting, Retrying, ModelLoading)
_DISABLED = "disabled"  # /slots answers 501
_NOT_RUNNING = "not running"  # a router's model is not loaded


class Pool:
    """Several llama-servers behind one client: ``Pool([Config(url1), Config(url2), ...])``.

    ``chat()``, ``complete()`` and ``parse()`` work as on :class:`Client`; every stream's
    first event is :class:`~llamaclient.Routed`. Give requests a ``session`` (any string,
    e.g. a conversation id): its requests then go to the same server and slot, in order, and
    find their prompt cache there. A server that refuses connections or fails ``/health`` is
    left out and looked at again with backoff; a session on it moves (``Routed(reason=
    "failover")``: the prompt cache is lost). Once output has started, a broken stream is
    resumed on its own server (``Config.resume``), never re-run elsewhere. Each config may
    name a router's ``model``. Use ``async with Pool(...) as pool``.
    """

    def __init__(
        self, configs: Sequence[Config], *, transports: Sequence[Transport] | None = None
    ) -> None:
        if not configs:
            raise ValueError("a Pool needs at least one Config")
        if transports is not None and len(transports) != len(configs):
            raise ValueError("give one transport per config")
        self.clients: tuple[Client, ...] = tuple(
            Client(c, transport=transports[i] if transports else None)
            for i, c in enumerate(configs)
        )
        self._balancer = Balancer(len(configs))
        self._props_asked: set[int] = set()

    def __repr__(self) -> str:
        return f"Pool({[c.config.base_url for c in self.clients]!r})"

    async def __aenter__(self) -> Pool:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for client in self.clients:
            await client.aclose()

    def chat(
        self,
        request: ChatRequest,
        *,
        live_arguments: bool | Iterable[str] = False,
        lenient_arguments: bool = True,
        output: type[Any] | Mapping[str, Any] | None = None,
    ) -> PoolStream:
        """Stream one chat on the server its session is on (or the freest one); the first
        event is ``Routed``. Same options as :meth:`Client.chat`."""
        self._servers_for(request)  # a model no server has is a ValueError here, at once
        return PoolStream(self, request, live_arguments, lenient_arguments, output)

    async def complete(self, request: ChatRequest) -> Completion:
        """Run one chat to its end and return the Completion."""
        return await self.chat(request).collect()

    @overload
    async def parse(self, request: ChatRequest, output: type[T]) -> T: ...
    @overload
    async def parse(self, request: ChatRequest, output: Mapping[str, Any]) -> Any: ...
    async def parse(self, request: ChatRequest, output: type[T] | Mapping[str, Any]) -> T | Any:
        """:meth:`Client.parse` on the routed server (the session's, or the freest)."""
        completion = await self.chat(request, output=output).collect()
        return completion.output

    def _servers_for(self, request: ChatRequest) -> tuple[int, ...] | None:
        """The servers that may take ``request``: those whose ``Config.model`` is the one it
        names (else those that name none); None: any."""
        model = request.model
        if model is None:
            return None
        named = tuple(i for i, c in enumerate(self.clients) if c.config.model == model)
        named = named or tuple(i for i, c in enumerate(self.clients) if not c.config.model)
        if not named:
            raise ValueError(f"no server of the pool has model {model!r} in its Config")
        return named

    async def _route(self, request: ChatRequest, *, exclude: int | None = None) -> Route:
        """Choose the route of ``request`` and count it as started (the caller must call
        ``balancer.finish`` when it ends). ``ConnectError`` when no server is up."""
        balancer = self._balancer
        session, slot = request.session, request.slot
        now = anyio.current_time()
        if exclude is not None:
            balancer.servers[exclude].failed(now)
        if balancer.needs_look(session, slot, now):
            await self._look()
            now = anyio.current_time()
        route = balancer.route(session, slot, now, self._servers_for(request))
        if route is None:
            raise ConnectError("no server of the pool is up")
        balancer.start(session, route)
        return route

    async def _look(self) -> None:
        """Ask every server that is up, or due for a look, which slots are busy."""
        now = anyio.current_time()
        async with anyio.create_task_group() as tg:
            for index, server in enumerate(self._balancer.servers):
                if server.up(now):
                    tg.start_soon(self._look_at, index)

    async def _look_at(self, index: int) -> None:
        """Ask server ``index`` which slots are busy; take it out if it refuses or fails. A
        look with no answer within ``LOOK_TIMEOUT`` changes nothing: slow is not down, and
        routing goes on with what the pool knew."""
        server = self._balancer.servers[index]
        with anyio.move_on_after(LOOK_TIMEOUT):
            try:
                slots = await self._slots(index)
            except InferError:
                server.failed(anyio.current_time())  # refused, or an error answer
                return
            server.recovered()
            if isinstance(slots, list):
                server.saw([_processing(s) for s in slots])
            elif slots == _DISABLED and index not in self._props_asked:
                self._props_asked.add(index)
                await self._count_slots(index)

    async def _slots(self, index: int) -> list[Slot] | str:
        """``GET /slots``; ``_DISABLED`` where it is disabled (501) but ``/health`` is fine,
        ``_NOT_RUNNING`` where a router's model is not running (a look must not load it,
        nor wait for it: the chat will, with ``ModelLoading`` events)."""
        client = self.clients[index]
        if client.config.model and not await self._model_ready(client):
            return _NOT_RUNNING
        try:
            return await client.slots()
        except HTTPStatusError as exc:
            if exc.status != 501:
                raise
        await client.health()  # raises if the server is not healthy either
        return _DISABLED

    @staticmethod
    async def _model_ready(client: Client) -> bool:
        """Whether the config's model runs (always True on a plain server: it lists its one
        model as loaded, under whatever name)."""
        try:
            models = await client.models()
        except HTTPStatusError:
            return True  # no /models here: a plain server
        name = client.config.model
        info = next((m for m in models if name == m.id or name in m.aliases), None)
        return info is None or info.ready

    async def _count_slots(self, index: int) -> None:
        """Where ``/slots`` is disabled, ``/props`` still says how many there are."""
        with anyio.move_on_after(LOOK_TIMEOUT):
            try:
                props = await self.clients[index].props()
            except InferError:
                return
            total = props.get("total_slots")
            if isinstance(total, int) and total > 0:
                self._balancer.servers[index].slots = total

    def _server_name(self, index: int) -> str:
        return self.clients[index].config.base_url


def _processing(slot: Slot) -> bool:
    return slot.is_processing


def _pinned(request: ChatRequest, route: Route) -> ChatRequest:
    if route.slot == request.slot:
        return request
    return msgspec.structs.replace(request, slot=route.slot)


def _connect_failure(event: ChatEvent) -> bool:
    """A retry because the server could not be reached (not an HTTP answer such as 503)."""
    return isinstance(event, Retrying) and not event.error.startswith("HTTP ")


class PoolStream:
    """A :class:`ChatStream` on the server the pool chose, with ``Routed`` first.

    Iterate it like a ChatStream; ``completion``, ``aclose()``, ``collect()`` and
    ``async with`` work the same. ``arguments()`` works once ``Routed`` has been yielded.
    """

    def __init__(
        self,
        pool: Pool,
        request: ChatRequest,
        live_arguments: bool | Iterable[str],
        lenient_arguments: bool,
        output: type[Any] | Mapping[str, Any] | None = None,
    ) -> None:
        self._pool = pool
        self.request = request
        self._live = live_arguments
        self._lenient = lenient_arguments
        self._output_type = output
        self._inner: ChatStream | None = None
        self._route: Route | None = None
        self._output = False  # an event past the waiting ones came: no more failover
        self._routed: Routed | None = None
        self._tried: set[int] = set()
        self._closed = False

    @property
    def route(self) -> Routed | None:
        """Where the stream went (the ``Routed`` event), once routed."""
        return self._routed

    @property
    def completion(self) -> Completion:
        """The Completion, once the stream has ended normally."""
        if self._inner is None:
            raise RuntimeError("the stream has not finished yet: iterate it to the end first")
        return self._inner.completion

    @property
    def partial(self) -> Completion:
        """As :attr:`ChatStream.partial`: what arrived so far (empty before routing)."""
        return _EMPTY if self._inner is None else self._inner.partial

    @property
    def state(self) -> StreamState:
        """As :attr:`ChatStream.state`."""
        if self._inner is None:
            return StreamState.STOPPED if self._closed else StreamState.PENDING
        return self._inner.state

    @property
    def error(self) -> Exception | None:
        """As :attr:`ChatStream.error`."""
        return None if self._inner is None else self._inner.error

    def output(self) -> Any:
        """As :meth:`ChatStream.output`: the typed output decoded so far."""
        return None if self._inner is None else self._inner.output()

    @property
    def conversation_id(self) -> str | None:
        """The ``X-Conversation-Id`` of the stream on its server (None before routing, or
        with resume off)."""
        return None if self._inner is None else self._inner.conversation_id

    def arguments(self, index: int | None = None, *, tool: str | None = None) -> ArgumentStream:
        """As :meth:`ChatStream.arguments`, once the stream has been routed."""
        if self._inner is None:
            raise RuntimeError("take arguments() after the Routed event (the first one)")
        return self._inner.arguments(index, tool=tool)

    def __aiter__(self) -> PoolStream:
        return self

    async def __anext__(self) -> ChatEvent:
        inner = self._inner
        if inner is not None and self._output:
            try:
                return await inner.__anext__()
            except BaseException as exc:
                await self._ended(exc)
                raise
        return await self._before_output()

    async def _before_output(self) -> ChatEvent:
        """Route (``Routed``), then the waiting events; a server that cannot be reached
        before any output is left for another one (``Routed(reason="failover")``)."""
        if self._closed:
            raise StopAsyncIteration
        if self._inner is None:
            return await self._open(None)
        try:
            event = await self._inner.__anext__()
        except ConnectError:
            assert self._route is not None
            return await self._open(self._route.server)
        except BaseException as exc:
            await self._ended(exc)
            raise
        if _connect_failure(event):
            assert self._route is not None
            return await self._open(self._route.server)
        if not isinstance(event, _BEFORE_OUTPUT):
            self._output = True
        return event

    async def _open(self, failed: int | None) -> Routed:
        """Route (again, leaving out ``failed``) and open the stream there."""
        pool = self._pool
        if failed is not None:
            await self._release()
            self._tried.add(failed)
            if len(self._tried) >= len(pool.clients):
                raise ConnectError("no server of the pool could be reached")
        route = await pool._route(self.request, exclude=failed)
        if failed is not None:
            route = route._replace(reason="failover")
        self._route = route
        client = pool.clients[route.server]
        self._inner = client.chat(
            _pinned(self.request, route),
            live_arguments=self._live,
            lenient_arguments=self._lenient,
            output=self._output_type,
        )
        self._routed = Routed(pool._server_name(route.server), route.slot, route.reason)
        return self._routed

    async def _release(self) -> None:
        inner, route = self._inner, self._route
        self._inner = self._route = None
        if route is not None:
            self._pool._balancer.finish(self.request.session, route)
        if inner is not None:
            with anyio.CancelScope(shield=True):
                await inner.aclose()

    async def _ended(self, exc: BaseException) -> None:
        """The inner stream ended (``StopAsyncIteration``) or failed: release the route; a
        stream cut by a server that is now down marks it down (its sessions move)."""
        route = self._route
        if route is not None:
            self._route = None
            self._pool._balancer.finish(self.request.session, route)
            if isinstance(exc, StreamClosedEarlyError | ConnectError):
                await self._pool._look()

    async def __aenter__(self) -> PoolStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the stream and release its connection and its place in the pool."""
        self._closed = True
        inner = self._inner
        route, self._route = self._route, None
        if route is not None:
            self._pool._balancer.finish(self.request.session, route)
        if inner is not None:
            await inner.aclose()

    async def collect(self) -> Completion:
        """Drain the stream and return the Completion."""
        async with self:
            async for _ in self:
                pass
        return self.completion

    def __del__(self) -> None:
        route = self._route
        if route is not None:  # dropped unfinished: keep the in-flight counts exact
            self._route = None
            self._pool._balancer.finish(self.request.session, route)
