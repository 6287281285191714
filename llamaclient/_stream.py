"""ChatStream: one chat request, iterated as events, ending with a Completion.

The loop is thin: get a response (slot order, model loading, retries: ``_policy/``), then
for each read, SSE framing → assembler → events. Leaving ``async with``, ``aclose()`` (from
any task) or cancelling the task closes the HTTP response at once, so the server frees the
slot. A plain ``break`` without ``async with`` closes it as soon as the stream object is no
longer referenced (the event loop then finalises its generator).

Who runs what: the loop (``_run``, an async generator) waits for the response and owns
everything the stream holds; once the body streams, it hands ChatStream a :class:`_Pump`,
and ``ChatStream.__anext__`` itself reads and decodes (one hop less per read: the common
read is one event). The end of the body, ``[DONE]``, a failure or a broken connection go
back to the loop, which decides (finish, resume, fail) and releases everything.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Sequence
from contextlib import aclosing
from typing import Any

import anyio
import msgspec

from ._arguments.output import OutputDecoder
from ._arguments.routing import LiveArguments
from ._arguments.stream import ArgumentStream
from ._policy.attempts import hide_key, redact
from ._policy.budget import ThinkingBudget
from ._policy.chat import ChatPolicies
from ._policy.resume import Resumer, ResumeUnsupported
from ._policy.slots import Ticket
from ._protocol.assembler import Assembler
from ._protocol.sse import SSEDecoder
from ._transports.base import Response, TransportError
from ._types.completion import Completion, FinishReason, Usage
from ._types.config import Config
from ._types.errors import (
    InferError,
    OutputError,
    ProtocolError,
    ResumeError,
    StalledError,
    StreamClosedEarlyError,
)
from ._types.events import ChatEvent, Content, Reasoning, Resuming, ToolCallDelta
from ._types.request import ChatRequest
from ._types.typed import OutputInvalid, OutputType

__all__ = ["ChatStream", "StreamState"]

_FAIRNESS_EVENTS = 32
_END_GRACE = 0.1  # seconds to wait for the body's end after [DONE]


class StreamState(enum.StrEnum):
    """Where a :class:`ChatStream` is (``stream.state``)."""

    PENDING = "pending"
    """Not iterated yet: no request was sent."""
    STREAMING = "streaming"
    """Iterated, not ended yet."""
    FINISHED = "finished"
    """Ended with a finish reason: ``stream.completion`` is the answer."""
    STOPPED = "stopped"
    """Ended early by you: ``aclose()``, leaving ``async with``, or cancelling the task."""
    FAILED = "failed"
    """Ended by an error (``stream.error``)."""


class _Shared:
    """What the stream's loop and its ChatStream both see. The loop holds this, never the
    ChatStream: so dropping an unfinished ChatStream drops its generator at once, and the loop
    closes it (and with it the HTTP response) without waiting for the garbage collector."""

    __slots__ = (
        "asm",
        "capped",
        "completion",
        "ended",
        "error",
        "live",
        "offset",
        "output",
        "response",
        "resumer",
        "stopped",
    )

    def __init__(self, resumer: Resumer | None = None, offset: int = 0) -> None:
        self.asm = Assembler()
        self.resumer = resumer
        self.offset = offset  # body bytes received (where a resume picks up)
        self.live: LiveArguments | None = None
        self.output: OutputDecoder | None = None  # typed output: the answer decoded live
        self.completion: Completion | None = None
        self.response: Response | None = None
        self.stopped = False  # aclose() from another task
        self.ended = False  # the loop is over: no more pieces will come
        self.error: Exception | None = None  # what ended the stream, if an error did
        self.capped = False  # the thinking budget ended the reasoning


class _Pump:
    """The body as it streams: each read through SSE framing → assembler → events.

    ChatStream's ``__anext__`` calls ``read`` and ``take`` itself while the loop waits (no
    thinking budget); with a budget the loop does (``take_budgeted``). ``outcome`` is set
    when the loop must look again: the body ended, ``[DONE]`` came, or a payload failed
    (the failure is raised after the events of its read were delivered)."""

    __slots__ = ("decoder", "fair", "outcome", "read", "shared")

    def __init__(
        self,
        shared: _Shared,
        decoder: SSEDecoder,
        response: Response,
    ) -> None:
        self.shared = shared
        self.decoder = decoder
        self.read: Callable[[], Awaitable[bytes]] = response.read
        self.outcome: tuple[bytes, InferError | None] | None = None
        # A stack whose reads are scheduling points, or hand out at once everything that
        # came while the reader was suspended (so the next read waits: ours on asyncio, the
        # testing kit's), says ``fair_reads``: the events of one read are then all a reader
        # can take without a turn. Other stacks' reads may not suspend (httpx hands out the
        # chunks h11 already holds one by one): every event counts then.
        self.fair: bool = getattr(type(response), "fair_reads", False)

    def take(self, chunk: bytes) -> list[ChatEvent]:
        """The events of one read (``b""``: the end of the body). What arrived before an
        error in this read is returned with it (the error is raised after them), so the
        events never depend on how the bytes were split."""
        shared = self.shared
        shared.offset += len(chunk)
        asm = shared.asm
        events: list[ChatEvent] = []
        failure: InferError | None = None
        try:
            for payload in self.decoder.feed(chunk) if chunk else self.decoder.flush():
                got = asm.push(payload)
                if events:
                    events += got
                else:
                    events = got
        except InferError as exc:
            if not asm.is_done:  # after [DONE] nothing counts: a later read is never taken
                failure = exc
        return self._settle(chunk, events, failure)

    async def take_budgeted(self, chunk: bytes, budget: ThinkingBudget) -> list[ChatEvent]:
        """:meth:`take`, one payload at a time, with the thinking budget checked after each
        (it may end the reasoning, or fail the stream, between two payloads of one read)."""
        self.shared.offset += len(chunk)
        payloads = self.decoder.feed(chunk) if chunk else self.decoder.flush()
        asm = self.shared.asm
        events: list[ChatEvent] = []
        for payload in payloads:
            try:
                events += asm.push(payload)
                await budget.check(asm, events)
            except InferError as exc:
                return self._settle(chunk, events, None if asm.is_done else exc)
        return self._settle(chunk, events, None)

    def _settle(
        self, chunk: bytes, events: list[ChatEvent], failure: InferError | None
    ) -> list[ChatEvent]:
        """The end of :meth:`take` and :meth:`take_budgeted`: live arguments and typed
        output see the events; ``outcome``."""
        shared = self.shared
        if shared.live is not None:
            events = shared.live.process(events)
        if shared.output is not None:
            events = shared.output.process(events)
        if failure is not None or not chunk or shared.asm.is_done:
            self.outcome = (chunk, failure)
        return events


class ChatStream:
    """``async for event in stream`` yields ChatEvents; then ``stream.completion``.

    Use ``async with client.chat(request) as stream:`` (or ``await stream.aclose()``) to be
    sure the connection is released when you stop early.
    """

    def __init__(
        self,
        policies: ChatPolicies,
        request: ChatRequest,
        body: bytes | None,
        live_arguments: bool | Iterable[str] = False,
        lenient_arguments: bool = True,
        *,
        resumer: Resumer | None = None,
        offset: int = 0,
        output: OutputType[Any] | None = None,
    ) -> None:
        self._policies = policies
        self.request = request
        self._body = body  # None: reattach to ``resumer``'s conversation at ``offset``
        self._shared = _Shared(resumer, offset)
        self._live_tools = live_arguments
        self._lenient = lenient_arguments
        if live_arguments:
            self._shared.live = self._new_live()
        self._output_type = output
        if output is not None:
            self._shared.output = OutputDecoder()
        self._gen: AsyncGenerator[list[ChatEvent] | _Pump, None] | None = None
        self._pump: _Pump | None = None  # set while __anext__ reads the body itself
        self._batch: list[ChatEvent] = []
        self._pos = 0
        self._served = 0
        self._closed = False

    @property
    def conversation_id(self) -> str | None:
        """The ``X-Conversation-Id`` of this stream (None when resume is off): give it to
        ``Client.reattach`` from another process to pick the turn up, or ``Client.cancel``."""
        resumer = self._shared.resumer
        return None if resumer is None else resumer.conversation_id

    @property
    def completion(self) -> Completion:
        """The Completion, once the stream has ended normally.

        Before that it raises ``RuntimeError`` saying what happened (not iterated yet, still
        streaming, stopped, or the error that ended it); ``stream.partial`` then has what
        arrived."""
        completion = self._shared.completion
        if completion is None or self._shared.error is not None:
            raise RuntimeError(self._why_no_completion())
        return completion

    def _why_no_completion(self) -> str:
        state = self.state
        if state is StreamState.PENDING:
            return "the stream has not been iterated yet: iterate it to the end first"
        if state is StreamState.STREAMING:
            return "the stream has not finished yet: iterate it to the end first"
        if state is StreamState.STOPPED:
            return (
                "the stream has not finished: it was stopped (closed or cancelled); "
                "stream.partial has what arrived"
            )
        error = self._shared.error
        return (
            f"the stream has not finished: it failed with {type(error).__name__}: {error}; "
            "stream.partial has what arrived"
        )

    @property
    def state(self) -> StreamState:
        """:class:`StreamState`: pending, streaming, finished, stopped or failed."""
        shared = self._shared
        if shared.error is not None:  # also an OutputError after the whole answer arrived
            return StreamState.FAILED
        if shared.completion is not None:
            return StreamState.FINISHED
        if shared.ended or self._closed:
            return StreamState.STOPPED
        return StreamState.PENDING if self._gen is None else StreamState.STREAMING

    @property
    def finished(self) -> bool:
        """True once the stream ended with a finish reason (``stream.completion`` is ready)."""
        return self._shared.completion is not None and self._shared.error is None

    @property
    def error(self) -> Exception | None:
        """The error that ended the stream (also raised from the loop), else None."""
        return self._shared.error

    @property
    def partial(self) -> Completion:
        """What arrived so far, as a Completion: exactly what the events you received showed,
        at any time (while streaming, after a stop, a timeout or an error). Once finished, the
        Completion itself. ``finish_reason`` is None until the finish reason arrived; before
        any chunk, an empty Completion (``id`` ``""``)."""
        shared = self._shared
        if shared.completion is not None:
            return shared.completion
        partial = shared.asm.partial(shared.capped)
        if partial is None:
            return _EMPTY
        return _without(partial, self._batch[self._pos :])

    def output(self) -> Any:
        """The typed output decoded so far, as plain dicts and lists (None before its ``{``;
        the string being written holds its text so far). Cheap: it is kept up to date as the
        answer streams, not re-parsed. It is the live value: copy it to keep it as it is.
        The validated instance is ``stream.completion.output`` once the stream ended."""
        decoder = self._shared.output
        return None if decoder is None else decoder.partial()

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
            await self._turn()
        batch, pos = self._batch, self._pos
        while pos >= len(batch):
            pump = self._pump
            if pump is None or pump.outcome is not None:
                await self._step()  # the loop: waiting events, the pump, or the end
            else:
                try:
                    self._batch = pump.take(await pump.read())
                except Exception as exc:  # a broken connection (the loop may resume it)
                    if self._closed:
                        raise StopAsyncIteration from None  # aclose() from another task
                    await self._step(exc)
                except BaseException:
                    await self._abandon()
                    raise
                else:
                    self._pos = 0
                    if pump.fair:  # (see _Pump.fair) the count starts again with this read
                        self._served = 1
            batch, pos = self._batch, self._pos
        self._pos = pos + 1
        return batch[pos]

    async def _step(self, error: Exception | None = None) -> None:
        """Run the loop to its next batch of events, or its pump (``error``: thrown into
        it where it waits for the pump)."""
        gen = self._gen
        if gen is None:
            gen = self._gen = _run(self._policies, self.request, self._body, self._shared)
        self._pump = None
        try:
            item = await (gen.__anext__() if error is None else gen.athrow(error))
        except StopAsyncIteration:
            if self._output_type is not None:
                try:
                    _settle_output(self._shared, self._output_type)
                except InferError as exc:
                    self._shared.error = exc
                    raise
            raise
        except Exception as exc:
            self._shared.error = exc
            raise
        if isinstance(item, _Pump):
            self._pump = item
        else:
            self._batch = item
            self._pos = 0

    async def _turn(self) -> None:
        try:
            await anyio.lowlevel.checkpoint()
        except BaseException:
            await self._abandon()
            raise

    async def _abandon(self) -> None:
        """Cancelled outside the loop's generator: close it now (the response, the slot, the
        server's generation) instead of whenever it is garbage collected."""
        with anyio.CancelScope(shield=True):
            await self.aclose()

    async def __aenter__(self) -> ChatStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the stream and release its connection (the server then frees the slot).

        From another task while this stream is being iterated (a "stop" button), it closes
        the response at once and the iterating task's loop ends quietly."""
        self._closed = True
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


_EMPTY = Completion(
    id="",
    model=None,
    content=None,
    reasoning_content=None,
    tool_calls=(),
    finish_reason=None,
    timings=None,
    usage=Usage(),
)


def _without(partial: Completion, unseen: Sequence[ChatEvent]) -> Completion:
    """``partial`` minus the events the consumer has not received yet (the rest of the
    current batch): they are a suffix of the stream, so their text is a suffix of each field.
    A call whose first piece is unseen is dropped (with the calls after it)."""
    if not unseen:
        return partial
    content, reasoning = partial.content or "", partial.reasoning_content or ""
    calls = list(partial.tool_calls)
    for event in reversed(unseen):
        if isinstance(event, Content):
            content = content[: len(content) - len(event.text)]
        elif isinstance(event, Reasoning):
            reasoning = reasoning[: len(reasoning) - len(event.text)]
        elif isinstance(event, ToolCallDelta) and event.index < len(calls):
            call = calls[event.index]
            arguments = call.arguments[: len(call.arguments) - len(event.arguments)]
            if event.name is not None and not arguments:  # its first piece
                del calls[event.index :]
            else:
                calls[event.index] = msgspec.structs.replace(call, arguments=arguments)
    return msgspec.structs.replace(
        partial,
        content=content or None,
        reasoning_content=reasoning or None,
        tool_calls=tuple(calls),
    )


def _settle_output(shared: _Shared, spec: OutputType[Any]) -> None:
    """The stream ended: put the validated output into the Completion, or raise
    :class:`OutputError` (with the raw text, the reason and the partial value)."""
    completion = shared.completion
    decoder = shared.output
    if completion is None or decoder is None or completion.output is not None:
        return  # stopped early, or settled already
    text = completion.content or ""
    if decoder.value.root is None and not decoder.failed:  # a whole (non-streamed) answer
        decoder.feed(text)
    try:
        if not text.strip():
            raise OutputInvalid("the answer is empty")
        value = spec.from_json(text)
    except OutputInvalid as exc:
        reason = str(exc)
        if completion.finish_reason == FinishReason.LENGTH:
            reason = f"the answer reached max_tokens before its JSON closed ({reason})"
        raise OutputError(
            f"the answer is not a {spec.name}",
            text,
            validation=reason,
            output=decoder.partial(),
            partial=completion,
        ) from None
    shared.completion = msgspec.structs.replace(completion, output=value)


async def _run(
    policies: ChatPolicies, request: ChatRequest, body: bytes | None, shared: _Shared
) -> AsyncGenerator[list[ChatEvent] | _Pump, None]:
    """The loop: wait for a response, then read → SSE framing → assembler → events (through
    the :class:`_Pump`, which ChatStream runs itself without a thinking budget)."""
    await policies.check_inputs(request)  # before anything is held or sent
    slot = request.slot
    ticket = policies.slots.join(slot) if slot is not None else None
    budget = policies.budget(request)
    try:
        async with aclosing(_respond(policies, request, body, ticket, shared)) as waiting:
            async for events in waiting:  # closed at once if the stream stops while waiting
                yield events
        response = shared.response
        if response is None or shared.completion is not None:
            return  # stopped while waiting, or a whole (non-streamed) answer
        pump = _Pump(shared, SSEDecoder(policies.config.max_event_bytes), response)
        while pump.outcome is None:
            try:
                if budget is None:
                    yield pump  # ChatStream reads and decodes until pump.outcome
                else:
                    events = await pump.take_budgeted(await pump.read(), budget)
                    if events:
                        yield events
            except TransportError as exc:
                resumer = _resumable(shared, exc)
                if resumer is None:
                    raise
                async for events in _resume(shared, resumer, exc):
                    yield events
                pump.read = _read_of(shared.response)
        chunk, failure = pump.outcome
        if failure is not None:
            raise failure
        if chunk and not getattr(shared.response, "complete", False):
            await _read_to_end(pump.read)  # [DONE] came before the body's end
        shared.completion = shared.asm.finish(_capped(budget))
    except (TransportError, InferError) as exc:
        _failed(exc, shared, _capped(budget), policies.config)
    finally:
        shared.capped = _capped(budget)
        await _end(shared, policies, slot, ticket)


async def _read_to_end(read: Callable[[], Awaitable[bytes]]) -> None:
    """After ``[DONE]`` the body's end is normally in the same read or the next: take it (so
    the HTTP stack finishes the response cleanly), but never wait on a server that keeps the
    connection open."""
    with anyio.move_on_after(_END_GRACE):
        try:
            while await read():
                pass
        except TransportError:
            pass


def _resumable(shared: _Shared, error: TransportError) -> Resumer | None:
    """The resumer, when a broken stream should be picked up rather than ended."""
    resumer = shared.resumer
    if resumer is None or shared.stopped:
        return None
    if shared.asm.is_finished and error.kind == "stall":
        return None  # silence after the finish reason: the answer is whole, take it now
    return resumer if resumer.can_resume(error) else None


async def _resume(
    shared: _Shared, resumer: Resumer, error: TransportError
) -> AsyncGenerator[list[ChatEvent], None]:
    """Drop the broken response and get the rest of the body from the server's session
    (``shared.response``). ``Resuming`` comes first on a server known to resume; on one not
    yet known, once the resume worked, so a server that cannot resume reports the break
    exactly as it would without resume, and no ``Resuming`` was shown for it."""
    broken = shared.response
    shared.response = None
    if broken is not None:
        with anyio.CancelScope(shield=True):
            await broken.aclose()
    event = Resuming(resumer.attempt + 1, shared.offset, redact(f"{error}", resumer.api_key))
    known = resumer.known_to_resume
    if known:
        yield [event]
    try:
        shared.response = await resumer.reconnect(shared.offset)
    except ResumeUnsupported:
        raise error from None
    if not known:
        yield [event]


def _read_of(response: Response | None) -> Callable[[], Awaitable[bytes]]:
    assert response is not None
    return response.read


async def _respond(
    policies: ChatPolicies,
    request: ChatRequest,
    body: bytes | None,
    ticket: Ticket | None,
    shared: _Shared,
) -> AsyncGenerator[list[ChatEvent], None]:
    """Yield the waiting events (queued, busy, loading, retrying); the response goes into
    ``shared`` for the loop (and for ``aclose()`` from another task). A response that is not
    an event stream is read whole into ``shared.completion``."""
    response: Response | None = None
    if body is None and shared.resumer is not None:  # reattach: the server has the turn
        try:
            response = shared.response = await shared.resumer.reconnect(shared.offset)
        except ResumeUnsupported:
            raise ResumeError("this server has no resumable streams") from None
    else:
        opening = policies.open(request, body or b"", ticket, shared.resumer)
        async with aclosing(opening):
            async for item in opening:
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


def _failed(
    exc: TransportError | InferError, shared: _Shared, capped: bool, config: Config
) -> None:
    """The stream failed: our errors get the partial; a broken connection becomes a quiet
    end, a whole answer, or an error with the partial. Whatever the server wrote into the
    error (it may quote the request) never shows the API key."""
    try:
        if isinstance(exc, InferError):
            if exc.partial is None:
                exc.partial = shared.asm.partial(capped)
            raise exc
        _after_break(exc, shared, capped, config.stall_timeout)
    except InferError as error:
        hide_key(error, config.api_key)
        raise


def _after_break(exc: TransportError, shared: _Shared, capped: bool, stall: float | None) -> None:
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
        if shared.resumer is not None and shared.completion is None:
            # With X-Conversation-Id, closing the connection no longer stops the generation.
            await shared.resumer.cancel()
    finally:
        if slot is not None and ticket is not None:
            policies.slots.leave(slot, ticket)
