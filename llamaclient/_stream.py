"""ChatStream: one chat request, iterated as events, ending with a Completion.

The loop is thin: get a response (slot order, model loading, retries: ``_policy/``), then
for each read, SSE framing → assembler → events. Leaving ``async with``, ``aclose()`` (from
any task) or cancelling the task closes the HTTP response at once, so the server frees the
slot. A plain ``break`` without ``async with`` closes it as soon as the stream object is no
longer referenced (the event loop then finalises its generator).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterable

import anyio

from ._arguments.routing import LiveArguments
from ._arguments.stream import ArgumentStream
from ._policy.budget import ThinkingBudget
from ._policy.chat import ChatPolicies
from ._policy.slots import Ticket
from ._protocol.assembler import Assembler
from ._protocol.sse import SSEDecoder
from ._transports.base import Response, TransportError
from ._types.completion import Completion
from ._types.errors import InferError, ProtocolError, StalledError, StreamClosedEarlyError
from ._types.events import ChatEvent
from ._types.request import ChatRequest

__all__ = ["ChatStream"]

_FAIRNESS_EVENTS = 32


class _Shared:
    """What the stream's loop and its ChatStream both see. The loop holds this, never the
    ChatStream: so dropping an unfinished ChatStream drops its generator at once, and the loop
    closes it (and with it the HTTP response) without waiting for the garbage collector."""

    __slots__ = ("asm", "completion", "ended", "live", "response", "stopped")

    def __init__(self) -> None:
        self.asm = Assembler()
        self.live: LiveArguments | None = None
        self.completion: Completion | None = None
        self.response: Response | None = None
        self.stopped = False  # aclose() from another task
        self.ended = False  # the loop is over: no more pieces will come


class ChatStream:
    """``async for event in stream`` yields ChatEvents; then ``stream.completion``.

    Use ``async with client.chat(request) as stream:`` (or ``await stream.aclose()``) to be
    sure the connection is released when you stop early.
    """

    def __init__(
        self,
        policies: ChatPolicies,
        request: ChatRequest,
        body: bytes,
        live_arguments: bool | Iterable[str] = False,
        lenient_arguments: bool = True,
    ) -> None:
        self._policies = policies
        self.request = request
        self._body = body
        self._shared = _Shared()
        self._live_tools = live_arguments
        self._lenient = lenient_arguments
        if live_arguments:
            self._shared.live = self._new_live()
        self._gen: AsyncGenerator[list[ChatEvent], None] | None = None
        self._batch: list[ChatEvent] = []
        self._pos = 0
        self._served = 0

    @property
    def completion(self) -> Completion:
        """The Completion, once the stream has ended normally."""
        completion = self._shared.completion
        if completion is None:
            raise RuntimeError("the stream has not finished yet: iterate it to the end first")
        return completion

    def arguments(self, index: int | None = None, *, tool: str | None = None) -> ArgumentStream:
        """The live :class:`ArgumentStream` of tool call ``index``, or of the next call of the
        tool named ``tool`` that nobody took yet. Take it before or while the stream runs; the
        stream feeds it as pieces arrive and finishes it when the call is complete. Read it
        from another task (``await args.field("content").delta()``) while this one iterates.
        """
        shared = self._shared
        if shared.live is None:
            shared.live = self._new_live()
        args = shared.live.claim(index, tool)
        if shared.ended:  # nothing more will feed it: complete or fail it now
            args.abort("the chat stream had already ended")
        return args

    def _new_live(self) -> LiveArguments:
        return LiveArguments(
            self._shared.asm.tool_calls_so_far, self._live_tools, lenient=self._lenient
        )

    def __aiter__(self) -> ChatStream:
        return self

    async def __anext__(self) -> ChatEvent:
        # A consumer slower than the server finds every event already buffered and would
        # never suspend: give the loop's other tasks a turn every so many events.
        self._served += 1
        if self._served >= _FAIRNESS_EVENTS:
            self._served = 0
            await anyio.lowlevel.checkpoint()
        while self._pos >= len(self._batch):
            if self._gen is None:
                self._gen = _run(self._policies, self.request, self._body, self._shared)
            self._batch = await self._gen.__anext__()
            self._pos = 0
        event = self._batch[self._pos]
        self._pos += 1
        return event

    async def __aenter__(self) -> ChatStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the stream and release its connection (the server then frees the slot).

        From another task while this stream is being iterated (a "stop" button), it closes
        the response at once and the iterating task's loop ends quietly."""
        gen = self._gen
        if gen is None:
            return
        if not getattr(gen, "ag_running", False):  # a native async generator
            await gen.aclose()
            return
        shared = self._shared
        shared.stopped = True
        if shared.response is not None:
            await shared.response.aclose()

    async def collect(self) -> Completion:
        """Drain the stream and return the Completion."""
        async with self:
            async for _ in self:
                pass
        return self.completion


