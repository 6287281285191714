"""ChatStream: one chat request, iterated as events, ending with a Completion.

The loop is thin: get a response (slot order, model loading, retries: see ``_attempts``), then
for each read, SSE framing → assembler → events. Breaking out, ``aclose()`` or cancelling the
task closes the HTTP response at once, so the server frees the slot.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

from ._assembler import Assembler
from ._completion import Completion
from ._errors import (
    InferError,
    ProtocolError,
    StalledError,
    StreamClosedEarlyError,
    ThinkingOverrunError,
)
from ._events import ChatEvent, ThinkingCapped
from ._request import ChatRequest
from ._sse import SSEDecoder
from ._transport import Response, TransportError
from ._watchdog import Watchdog

if TYPE_CHECKING:
    from ._client import Client

__all__ = ["ChatStream"]


class ChatStream:
    """``async for event in stream`` yields ChatEvents; then ``stream.completion``.

    Use ``async with client.chat(request) as stream:`` (or ``await stream.aclose()``) to be
    sure the connection is released when you stop early.
    """

    def __init__(self, client: Client, request: ChatRequest) -> None:
        self._client = client
        self.request = request
        self._gen: AsyncGenerator[list[ChatEvent], None] | None = None
        self._batch: list[ChatEvent] = []
        self._pos = 0
        self._completion: Completion | None = None
        self._response: Response | None = None

    @property
    def completion(self) -> Completion:
        """The Completion, once the stream has ended normally."""
        if self._completion is None:
            raise RuntimeError("the stream has not finished yet: iterate it to the end first")
        return self._completion

    def __aiter__(self) -> ChatStream:
        return self

    async def __anext__(self) -> ChatEvent:
        while self._pos >= len(self._batch):
            if self._gen is None:
                self._gen = self._run()
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
        """Stop the stream and release its connection (the server then frees the slot)."""
        if self._gen is not None:
            await self._gen.aclose()
        elif self._response is not None:
            await self._response.aclose()

    async def collect(self) -> Completion:
        """Drain the stream and return the Completion."""
        async with self:
            async for _ in self:
                pass
        return self.completion

    # -- the loop ----------------------------------------------------------------------------
    async def _run(self) -> AsyncGenerator[list[ChatEvent], None]:
        client = self._client
        config = client.config
        request = self.request
        asm = Assembler()
        response: Response | None = None
        slot = request.slot
        ticket = client._slots.join(slot) if slot is not None else None
        budget = request.thinking_budget
        if budget is None:
            budget = config.thinking_budget
        capped = False
        stall = config.stall_timeout
        watchdog: Watchdog | None = None
        try:
            async for item in client._open(request, ticket):
                if isinstance(item, list):
                    yield item
                else:
                    response = self._response = item
            if response is None:  # pragma: no cover - _open always ends with a response
                raise InferError("no response")
            content_type = (response.header("content-type") or "").lower()
            if "text/event-stream" not in content_type:
                self._completion = Assembler.from_response(await response.aread())
                return
            decoder = SSEDecoder()
            read = response.read
            watchdog = Watchdog(stall) if stall is not None else None
            while True:
                if watchdog is not None:
                    watchdog.waiting()
                    chunk = await read()
                    watchdog.idle()
                else:
                    chunk = await read()
                payloads = decoder.feed(chunk) if chunk else decoder.flush()
                if len(payloads) == 1:
                    events = asm.push(payloads[0])
                else:
                    events = []
                    for payload in payloads:
                        events += asm.push(payload)
                if budget is not None and asm.in_reasoning:
                    tokens = asm.reasoning_tokens
                    if not capped and tokens >= max(budget, 1):
                        capped = True
                        await client._end_reasoning(asm.id)
                        events.append(ThinkingCapped(tokens))
                    elif capped and tokens > budget + config.thinking_grace:
                        raise ThinkingOverrunError(
                            f"reasoning went on for {tokens} tokens past a budget of {budget}",
                            partial=asm.partial(capped),
                        )
                if events:
                    yield events
                if not chunk:
                    break
            self._completion = asm.finish(capped)
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
            try:
                if response is not None:
                    await response.aclose()
            finally:
                if slot is not None:
                    client._slots.leave(slot, ticket)
