"""Performing a turn's commands (``_turn/commands.py``) through one server's endpoint, and
feeding each result back to the turn. This is all the I/O a turn does; every decision is
the turn's. ``Read``, the hot path, is done by the stream itself (``_stream.py``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

import anyio

from .._transports.base import Response, TransportError
from .._turn.commands import (
    Admit,
    Arm,
    Call,
    Close,
    Command,
    Drain,
    Free,
    Leave,
    Line,
    ReadAll,
    Route,
    Send,
    Sleep,
)
from .._turn.machine import ChatTurn
from .._turn.plan import Target
from .._types.errors import ConnectError
from .._types.events import ChatEvent, Routed
from .._types.totals import turn_usage
from .cookies import TurnCookie
from .observe import Observer
from .shared import Shared
from .waits import Waits

__all__ = ["Performer", "Router"]


class Router(Protocol):
    """A pool's part in a turn: ``route`` chooses its server (leaving out the index that
    failed: ``ConnectError`` when none is left), giving its client's shared state, the
    turn's target there and the ``Routed`` event; ``ended`` hears how the turn ended."""

    async def route(self, failed: int | None) -> tuple[Shared, Target, Routed]: ...

    async def ended(self, error: BaseException | None) -> None: ...


class Performer(Waits):
    """The I/O of one turn: the response it holds (``response``), its place in a slot's
    line, its armed timers, its affinity cookie (``session``: whose)."""

    __slots__ = (
        "_cookie",
        "_router",
        "observer",
        "response",
        "routed",
        "session",
        "shared",
    )

    def __init__(
        self,
        shared: Shared,
        router: Router | None = None,
        observer: Observer | None = None,
        session: str | None = None,
    ) -> None:
        super().__init__()
        self.shared = shared
        self._router = router
        self.observer = observer  # told what each command did (see observe.py)
        self.routed: Routed | None = None  # a pool's turn: where it went
        self.response: Response | None = None
        self.session = session
        self._cookie: TurnCookie | None = None

    async def perform(self, turn: ChatTurn, command: Command) -> Sequence[ChatEvent]:
        """Do ``command`` (anything but ``Read`` and ``Done``) and feed its result to
        ``turn``; the events that input gives back."""
        do: Any = _DO[type(command)]
        self._outcome = None
        events: Sequence[ChatEvent] = await do(self, turn, command)
        if self.observer is not None:
            self.observer.performed(command, self._outcome)
        return events

    def _failed(self, turn: ChatTurn, error: TransportError) -> Sequence[ChatEvent]:
        self._outcome = error.kind
        return turn.failed(error.kind, f"{error}")

    def _headers(self, extra: tuple[tuple[str, str], ...]) -> Mapping[str, str]:
        """The endpoint's headers, with ``extra`` (the command's), the observer's and the
        affinity cookie."""
        shared = self.shared
        headers = shared.endpoint.headers
        if not extra and self.observer is None and shared.jar is None:
            return headers
        headers = {**headers, **dict(extra)}
        if self.observer is not None:
            headers.update(self.observer.headers())
        if shared.jar is not None:
            cookie = self._turn_cookie().header(shared.jar)
            if cookie is not None:
                headers["Cookie"] = cookie
        return headers

    def _turn_cookie(self) -> TurnCookie:
        cookie = self._cookie
        if cookie is None:
            cookie = self._cookie = TurnCookie(self.session)
        return cookie

    def _heard(self, response: Response) -> None:
        """A response's head came: keep the affinity cookie it sets."""
        jar = self.shared.jar
        if jar is not None:
            self._turn_cookie().heard(jar, response.header("set-cookie"))

    async def _send(self, turn: ChatTurn, command: Send) -> Sequence[ChatEvent]:
        endpoint = self.shared.endpoint
        headers = self._headers(command.headers)
        try:
            response = await endpoint.send(
                command.method,
                command.path,
                command.body,
                read_timeout=command.stall,
                head_timeout=command.wait,
                headers=headers,
            )
        except TransportError as exc:
            return self._failed(turn, exc)
        self.response = response
        self._outcome = response.status
        self._heard(response)
        return turn.opened(response.status, response.header)

    async def _read_all(self, turn: ChatTurn, command: ReadAll) -> Sequence[ChatEvent]:
        response = self._take()
        stall = self.shared.endpoint.config.stall_timeout
        try:
            with anyio.fail_after(stall):  # a body that stops half-way never hangs the turn
                data, cut = await self.shared.endpoint.read_bounded(response, command.limit)
        except TransportError as exc:
            return self._failed(turn, exc)
        except TimeoutError:
            return turn.failed("stall", "the body stopped half-way")
        finally:
            await _closed(response)
        return turn.body(data, cut)

    async def _drain(self, turn: ChatTurn, command: Drain) -> Sequence[ChatEvent]:
        response = self._take()
        if not response.complete:
            with anyio.move_on_after(command.seconds):
                try:
                    while await response.read():
                        pass
                except TransportError:
                    pass
        await _closed(response)
        return turn.performed()

    async def _call(self, turn: ChatTurn, command: Call) -> Sequence[ChatEvent]:
        if command.quiet is not None:
            return await self._quiet(turn, command, command.quiet)
        endpoint, lookups = self.shared.endpoint, self.shared.lookups
        # A shared call (the same answer for every turn) is the client's, not the turn's.
        headers = None if command.shared else self._headers(command.headers)
        heard = None if command.shared else self._heard

        def exchange() -> Awaitable[tuple[int, bytes, bool]]:
            return endpoint.exchange(
                command.method,
                command.path,
                command.body,
                limit=command.limit,
                headers=headers,
                heard=heard,
            )

        try:
            with anyio.move_on_after(self._left(command.bound)) as scope:
                if command.shared:
                    key = (command.method, command.path)
                    status, data, _ = await lookups.run(key, exchange)
                else:
                    status, data, _ = await exchange()
        except TransportError as exc:
            return self._failed(turn, exc)
        if scope.cancelled_caught:
            assert command.bound is not None
            return turn.fired(command.bound)
        self._outcome = status
        return turn.answered(status, data)

    async def _quiet(self, turn: ChatTurn, command: Call, seconds: float) -> Sequence[ChatEvent]:
        """A call of the cleanup (the cancel of a generation): bounded, shielded from the
        caller's cancellation, never raising."""
        endpoint = self.shared.endpoint
        headers = self._headers(command.headers)
        with anyio.CancelScope(shield=True), anyio.move_on_after(seconds):
            try:
                status, _, _ = await endpoint.exchange(
                    command.method, command.path, headers=headers
                )
            except Exception:  # best effort, inside the cleanup
                return turn.failed("read", "no answer")
            self._outcome = status
            return turn.answered(status, b"")
        return turn.failed("timeout", "no answer in time")

    async def _route(self, turn: ChatTurn, command: Route) -> Sequence[ChatEvent]:
        assert self._router is not None
        try:
            shared, target, event = await self._router.route(command.failed)
        except ConnectError as exc:
            return turn.failed("connect", f"{exc}")
        self.shared = shared
        self.routed = event
        return turn.routed(target, event)

    async def ended(self, turn: ChatTurn) -> None:
        """The turn is over: its usage is counted where it ran (unless the user stopped it
        before the chat went out), and a pool hears how it ended."""
        completion, error = turn.completion, turn.error
        if completion is not None or error is not None or turn.generating:
            completion = completion or turn.partial()
            model = (completion.model if completion else None) or turn.context.model
            self.shared.usage.add(model, turn_usage(completion, error is not None))
        if self._router is not None:
            await self._router.ended(error)

    async def _close(self, turn: ChatTurn, command: Close) -> Sequence[ChatEvent]:
        await self.release()
        return turn.performed()

    async def release(self) -> None:
        """Close the response the turn holds, if any (shielded: part of every cleanup)."""
        response = self.response
        if response is not None:
            self.response = None
            await _closed(response)

    def _take(self) -> Response:
        response = self.response
        assert response is not None
        self.response = None
        return response


async def _closed(response: Response) -> None:
    """Release ``response`` (part of every cleanup): cancelled on the way, it is released
    again, shielded. (Ours releases without awaiting anything; a shield on every release
    would cost a cancel scope per stream.)"""
    try:
        await response.aclose()
    except BaseException:
        with anyio.CancelScope(shield=True):
            await response.aclose()
        raise


_DO: dict[type, Callable[..., Awaitable[Sequence[ChatEvent]]]] = {
    Send: Performer._send,
    ReadAll: Performer._read_all,
    Drain: Performer._drain,
    Call: Performer._call,
    Sleep: Waits._sleep,
    Arm: Waits._arm,
    Line: Waits._line,
    Leave: Waits._leave,
    Route: Performer._route,
    Close: Performer._close,
    Admit: Waits._admit,
    Free: Waits._free,
}
