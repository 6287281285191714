"""The body of a streamed answer: each read through SSE framing, the assembler and the turn's
processors into events (the hot path: one call per read); the thinking budget between
payloads; the end of the stream; a whole (non-streamed) answer; the typed output.

Events of a read are returned before whatever ended the stream in that read (an error, the
end of the body), so the events never depend on how the bytes were split into reads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from .._arguments.output import OutputDecoder
from .._protocol.assembler import Assembler
from .._protocol.sse import SSEDecoder
from .._types.completion import Completion, FinishReason
from .._types.errors import InferError, OutputError, ProtocolError
from .._types.events import ChatEvent, ThinkingCapped
from .._types.typed import OutputInvalid, OutputType
from .budget import CONTROL_PATH, accepted, control_body
from .commands import READ, Call, Drain, ReadAll
from .failures import typed_error
from .phase import Context, Phase

__all__ = ["Breaks", "Streaming", "WholeBody", "settle"]

END_GRACE = 0.1  # seconds to wait for the body's end after [DONE]

Breaks = Callable[["Streaming", str, str], "Phase | None"]
"""How a broken stream is picked up: ``(streaming, kind, message)`` -> the resuming phase,
or None when it cannot be (the break then ends the turn)."""


class Streaming(Phase):
    """Reading the body of a streamed answer. ``after`` is set when a read ended this phase
    (the machine moves on once the read's events are out)."""

    __slots__ = ("_asm", "_at", "_breaks", "_pending", "_processors", "after", "decoder", "tokens")
    name = "streaming"

    def __init__(self, ctx: Context, breaks: Breaks | None) -> None:
        super().__init__(ctx, READ)
        self.decoder = SSEDecoder(ctx.config.max_event_bytes)
        self._asm = ctx.asm
        self._processors = ctx.plan.processors  # the list itself: the driver may add to it
        self._breaks = breaks
        self.after: Phase | None = None
        self._pending: list[bytes] = []  # payloads of a read not pushed yet (a budget call)
        self._at = 0
        self.tokens = 0  # reasoning tokens when the end of the reasoning was asked for

    def data(self, chunk: bytes) -> list[ChatEvent]:
        ctx = self.ctx
        ctx.offset += len(chunk)
        try:
            payloads = self.decoder.feed(chunk) if chunk else self.decoder.flush()
        except InferError as exc:  # an event over max_event_bytes
            self._end(chunk, exc)
            return []
        if ctx.budget is not None:
            self._pending, self._at = payloads, 0
            return self._push(chunk)
        asm = self._asm
        events: list[ChatEvent] = []
        failure: InferError | None = None
        try:
            for payload in payloads:
                got = asm.push(payload)
                if events:
                    events += got
                else:
                    events = got
        except InferError as exc:
            if not asm.is_done:  # after [DONE] nothing counts: a later read is never taken
                failure = exc
        if self._processors:
            for process in self._processors:
                events = process(events)
        if failure is not None or not chunk or asm.is_done:
            self._end(chunk, failure)
        return events

    def _push(self, chunk: bytes) -> list[ChatEvent]:
        """The read's payloads one at a time, the budget checked after each: it may ask the
        server to end the reasoning (``Capping``, the rest of the read waits) or stop."""
        ctx = self.ctx
        asm, budget, pending = ctx.asm, ctx.budget, self._pending
        assert budget is not None
        events: list[ChatEvent] = []
        failure: InferError | None = None
        while self._at < len(pending):
            payload = pending[self._at]
            self._at += 1
            before = len(events)
            try:
                events += asm.push(payload)
            except InferError as exc:
                failure = None if asm.is_done else exc
                break
            verdict = budget.after(asm)
            if verdict == "ended":  # the server's own budget: said before what followed it
                self.tokens = asm.reasoning_tokens
                events.insert(before, ThinkingCapped(self.tokens))
            elif verdict == "over":
                failure = budget.overrun(asm)
                break
            if verdict == "ask":
                self.tokens = asm.reasoning_tokens
                self.after = Capping(ctx, self, chunk)
                return self._process(events)
        events = self._process(events)
        if failure is not None or not chunk or asm.is_done:
            self._end(chunk, failure)
        return events

    def go_on(self, chunk: bytes) -> list[ChatEvent]:
        """After the budget call: the rest of the read."""
        self.after = None
        return self._push(chunk)

    def _process(self, events: list[ChatEvent]) -> list[ChatEvent]:
        for process in self.ctx.plan.processors:
            events = process(events)
        return events

    def _end(self, chunk: bytes, failure: InferError | None) -> None:
        ctx = self.ctx
        if failure is not None:
            failure.partial = ctx.partial()  # the partial is the turn's: the cap included
            self.after = ctx.fail(failure)
        elif not chunk:  # the body ended
            self.after = settle(ctx, ctx.asm)
        else:  # [DONE]: take the rest of the body, then finish
            self.after = Draining(ctx)

    def failed(self, kind: str, message: str) -> Phase:
        """The connection broke: resume, or a whole answer (only the usage chunk or
        ``[DONE]`` was lost), or an error with the partial."""
        ctx = self.ctx
        if self._breaks is not None:
            resuming = self._breaks(self, kind, message)
            if resuming is not None:
                return resuming
        if ctx.asm.is_finished:
            return settle(ctx, ctx.asm)
        stall = ctx.config.stall_timeout
        return ctx.fail(typed_error(kind, message, "stream", timeout=stall, partial=ctx.partial()))

    def resumed(self) -> Phase:
        """The stream goes on from a new response, where it was."""
        self.command = READ
        return self


class Capping(Phase):
    """The budget is spent: ``POST /v1/chat/completions/control`` ends the reasoning;
    ``ThinkingCapped`` only when the server accepted. Then the rest of the read."""

    __slots__ = ("_chunk", "_streaming")
    name = "ending the reasoning"

    def __init__(self, ctx: Context, streaming: Streaming, chunk: bytes) -> None:
        body = control_body(ctx.asm.id or "", ctx.model)
        limit = ctx.config.max_body_bytes
        super().__init__(ctx, Call("POST", CONTROL_PATH, body, ctx.affinity, limit=limit))
        self._streaming = streaming
        self._chunk = chunk

    def answered(self, status: int, data: bytes) -> Phase:
        ctx = self.ctx
        if accepted(status, data):
            assert ctx.budget is not None
            ctx.budget.capped = True
            ctx.events.append(ThinkingCapped(self._streaming.tokens))
        return self._go_on()

    def failed(self, kind: str, message: str) -> Phase:
        return self._go_on()  # not capped: the grace still bounds the reasoning

    def _go_on(self) -> Phase:
        streaming = self._streaming
        ctx = self.ctx
        ctx.events += streaming.go_on(self._chunk)
        return streaming.after or streaming


class Draining(Phase):
    """``[DONE]`` came: the body's end is normally in the same read or the next; take it
    (so the HTTP stack can pool the connection), but never wait long on a server that
    keeps the connection open. Then the Completion."""

    __slots__ = ()
    name = "draining"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx, Drain(END_GRACE))

    def performed(self) -> Phase:
        self.ctx.open = False  # the driver released the response
        return settle(self.ctx, self.ctx.asm)


