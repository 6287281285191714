"""ChatStream: one chat turn, iterated as events, ending with a Completion.

The stream is the turn's driver, one flat loop: ask the turn (``_turn/machine.py``) for its
command, perform it (``Read`` here, the hot path; the rest through ``_driver/perform.py``),
feed the result back, deliver the events that come out. Leaving ``async with``, ``aclose()``
(from any task), cancelling the task, or dropping the stream closes the HTTP response at
once, so the server frees the slot.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import anyio

from ._arguments.output import OutputDecoder
from ._arguments.routing import LiveArguments
from ._arguments.stream import ArgumentStream
from ._driver.finalize import close_turn, schedule
from ._driver.logs import escaped, fairness, proxied
from ._driver.perform import Performer
from ._transports.base import Response, TransportError
from ._turn.commands import READ
from ._turn.machine import ChatTurn
from ._types.completion import Completion
from ._types.events import ChatEvent, Routed
from ._types.request import ChatRequest
from ._types.state import StreamState, why_unfinished

__all__ = ["ChatStream", "StreamState"]

_FAIRNESS_EVENTS = 32


class ChatStream:
    """``async for event in stream`` yields ChatEvents; then ``stream.completion``.

    Use ``async with client.chat(request) as stream:`` (or ``await stream.aclose()``) to be
    sure the connection is released when you stop early.
    """

    def __init__(
        self,
        turn: ChatTurn,
        io: Performer,
        request: ChatRequest,
        *,
        live: bool | Iterable[str] = False,
        lenient: bool = True,
        decoder: OutputDecoder | None = None,
    ) -> None:
        self.request = request
        self._turn = turn
        self._io = io
        self._live_tools = live
        self._lenient = lenient
        self._live: LiveArguments | None = None
        if live:
            self._start_live()
        self._decoder = decoder
        self._batch: Sequence[ChatEvent] = ()
        self._pos = 0
        self._served = 0
        self._response: Response | None = None  # the one the turn reads (io's)
        self._fair = False  # its reads are fair (see Response.fair_reads)
        self._started = False
        self._running = False  # a task is inside __anext__
        self._stopping = False  # aclose() from another task: end quietly
        self._ended = False
        observer = self._observer = io.observer  # None: nothing watches this turn
        # What watches each batch (one check per read; None when nothing does).
        self._batches = observer if observer is not None and observer.watches_events else None

    # -- what arrived ----------------------------------------------------------------------
    @property
    def conversation_id(self) -> str | None:
        """The ``X-Conversation-Id`` of this stream (None when resume is off): give it to
        ``Client.reattach`` from another process to pick the turn up, or ``Client.cancel``."""
        return self._turn.context.plan.conversation_id

    @property
    def route(self) -> Routed | None:
        """A pool's stream: where it went (its ``Routed`` event), once routed."""
        return self._io.routed

    @property
    def completion(self) -> Completion:
        """The Completion, once the stream has ended normally.

        Before that it raises ``RuntimeError`` saying what happened (not iterated yet, still
        streaming, stopped, or the error that ended it); ``stream.partial`` then has what
        arrived."""
        completion = self._turn.completion
        if completion is None or not self._ended:
            raise RuntimeError(why_unfinished(self.state, self.error))
        return completion

    @property
    def state(self) -> StreamState:
        """:class:`StreamState`: pending, streaming, finished, stopped or failed."""
        turn = self._turn
        if self._ended and turn.error is not None:  # also an OutputError after the answer
            return StreamState.FAILED
        if self._ended and turn.completion is not None:
            return StreamState.FINISHED
        if self._ended or self._stopping or (turn.closing and turn.outcome is None):
            return StreamState.STOPPED
        return StreamState.STREAMING if self._started else StreamState.PENDING

    @property
    def finished(self) -> bool:
        """True once the stream ended with a finish reason (``stream.completion`` is ready)."""
        return self.state is StreamState.FINISHED

    @property
    def error(self) -> Exception | None:
        """The error that ended the stream (also raised from the loop), else None."""
        return self._turn.error if self._ended else None

    @property
    def partial(self) -> Completion:
        """What arrived so far, as a Completion: exactly what the events you received showed,
        at any time (while streaming, after a stop, a timeout or an error). Once finished, the
        Completion itself. ``finish_reason`` is None until the finish reason arrived; before
        any chunk, an empty Completion (``id`` ``""``)."""
        turn = self._turn
        completion = turn.completion
        if completion is not None:
            return completion
        return turn.partial_seen(self._batch[self._pos :])

    def output(self) -> Any:
        """The typed output decoded so far, as plain dicts and lists (None before its ``{``;
        the string being written holds its text so far). Cheap: it is kept up to date as the
        answer streams, not re-parsed. It is the live value: copy it to keep it as it is.
        The validated instance is ``stream.completion.output`` once the stream ended."""
        decoder = self._decoder
        return None if decoder is None else decoder.partial()

    def arguments(self, index: int | None = None, *, tool: str | None = None) -> ArgumentStream:
        """The live :class:`ArgumentStream` of tool call ``index``, or of the next call of the
        tool named ``tool`` that nobody took yet. Take it before or while the stream runs; the
        stream feeds it as pieces arrive and finishes it when the call is complete. Read it
        from another task (``await args.field("content").delta()``) while this one iterates.
        """
        live = self._live or self._start_live()
        args = live.claim(index, tool)
        if self._ended or self._turn.closing:  # nothing more will feed it
            args.abort("the chat stream had already ended")
        return args

    def _start_live(self) -> LiveArguments:
        asm = self._turn.context.asm
        live = self._live = LiveArguments(
            asm.tool_calls_so_far, self._live_tools, lenient=self._lenient, tokens=asm.call_tokens
        )
        self._turn.context.plan.processors.insert(0, live.process)
        return live

    # -- the loop --------------------------------------------------------------------------
    def __aiter__(self) -> ChatStream:
        return self

    async def __anext__(self) -> ChatEvent:
        # A consumer slower than the server finds every event already buffered and would
        # never suspend: give the loop's other tasks a turn every so many events.
        self._served += 1
        if self._served >= _FAIRNESS_EVENTS:
            self._served = 0
            fairness(_FAIRNESS_EVENTS)
            await self._checkpoint()
        batch, pos = self._batch, self._pos
        while pos >= len(batch):  # run the turn to its next events
            turn = self._turn
            self._running = True
            if turn.command is READ:  # the hot path: one read, one call into the turn
                try:
                    chunk = await self._response.read()  # type: ignore[union-attr]
                except TransportError as exc:
                    batch = self._broke(turn, exc)
                except BaseException:
                    await self._abandon()
                    raise
                else:
                    batch = turn.data(chunk)
                    if self._fair:  # the count starts again with each read (fair_reads)
                        self._served = 1
            else:
                batch = await self._step(turn)
            self._running = False
            pos = 0
            if self._batches is not None:
                self._batches.events(batch)
        self._batch = batch
        self._pos = pos + 1
        return batch[pos]

    def _broke(self, turn: ChatTurn, exc: TransportError) -> Sequence[ChatEvent]:
        if self._stopping:  # aclose() from another task closed the response
            turn.stop()
            return ()
        return turn.failed(exc.kind, f"{exc}")

    async def _step(self, turn: ChatTurn) -> Sequence[ChatEvent]:
        """Any command but ``Read``: performed, its result fed back; at ``Done``, the end."""
        if turn.done:
            self._running = False
            raise await self._end()
        if not self._started and self._observer is not None:
            self._observer.started(turn)
        self._started = True
        try:
            events = await self._io.perform(turn, turn.command)
        except BaseException:
            self._running = False
            await self._abandon()
            raise
        response = self._response = self._io.response
        self._fair = response is not None and response.fair_reads
        if self._stopping and not turn.closing:
            turn.stop()
            return ()
        return events

    async def _end(self) -> BaseException:
        """The turn is over: the error to raise, or ``StopAsyncIteration``."""
        self._finish_live()
        turn = self._turn
        if self._observer is not None:
            self._observer.ended(turn, stopped=turn.completion is None and turn.error is None)
        await self._io.ended(turn)
        if turn.context.proxied is not None:
            proxied(turn.context.proxied)
        if turn.error is None:
            return StopAsyncIteration()
        escaped(turn.error, turn.context.model)
        return turn.error

    def _finish_live(self) -> None:
        self._ended = True
        if self._live is not None:
            self._live.abort("the chat stream ended first")

    async def _checkpoint(self) -> None:
        try:
            await anyio.lowlevel.checkpoint()
        except BaseException:
            await self._abandon()
            raise

    async def _abandon(self) -> None:
        """Cancelled (or stopped): close the turn now, shielded, instead of whenever the
        stream is garbage collected."""
        with anyio.CancelScope(shield=True):
            await close_turn(self._turn, self._io)
        self._finish_live()

    # -- stopping --------------------------------------------------------------------------
    async def __aenter__(self) -> ChatStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the stream and release its connection (the server then frees the slot).

        From another task while this stream is being iterated (a "stop" button), it closes
        the response at once and the iterating task's loop ends quietly."""
        if self._ended:
            return
        if not self._started:
            self._started = self._stopping = True
            self._turn.stop()
            self._finish_live()
            return
        if self._running:
            self._stopping = True
            await self._io.release()
            return
        await self._abandon()

    async def collect(self) -> Completion:
        """Drain the stream and return the Completion."""
        async with self:
            async for _ in self:
                pass
        return self.completion

    def __del__(self) -> None:
        turn, io = self._turn, self._io
        if self._started and not turn.done:  # dropped unfinished (a break without async with)
            schedule(lambda: close_turn(turn, io))
