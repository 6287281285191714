"""Pool: several llama-servers (or routers) behind one ``chat()``, cache-affine.

A session's requests go to the same server and slot, so its prompt cache stays warm; a new
session goes to the server with the most free slots. The choice is the
:class:`~llamaclient._turn.balancer.Balancer`'s (pure bookkeeping); this module only looks
at the servers (``/slots``, ``/health``) and routes each turn. A pool's stream is a
:class:`ChatStream` whose turn starts by choosing its server (``Routed``, first); a server
that cannot be reached before any output is left for another one (the turn decides it, on
a ``ConnectError`` before it sent the chat).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar, overload

import anyio
import msgspec

from ._client import Client, _output_spec, plan_for, stream_for
from ._driver.hibernation import Hibernation
from ._driver.limiter import Limiter
from ._driver.logs import log_turns
from ._driver.observe import Instrument, observer_for
from ._driver.shared import Shared
from ._driver.tracing import trace_turns
from ._protocol.body import build_body
from ._stream import ChatStream
from ._tools import ToolRun, Tools, run_tools
from ._transports.base import Transport
from ._turn.balancer import Balancer, Route
from ._turn.history import History
from ._turn.plan import Target
from ._types.completion import Completion
from ._types.config import Config
from ._types.errors import ConnectError, HTTPStatusError, InferError, StreamClosedEarlyError
from ._types.events import Routed
from ._types.messages import AssistantMessage
from ._types.request import ChatRequest
from ._types.server import Slot
from ._types.totals import UsageTotals

T = TypeVar("T")

__all__ = ["LOOK_TIMEOUT", "Pool", "PoolStream"]

LOOK_TIMEOUT = 2.0  # seconds for a /slots or /health look; /slots answers even under load
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
    name a router's ``model``. ``hibernate_after``: seconds after which an idle session's
    slot is saved to a file on its server and freed, then restored before its next turn
    (llama-server's ``--slot-save-path``; see docs/router-and-pool.md). Use ``async with
    Pool(...) as pool``.
    """

    def __init__(
        self,
        configs: Sequence[Config],
        *,
        transports: Sequence[Transport] | None = None,
        limiter: Limiter | None = None,
        hibernate_after: float | None = None,
    ) -> None:
        if not configs:
            raise ValueError("a Pool needs at least one Config")
        self._hibernation = None if hibernate_after is None else Hibernation(hibernate_after)
        if transports is not None and len(transports) != len(configs):
            raise ValueError("give one transport per config")
        self.clients: tuple[Client, ...] = tuple(
            Client(c, transport=transports[i] if transports else None, limiter=limiter)
            for i, c in enumerate(configs)
        )
        self._history = History()  # its sessions' previous turns, wherever they ran
        self._balancer = Balancer(len(configs), names=[_name(c) for c in configs])
        self._props_asked: set[int] = set()
        self._no_metrics: set[int] = set()  # servers without --metrics (not asked again)
        self.instruments: list[Instrument] = [log_turns, trace_turns]  # what watches its turns

    def __repr__(self) -> str:
        return f"Pool({[c.config.base_url for c in self.clients]!r})"

    @property
    def usage(self) -> UsageTotals:
        """Every server's :attr:`Client.usage` added up (a new total each time)."""
        return sum((c.usage for c in self.clients), UsageTotals())

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
        spec = None if output is None else _output_spec(request, output)
        if spec is not None:
            request = msgspec.structs.replace(request, response_format=spec.response_format())
        first = self.clients[0]
        plan = plan_for(first.config, request, spec, self._history)
        plan.pooled = True
        start = Target(first.config, first._shared.known, None)  # until it is routed
        routing = _Routing(self, request)
        observer = observer_for(self.instruments, plan, start) if self.instruments else None
        return stream_for(
            plan, start, first._shared, live_arguments, lenient_arguments, routing, PoolStream,
            observer,
        )

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

    def run_tools(
        self,
        request: ChatRequest,
        tools: Tools,
        *,
        max_turns: int = 8,
        max_tokens_total: int | None = None,
    ) -> ToolRun:
        """:meth:`Client.run_tools` on the pool: give the request a ``session`` so every turn
        goes to the same server and finds its prompt cache there."""
        return run_tools(
            self.chat,
            request,
            tools,
            max_turns=max_turns,
            max_tokens_total=max_tokens_total,
            configs=tuple(c.config for c in self.clients),
        )

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
        if self._hibernation is not None:  # idle sessions give their slots up first
            await self._hibernation.sleep_idle(balancer, self.clients, time.monotonic())
        if balancer.needs_look(session, slot, now):
            await self._look()
            now = anyio.current_time()
        allowed, continuing = self._servers_for(request), _continuing(request)
        route = balancer.route(session, slot, now, allowed, continuing=continuing)
        if route is None:
            raise ConnectError("no server of the pool is up")
        if self._hibernation is not None and session in self._hibernation.asleep:
            route, restore = balancer.wake(session, route)
            if not restore:
                self._hibernation.asleep.pop(session, None)  # re-prefilled where it goes
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
                server.saw([_processing(s) for s in slots], time.monotonic())
            elif slots == _DISABLED and index not in self._props_asked:
                self._props_asked.add(index)
                await self._count_slots(index)
            if slots != _NOT_RUNNING and index not in self._no_metrics:  # never loads it
                await self._look_at_metrics(index)

    async def _look_at_metrics(self, index: int) -> None:
        """``GET /metrics`` (a server with ``--metrics``): the requests it has deferred. A
        server without it is not asked again."""
        try:
            samples = await self.clients[index].metrics()
        except HTTPStatusError:
            self._no_metrics.add(index)
            return
        except InferError:
            return
        deferred = samples.get("llamacpp:requests_deferred", 0.0)
        self._balancer.servers[index].deferred = int(deferred) if deferred == deferred else 0

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