class WholeBody(Phase):
    """A 2xx answer that is not an event stream: a whole ``chat.completion`` body."""

    __slots__ = ("_status",)
    name = "reading a whole answer"

    def __init__(self, ctx: Context, status: int) -> None:
        super().__init__(ctx, ReadAll(ctx.config.max_body_bytes))
        self._status = status

    def body(self, data: bytes, truncated: bool) -> Phase:
        ctx = self.ctx
        ctx.open = False
        if truncated:
            limit = ctx.config.max_body_bytes
            why = f"the body of an HTTP {self._status} answer is longer than max_body_bytes"
            return ctx.fail(ProtocolError(f"{why} ({limit} bytes)", data))
        try:
            completion = Assembler.from_response(data, ctx.request.top_logprobs)
        except InferError as exc:
            return ctx.fail(exc)
        return _validated(ctx, completion)

    def failed(self, kind: str, message: str) -> Phase:
        ctx = self.ctx
        ctx.open = False
        return ctx.fail(typed_error(kind, message, "body", timeout=ctx.config.stall_timeout))


def settle(ctx: Context, asm: Assembler) -> Phase:
    """The stream is over: its Completion (``StreamClosedEarlyError`` without a finish
    reason), validated when a typed output was asked for."""
    try:
        completion = asm.finish(ctx.capped)
    except InferError as exc:
        exc.partial = ctx.partial()
        return ctx.fail(exc)
    return _validated(ctx, completion)


def _validated(ctx: Context, completion: Completion) -> Phase:
    plan = ctx.plan
    if plan.output is None:
        return ctx.finish(completion)
    try:
        return ctx.finish(_with_output(completion, plan.output, plan.decoder))
    except OutputError as exc:
        return ctx.fail(exc)


def _with_output(
    completion: Completion, spec: OutputType[Any], decoder: OutputDecoder | None
) -> Completion:
    """The Completion with its validated output, or :class:`OutputError` (with the raw text,
    the reason and the partial value)."""
    text = completion.content or ""
    if decoder is None:
        decoder = OutputDecoder()
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
    return msgspec.structs.replace(completion, output=value)