async def _run(
    policies: ChatPolicies, request: ChatRequest, body: bytes, shared: _Shared
) -> AsyncGenerator[list[ChatEvent], None]:
    """The loop: wait for a response, then read → SSE framing → assembler → events."""
    slot = request.slot
    ticket = policies.slots.join(slot) if slot is not None else None
    budget = policies.budget(request)
    try:
        async for events in _respond(policies, request, body, ticket, shared):
            yield events
        response = shared.response
        if response is None or shared.completion is not None:
            return  # stopped while waiting, or a whole (non-streamed) answer
        decoder = SSEDecoder()
        read = response.read
        asm = shared.asm
        while True:
            chunk = await read()
            payloads = decoder.feed(chunk) if chunk else decoder.flush()
            if budget is None:
                events, failure = _push_all(asm, payloads)
            else:
                events, failure = await _push_all_budgeted(asm, payloads, budget)
            if shared.live is not None:
                events = shared.live.process(events)
            if events:
                yield events
            if failure is not None:
                raise failure
            if not chunk or asm.is_done:  # [DONE] ends it, even if the connection stays open
                break
        shared.completion = asm.finish(_capped(budget))
    except TransportError as exc:
        _after_break(exc, shared, _capped(budget), policies.config.stall_timeout)
    except ProtocolError as exc:
        if exc.partial is None:
            exc.partial = shared.asm.partial(_capped(budget))
        raise
    finally:
        await _end(shared, policies, slot, ticket)


async def _respond(
    policies: ChatPolicies,
    request: ChatRequest,
    body: bytes,
    ticket: Ticket | None,
    shared: _Shared,
) -> AsyncGenerator[list[ChatEvent], None]:
    """Yield the waiting events (queued, busy, loading, retrying); the response goes into
    ``shared`` for the loop (and for ``aclose()`` from another task). A response that is not
    an event stream is read whole into ``shared.completion``."""
    response: Response | None = None
    async for item in policies.open(request, body, ticket):
        if isinstance(item, list):
            yield item
        else:
            response = shared.response = item
    if response is None or shared.stopped:  # aclose() from another task while we waited
        shared.response = None
        if response is not None:
            await response.aclose()
    elif not _is_sse(response):
        shared.completion = Assembler.from_response(await policies.read_all(response))


def _is_sse(response: Response) -> bool:
    return "text/event-stream" in (response.header("content-type") or "").lower()


def _capped(budget: ThinkingBudget | None) -> bool:
    return budget is not None and budget.capped


def _push_all(asm: Assembler, payloads: list[bytes]) -> tuple[list[ChatEvent], InferError | None]:
    """The events of one read's payloads. What arrived before an error in this read is
    returned with it, so the events never depend on how the bytes were split into reads."""
    events: list[ChatEvent] = []
    try:
        for payload in payloads:
            got = asm.push(payload)
            if events:
                events += got
            else:
                events = got
    except InferError as exc:
        return events, exc
    return events, None


async def _push_all_budgeted(
    asm: Assembler, payloads: list[bytes], budget: ThinkingBudget
) -> tuple[list[ChatEvent], InferError | None]:
    """:func:`_push_all` with the thinking budget checked after every payload."""
    events: list[ChatEvent] = []
    try:
        for payload in payloads:
            events += asm.push(payload)
            await budget.check(asm, events)
    except InferError as exc:
        return events, exc
    return events, None


def _after_break(
    exc: TransportError, shared: _Shared, capped: bool, stall: float | None
) -> None:
    """The connection failed while streaming: a quiet end, a whole answer, or an error with
    the partial."""
    asm = shared.asm
    if shared.stopped:
        return  # aclose() from another task closed the response: a quiet end
    if asm.is_finished:  # only the usage chunk or [DONE] was lost (cut, or silence after the
        shared.completion = asm.finish(capped)  # finish reason): the answer is whole
        return
    if exc.kind == "stall":
        raise StalledError(
            f"no bytes for {stall} s while streaming", partial=asm.partial(capped)
        ) from None
    if exc.kind == "protocol":
        raise ProtocolError(
            f"the response broke HTTP/1.1 framing ({exc})", partial=asm.partial(capped)
        ) from None
    raise StreamClosedEarlyError(f"the stream broke: {exc}", partial=asm.partial(capped)) from exc


async def _end(
    shared: _Shared, policies: ChatPolicies, slot: int | None, ticket: Ticket | None
) -> None:
    """Release everything the stream held, whatever happened."""
    shared.ended = True
    if shared.live is not None:
        shared.live.abort("the chat stream ended first")
    try:
        if shared.response is not None:
            with anyio.CancelScope(shield=True):
                await shared.response.aclose()
    finally:
        if slot is not None and ticket is not None:
            policies.slots.leave(slot, ticket)