def _continuing(request: ChatRequest) -> bool:
    """Whether ``request`` carries an earlier turn of its conversation (an answer)."""
    return any(isinstance(m, AssistantMessage) for m in request.messages)


def _pinned(request: ChatRequest, route: Route) -> ChatRequest:
    if route.slot == request.slot:
        return request
    return msgspec.structs.replace(request, slot=route.slot)


class PoolStream(ChatStream):
    """A pool's stream: a :class:`ChatStream` whose first event is ``Routed``
    (``stream.route`` says where it went); ``arguments()`` works once it has been routed.
    Everything else is the ChatStream's own."""


def _name(config: Config) -> str:
    """A server's name for the rendezvous hash: the same in every process that has it."""
    return f"{config.base_url}#{config.model}" if config.model else config.base_url


class _Routing:
    """Where one turn of the pool goes: routed on demand (``route``), again after a server
    that could not be reached, and released when the turn ends (``ended``)."""

    __slots__ = ("_current", "_pool", "_request", "_tried")

    def __init__(self, pool: Pool, request: ChatRequest) -> None:
        self._pool = pool
        self._request = request
        self._current: Route | None = None
        self._tried: set[int] = set()

    async def route(self, failed: int | None) -> tuple[Shared, Target, Routed]:
        pool = self._pool
        if failed is not None:
            self._release()
            self._tried.add(failed)
            if len(self._tried) >= len(pool.clients):
                raise ConnectError("no server of the pool could be reached")
        route = await pool._route(self._request, exclude=failed)
        if failed is not None:
            route = route._replace(reason="failover")
        self._current = route
        client = pool.clients[route.server]
        session, sleeping = self._request.session, pool._hibernation
        if sleeping is not None and session in sleeping.asleep and route.slot is not None:
            await sleeping.restore(client, session, route.slot)  # its saved prompt, back
        request = _pinned(self._request, route)
        body = build_body(client.config, request, proxied=client._shared.known.proxy is not None)
        limited = client._shared.limiter is not None
        target = Target(client.config, client._shared.known, body, route.server, request, limited)
        return client._shared, target, Routed(pool._server_name(route.server), *route[1:])

    async def ended(self, error: BaseException | None) -> None:
        """The turn ended: release its route; a stream cut by a server that is now down
        marks it down (its sessions move)."""
        if self._current is not None:
            self._release()
            if isinstance(error, StreamClosedEarlyError | ConnectError):
                await self._pool._look()

    def _release(self) -> None:
        route, self._current = self._current, None
        if route is not None:
            self._pool._balancer.finish(self._request.session, route, time.monotonic())

    def __del__(self) -> None:
        self._release()  # dropped unfinished: keep the in-flight counts exact
