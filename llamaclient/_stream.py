"""ChatStream: one chat request, iterated as events, ending with a Completion.

The loop is thin: get a response (slot order, model loading, retries: see ``_attempts``), then
for each read, SSE framing → assembler → events. Leaving ``async with``, ``aclose()`` (from
any task) or cancelling the task closes the HTTP response at once, so the server frees the
slot. A plain ``break`` without ``async with`` closes it as soon as the stream object is no
longer referenced (asyncio then finalises its generator).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Iterable
from typing import TYPE_CHECKING

from ._arguments.routing import LiveArguments
from ._arguments.stream import ArgumentStream
from ._policy.stall import Watchdog
from ._protocol.assembler import Assembler
from ._protocol.sse import SSEDecoder
from ._transports.base import Response, TransportError
from ._types.completion import Completion
from ._types.errors import (
    InferError,
    ProtocolError,
    StalledError,
    StreamClosedEarlyError,
    ThinkingOverrunError,
)
from ._types.events import ChatEvent, ThinkingCapped
from ._types.request import ChatRequest

if TYPE_CHECKING:
    from ._client import Client

__all__ = ["ChatStream"]

_FAIRNESS_EVENTS = 32


class _Shared:
    """What the stream's loop and its ChatStream both see. The loop holds this, never the
    ChatStream: so dropping an unfinished ChatStream drops its generator at once, and asyncio
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
        client: Client,
        request: ChatRequest,
        body: bytes,
        live_arguments: bool | Iterable[str] = False,
        lenient_arguments: bool = True,
    ) -> None:
        self._client = client
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
            await asyncio.sleep(0)
        while self._pos >= len(self._batch):
            if self._gen is None:
                self._gen = _run(self._client, self.request, self._body, self._shared)
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
    client: Client, request: ChatRequest, body: bytes, shared: _Shared
) -> AsyncGenerator[list[ChatEvent], None]:
    """The loop: wait for a response, then read → SSE framing → assembler → events."""
    config = client.config
    asm = shared.asm
    response: Response | None = None
    slot = request.slot
    ticket = client._slots.join(slot) if slot is not None else None
    budget = request.thinking_budget
    if budget is None:
        budget = config.thinking_budget
    elif budget == 0:  # the request turns the config's cap off
        budget = None
    asked = False  # the control call to end the reasoning was made
    capped = False  # ... and the server accepted it
    stall = config.stall_timeout
    watchdog: Watchdog | None = None
    try:
        async for item in client._open(request, body, ticket):
            if isinstance(item, list):
                yield item
            else:
                response = shared.response = item
                if shared.stopped:  # aclose() from another task while we waited
                    return
        if response is None:  # pragma: no cover - _open always ends with a response
            raise InferError("no response")
        content_type = (response.header("content-type") or "").lower()
        if "text/event-stream" not in content_type:
            shared.completion = Assembler.from_response(await client._read_all(response))
            return
        decoder = SSEDecoder()
        read = response.read
        watchdog = Watchdog(stall) if stall is not None else None
        now = asyncio.get_running_loop().time
        current_task = asyncio.current_task
        while True:
            if watchdog is not None:
                watchdog.since = now()
                watchdog.task = current_task()  # reads may come from different tasks
                chunk = await read()
                watchdog.since = None
            else:
                chunk = await read()
            payloads = decoder.feed(chunk) if chunk else decoder.flush()
            events: list[ChatEvent] = []
            failure: InferError | None = None
            try:
                for payload in payloads:
                    got = asm.push(payload)
                    if events:
                        events += got
                    else:
                        events = got
                    if budget is None or not asm.in_reasoning:
                        continue
                    tokens = asm.reasoning_tokens
                    if not asked and tokens >= budget:
                        asked = True
                        if await client._end_reasoning(asm.id):
                            capped = True
                            events.append(ThinkingCapped(tokens))
                    elif asked and tokens > budget + config.thinking_grace:
                        raise ThinkingOverrunError(
                            f"reasoning went on for {tokens} tokens past a budget of {budget}"
                            + ("" if capped else " (the server refused to end it)"),
                            partial=asm.partial(capped),
                        )
            except InferError as exc:
                # What arrived before the error in this read is delivered first, so the
                # events never depend on how the bytes were split into reads.
                failure = exc
            if shared.live is not None:
                events = shared.live.process(events)
            if events:
                yield events
            if failure is not None:
                raise failure
            if not chunk:
                break
        shared.completion = asm.finish(capped)
    except asyncio.CancelledError:
        if watchdog is None or not watchdog.fired:
            raise
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        raise StalledError(
            f"no bytes for {stall} s while streaming", partial=asm.partial(capped)
        ) from None
    except TransportError as exc:
        if shared.stopped:
            return  # aclose() from another task closed the response: a quiet end
        if asm.is_finished:  # only the usage chunk or [DONE] was lost: the answer is whole
            shared.completion = asm.finish(capped)
            return
        raise StreamClosedEarlyError(
            f"the stream broke: {exc}", partial=asm.partial(capped)
        ) from exc
    except ProtocolError as exc:
        if exc.partial is None:
            exc.partial = asm.partial(capped)
        raise
    finally:
        if watchdog is not None:
            watchdog.cancel()
        shared.ended = True
        if shared.live is not None:
            shared.live.abort("the chat stream ended first")
        try:
            if response is not None:
                await response.aclose()
        finally:
            if slot is not None:
                client._slot_done(slot, ticket)
