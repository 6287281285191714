"""The assembler: folds streamed ``data:`` payloads into events and one Completion.

Pure: no I/O, no clocks. Feed it each SSE ``data`` payload with :meth:`Assembler.push`; it
returns the events that payload stands for, and :meth:`Assembler.finish` gives the Completion.

Rules (the tests check each one):

1. Events of one payload come in this order: ``Progress`` (if ``prompt_progress``), then for the
   choice ``Reasoning``, ``Content``, one ``ToolCallDelta`` per tool-call entry. Empty or null
   text gives no event. When a piece for a new tool call arrives, the previous call is final:
   ``ToolCallDone`` for it comes before the new call's ``ToolCallDelta``; the remaining calls get
   their ``ToolCallDone`` after the payload that carries the finish reason.
2. The completion ``id`` is the first non-empty one (Azure sends ``""`` first).
   ``content``/``reasoning_content`` are the concatenation of the event texts (None if there was
   none). Thinking sent as ``reasoning`` (vLLM, Groq, OpenRouter) is ``Reasoning`` too, and
   ``reasoning_field`` remembers the name, so ``message()`` sends it back under it (a delta
   with both names counts ``reasoning_content`` only). A tool call's ``arguments`` is the
   concatenation of its pieces, kept as raw text.
   ``id`` and ``name`` come from the first piece that has them; a repeated ``id`` is kept once,
   and a repeated name replaces the old one (llama-server resends the full name when it grows).
   A piece without ``index`` continues the last call unless it carries a new ``id``; an
   ``index`` past the calls so far is the next call (a server numbering its calls its own
   way, such as Anthropic's, whose first call is 1), and the same number that call again. Fields a
   server adds to a tool-call entry are kept in ``ToolCall.extra`` and sent back next turn.
3. ``timings`` is the latest seen (the usage chunk after the finish chunk included); so is usage.
   Timings come with every chunk and are decoded only when asked for (the Completion, the
   reasoning tokens): malformed ones count as none, they are telemetry, not the answer.
4. ``reasoning_tokens``: the ``timings.predicted_n`` latest seen at the last payload that
   carried reasoning text (without timings, the number of such payloads). ``in_reasoning``
   is true after reasoning text, false after answer text or a tool-call piece.
5. ``finish`` raises ``StreamClosedEarlyError`` without a finish reason, ``ProtocolError`` if no
   payload carried an ``id`` or a tool call never got an ``id`` or ``name``.
6. ``push`` raises ``ProtocolError`` for text that is not a chunk object (JSON nested too
   deeply included), a finish reason other than stop/tool_calls/length, a choice index other
   than 0, a negative tool-call index, and data after ``[DONE]``; ``ServerError`` for
   an in-band ``{"error": ...}`` payload and for any ``event: error`` event (``ErrorData``;
   its message is the envelope's, else its own ``message``, else its text). Errors carry the
   partial Completion.
7. A payload is applied whole or not at all: one that fails leaves the state as it was, so an
   error's ``partial`` is exactly what the events returned so far add up to. Index and finish
   reason are checked before anything is applied; a payload that can still fail half-way
   (tool-call pieces, or a finish that closes a call) is applied with an undo record.
8. A choice's ``logprobs`` (asked for with ``top_logprobs``) go on the last text event of
   its payload (``Reasoning``, ``Content`` or ``ToolCallDelta``), with those of earlier
   payloads that gave no text; ``Completion.logprobs`` is all of them in order, then any
   left after the last text. A tool call keeps each piece's tokens with the piece's
   offsets, for its fields' confidence (``ToolCall.confidence``). Malformed logprobs count
   as none: they are telemetry, not the answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from .._types.cache import CacheReport
from .._types.completion import Completion, FinishReason, Timings, Usage
from .._types.errors import ProtocolError, ServerError, StreamClosedEarlyError
from .._types.events import ChatEvent, Content, Reasoning, ToolCallDelta, ToolCallDone
from .._types.logprobs import TokenLogprob, Tokens, field_confidence
from .._types.messages import ReasoningField, ToolCall
from .logprobs import decode_tokens
from .sse import ErrorData
from .wire import (
    ANY_DECODER,
    CHUNK_DECODER,
    ENTRY_KEYS_DECODER,
    RESPONSE_DECODER,
    TIMINGS_DECODER,
    TOOL_CALL_DECODER,
    WireChoice,
    WireChunk,
    WireDelta,
    WireError,
    WireMessage,
    WireToolCall,
    WireUsage,
)

__all__ = ["Assembler"]

_FINISH = {r.value: r for r in FinishReason}
_KNOWN_ENTRY_KEYS = frozenset({"index", "id", "type", "function"})
_DONE = frozenset({"[DONE]", b"[DONE]"})


_CallState = tuple[str | None, str | None, int, int, int, dict[str, Any], bool]


class _Call:
    """A tool call being assembled."""

    __slots__ = ("arguments", "done", "extra", "id", "name", "size", "tokens")

    def __init__(self) -> None:
        self.id: str | None = None
        self.name: str | None = None
        self.arguments: list[str] = []
        self.size = 0  # characters of argument text so far
        self.tokens: list[tuple[int, int, Tokens]] = []  # pieces with tokens: their offsets
        self.extra: dict[str, Any] = {}
        self.done = False

    def state(self) -> _CallState:
        pieces, tokens = len(self.arguments), len(self.tokens)
        return (self.id, self.name, pieces, self.size, tokens, self.extra, self.done)

    def restore(self, state: _CallState) -> None:
        self.id, self.name, pieces, self.size, tokens, self.extra, self.done = state
        del self.arguments[pieces:], self.tokens[tokens:]

    def build(self, index: int, raw: str | bytes = "") -> ToolCall:
        if not self.id or not self.name:
            missing = "id" if not self.id else "name"
            raise ProtocolError(f"tool call {index} never got an {missing}", raw)
        arguments = "".join(self.arguments)
        confidence = field_confidence(arguments, self.tokens) if self.tokens else None
        return ToolCall(self.id, self.name, arguments, self.extra, confidence)


class Assembler:
    """Folds one stream's ``data:`` payloads into events and a :class:`Completion`."""

    __slots__ = (
        "_calls",
        "_content",
        "_failed",
        "_finish",
        "_id",
        "_in_reasoning",
        "_logprobs",
        "_model",
        "_numbers",
        "_pending",
        "_reasoning",
        "_reasoning_count",
        "_reasoning_field",
        "_reasoning_timings",
        "_saved",
        "_seen",
        "_timings",
        "_top",
        "_usage",
        "is_done",
    )

    def __init__(self, top_logprobs: int | None = None) -> None:
        """``top_logprobs``: the alternatives per token the request asked for, when it
        asked for log-probabilities (more that arrive are dropped)."""
        self._top = top_logprobs
        self._logprobs: list[TokenLogprob] = []  # every token the events carried, in order
        self._pending: Tokens = ()  # tokens of payloads without text, for the next text
        self._id: str | None = None
        self._model: str | None = None
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._calls: list[_Call] = []
        self._numbers: dict[int, int] = {}  # a server's own call numbers -> ours (rule 2)
        self._finish: FinishReason | None = None
        self._timings: msgspec.Raw | None = None  # the latest, as sent (see rule 3)
        self._usage = Usage()
        self._reasoning_count = 0  # payloads with reasoning text
        self._reasoning_timings: msgspec.Raw | None = None  # the timings as of the last one
        self._reasoning_field: ReasoningField = "reasoning_content"  # the name it came under
        self._in_reasoning = False
        self.is_done = False
        """``[DONE]`` has arrived: the stream is over, whatever the connection does next. (An
        attribute, not a property: the stream reads it after every read.)"""
        self._failed = False
        self._seen = False
        # While a payload is applied with an undo record: each call it touched, as it was.
        self._saved: dict[int, _CallState] = {}

    # -- state ---------------------------------------------------------------------------
    @property
    def id(self) -> str | None:
        """The completion id (``chatcmpl-…``), once a payload has carried one."""
        return self._id

    @property
    def reasoning_tokens(self) -> int:
        """Tokens generated while the model was reasoning."""
        timings = _timings(self._reasoning_timings)
        return self._reasoning_count if timings is None else timings.predicted_n

    @property
    def in_reasoning(self) -> bool:
        """True while the latest text was reasoning."""
        return self._in_reasoning

    @property
    def is_finished(self) -> bool:
        """A finish reason has arrived."""
        return self._finish is not None

    @property
    def saw_output(self) -> bool:
        """Any text or tool-call piece has arrived."""
        return bool(self._content or self._reasoning or self._calls)

    def call_tokens(self, index: int) -> list[tuple[int, int, Tokens]]:
        """Tool call ``index``'s pieces that carried tokens: ``(start, end, tokens)``, the
        piece's offsets in the call's argument text."""
        return self._calls[index].tokens if index < len(self._calls) else []

    def tool_calls_so_far(self) -> list[tuple[str | None, str, bool]]:
        """Each tool call so far: its name, its argument text, and whether it is complete."""
        return [(c.name, "".join(c.arguments), c.done) for c in self._calls]

    # -- feeding -------------------------------------------------------------------------
    def push(self, data: str | bytes) -> list[ChatEvent]:
        """Take one ``data:`` payload (JSON text) and return the events it stands for."""
        if self._failed or self.is_done:
            raise self._refused(data)
        try:
            chunk = CHUNK_DECODER.decode(data)
        except (msgspec.DecodeError, RecursionError) as exc:
            return self._not_a_chunk(data, exc)
        choices = chunk.choices
        if choices is not None and len(choices) == 1 and chunk.prompt_progress is None:
            # The common case, inline: one plain text delta (a token of the answer or of
            # the reasoning); anything else takes the general path.
            choice = choices[0]
            delta = choice.delta
            if (
                choice.index == 0
                and choice.finish_reason is None
                and delta is not None
                and not delta.tool_calls
                and delta.reasoning is None
                and chunk.error is None
                and chunk.usage is None
                and not choice.logprobs
                and data.__class__ is not ErrorData
            ):
                text = delta.content
                thought = delta.reasoning_content
                if text and thought is None:
                    self._note(chunk)
                    self._content.append(text)
                    self._in_reasoning = False
                    return [Content(text)]
                if thought and text is None:
                    self._note(chunk)
                    self._reasoning.append(thought)
                    self._in_reasoning = True
                    self._reasoning_count += 1
                    self._reasoning_timings = self._timings
                    return [Reasoning(thought)]
        return self._push(chunk, choices or (), data)

    def _note(self, chunk: WireChunk) -> None:
        """What every payload that is applied tells about the stream: the first id, the
        latest model and timings."""
        self._seen = True
        if not self._id:  # "" is no id: Azure's content-filter chunk comes first under id ""
            self._id = chunk.id
        if chunk.model is not None:
            self._model = chunk.model
        if chunk.timings:
            self._timings = chunk.timings

    def _refused(self, data: str | bytes) -> ProtocolError:
        why = "push after an error" if self._failed else "data after [DONE]"
        return ProtocolError(why, data, partial=self.partial())

    def _not_a_chunk(self, data: str | bytes, exc: Exception) -> list[ChatEvent]:
        """A payload that is not a chunk object: ``[DONE]`` ends the stream, anything else
        is a ``ProtocolError``."""
        if isinstance(data, ErrorData):
            raise self._fail(_error_event(data))
        if data.strip() in _DONE:
            self.is_done = True
            return []
        error = ProtocolError(f"not a chat completion chunk ({_why(exc)})", data)
        raise self._fail(error) from None

    def _push(
        self, chunk: WireChunk, choices: Sequence[WireChoice], data: str | bytes
    ) -> list[ChatEvent]:
        """Any payload: checked first, applied whole or not at all."""
        if chunk.error is not None:
            raise self._fail(_server_error(chunk.error, data))
        if isinstance(data, ErrorData):  # ``event: error`` without the error envelope
            raise self._fail(_error_event(data))
        try:
            risky = self._check(choices, data)
        except ProtocolError as exc:
            raise self._fail(exc) from None
        if risky:
            return self._push_undoable(chunk, choices, data)
        return self._apply_chunk(chunk, choices, data)

    def _apply_chunk(
        self, chunk: WireChunk, choices: Sequence[WireChoice], data: str | bytes
    ) -> list[ChatEvent]:
        self._note(chunk)
        if chunk.usage is not None:
            self._usage = _usage(chunk.usage)
        events: list[ChatEvent] = []
        if chunk.prompt_progress is not None:
            events.append(chunk.prompt_progress)
        for choice in choices:
            self._choice(choice.finish_reason, choice.delta, events, data, False, choice.logprobs)
        return events

    def _push_undoable(
        self, chunk: WireChunk, choices: Sequence[WireChoice], data: str | bytes
    ) -> list[ChatEvent]:
        """Apply a payload that may still fail half-way; on failure, undo what it did."""
        before = (
            self._id,
            self._model,
            self._timings,
            self._usage,
            self._seen,
            len(self._content),
            len(self._reasoning),
            self._in_reasoning,
            self._reasoning_count,
            self._reasoning_timings,
            self._reasoning_field,
            self._finish,
            len(self._calls),
            dict(self._numbers),
            len(self._logprobs),
            self._pending,
        )
        self._saved = {}
        try:
            return self._apply_chunk(chunk, choices, data)
        except ProtocolError as exc:
            (
                self._id,
                self._model,
                self._timings,
                self._usage,
                self._seen,
                content,
                reasoning,
                self._in_reasoning,
                self._reasoning_count,
                self._reasoning_timings,
                self._reasoning_field,
                self._finish,
                calls,
                self._numbers,
                tokens,
                self._pending,
            ) = before
            del self._content[content:], self._reasoning[reasoning:], self._calls[calls:]
            del self._logprobs[tokens:]
            for index, state in self._saved.items():
                if index < calls:
                    self._calls[index].restore(state)
            raise self._fail(exc) from None
        finally:
            self._saved = {}

    def _check(self, choices: Sequence[WireChoice], data: str | bytes) -> bool:
        """What can be checked before a payload is applied; True when applying it may still
        fail (it carries tool-call pieces, or a finish reason that closes a call)."""
        risky = False
        for choice in choices:
            if choice.index != 0:
                raise ProtocolError("only n=1 is supported", data)
            reason = choice.finish_reason
            if reason is not None:
                if reason not in _FINISH:
                    raise ProtocolError(f"unknown finish_reason {reason!r}", data)
                risky = risky or bool(self._calls)
            part = choice.delta
            if part is not None and part.tool_calls:
                risky = True
        return risky

    @classmethod
    def from_response(cls, body: str | bytes, top_logprobs: int | None = None) -> Completion:
        """Decode a non-streamed ``chat.completion`` body through the same rules (with
        ``top_logprobs`` as for a stream). Nothing was shown of it, so its errors carry no
        partial."""
        self = cls(top_logprobs)
        try:
            response = RESPONSE_DECODER.decode(body)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise ProtocolError(f"not a chat completion ({_why(exc)})", body) from None
        if response.error is not None:
            raise _server_error(response.error, body)
        choices = response.choices or ()
        for choice in choices:
            if choice.index != 0:
                raise ProtocolError("only n=1 is supported", body)
            if choice.finish_reason is not None and choice.finish_reason not in _FINISH:
                raise ProtocolError(f"unknown finish_reason {choice.finish_reason!r}", body)
        self._seen = True
        self._id = response.id
        self._model = response.model
        self._timings = response.timings or None
        if response.usage is not None:
            self._usage = _usage(response.usage)
        events: list[ChatEvent] = []
        for choice in choices:
            if choice.logprobs:
                self._logprobs.extend(decode_tokens(choice.logprobs, self._top))
            self._choice(choice.finish_reason, choice.message, events, body, True)
        return self.finish()

    def finish(self, thinking_capped: bool = False) -> Completion:
        """The Completion. Raises if the stream was not complete (see rule 5)."""
        if self._finish is None:
            raise StreamClosedEarlyError(
                "the stream ended before a finish reason", partial=self.partial(thinking_capped)
            )
        if not self._id:
            raise ProtocolError("no chunk carried a completion id", partial=self.partial())
        calls = tuple(call.build(i) for i, call in enumerate(self._calls))
        return self._completion(calls, thinking_capped)

    def partial(self, thinking_capped: bool = False) -> Completion | None:
        """What has arrived so far, without the completeness checks of :meth:`finish`;
        None when no chunk has arrived at all."""
        if not self._seen:
            return None
        calls = tuple(
            ToolCall(c.id or "", c.name or "", "".join(c.arguments), c.extra) for c in self._calls
        )
        return self._completion(calls, thinking_capped)

    # -- internals -----------------------------------------------------------------------
    def _completion(self, calls: tuple[ToolCall, ...], thinking_capped: bool) -> Completion:
        timings = _timings(self._timings)
        cache = (
            None
            if timings is None
            else CacheReport(timings.prompt_n + timings.cache_n, timings.cache_n)
        )
        return Completion(
            id=self._id or "",
            model=self._model,
            content="".join(self._content) if self._content else None,
            reasoning_content="".join(self._reasoning) if self._reasoning else None,
            tool_calls=calls,
            finish_reason=self._finish,
            timings=timings,
            usage=self._usage,
            reasoning_tokens=self.reasoning_tokens,
            thinking_capped=thinking_capped,
            reasoning_field=self._reasoning_field,
            cache=cache,
            logprobs=tuple(self._logprobs) + self._pending
            if self._logprobs or self._pending
            else None,
        )

    def _fail(self, error: ProtocolError | ServerError) -> ProtocolError | ServerError:
        self._failed = True
        error.partial = self.partial()
        return error

    def _choice(
        self,
        finish_reason: str | None,
        part: WireDelta | WireMessage | None,
        events: list[ChatEvent],
        data: str | bytes,
        positional: bool,
        logprobs: msgspec.Raw | None = None,
    ) -> None:
        """One (checked) choice: a stream's ``delta`` or a whole response's ``message``."""
        mark = len(events)
        if part is not None:
            thought = part.reasoning_content
            if thought is None and part.reasoning is not None:
                thought = part.reasoning
                self._reasoning_field = "reasoning"
            self._apply(
                thought,
                part.content,
                part.tool_calls,
                events,
                data,
                positional=positional,
            )
        if logprobs:
            self._attach(events, mark, decode_tokens(logprobs, self._top))
        if finish_reason is not None:
            self._finish = _FINISH[finish_reason]
            self._close_calls(events, data)

    def _apply(
        self,
        reasoning: str | None,
        content: str | None,
        tool_calls: list[msgspec.Raw] | None,
        events: list[ChatEvent],
        data: str | bytes,
        *,
        positional: bool,
    ) -> None:
        if reasoning:
            self._reasoning.append(reasoning)
            self._in_reasoning = True
            self._reasoning_count += 1
            self._reasoning_timings = self._timings
            events.append(Reasoning(reasoning))
        if content:
            self._content.append(content)
            self._in_reasoning = False
            events.append(Content(content))
        if tool_calls:
            self._in_reasoning = False
            for position, raw in enumerate(tool_calls):
                self._tool_piece(raw, position if positional else None, events, data)

    def _attach(self, events: list[ChatEvent], mark: int, tokens: Tokens) -> None:
        """A payload's tokens go on the last text event it gave (``events[mark:]``), with
        those of earlier payloads that gave none; for a tool call's piece they are also
        kept with the piece's offsets, for the call's field confidence."""
        if self._pending:
            tokens, self._pending = self._pending + tokens, ()
        if len(events) == mark:
            self._pending = tokens
            return
        event = events[-1]  # Reasoning, Content or a ToolCallDelta: _apply adds them last
        events[-1] = msgspec.structs.replace(event, logprobs=tokens)
        self._logprobs += tokens
        if type(event) is ToolCallDelta and event.arguments:
            call = self._calls[event.index]
            call.tokens.append((call.size - len(event.arguments), call.size, tokens))

    def _tool_piece(
        self, raw: msgspec.Raw, position: int | None, events: list[ChatEvent], data: str | bytes
    ) -> None:
        try:
            piece = TOOL_CALL_DECODER.decode(raw)
            keys = ENTRY_KEYS_DECODER.decode(raw)
            extra = None
            if len(keys) > len(_KNOWN_ENTRY_KEYS & keys.keys()):  # fields a server added
                extra = {
                    key: ANY_DECODER.decode(value)
                    for key, value in keys.items()
                    if key not in _KNOWN_ENTRY_KEYS
                }
        except (msgspec.DecodeError, RecursionError) as exc:
            raise ProtocolError(f"bad tool call entry ({_why(exc)})", data) from None
        calls = self._calls
        index = self._index(piece, position, data)
        if index == len(calls):
            if calls and not calls[-1].done:
                self._close_call(len(calls) - 1, events, data)
            calls.append(_Call())
        call = calls[index]
        if index not in self._saved:
            self._saved[index] = call.state()
        function = piece.function
        name = function.name if function is not None else None
        arguments = (function.arguments if function is not None else None) or ""
        if piece.id and call.id is None:
            call.id = piece.id
        if name:
            call.name = name
        if arguments:
            call.arguments.append(arguments)
            call.size += len(arguments)
        if extra:  # a new dict: a partial already handed out keeps the old one unchanged
            call.extra = {**call.extra, **extra}
        events.append(ToolCallDelta(index, piece.id, name, arguments))

    def _index(self, piece: WireToolCall, position: int | None, data: str | bytes) -> int:
        """The call a piece belongs to (``len(calls)``: a new one)."""
        calls = self._calls
        index = piece.index if piece.index is not None else position
        if index is None:  # seed rule: a new id means a new call
            new = not calls or (piece.id is not None and piece.id != calls[-1].id)
            return len(calls) if new else len(calls) - 1
        if index > len(calls) or self._numbers:
            return self._renumbered(index, data)
        if index < 0:
            raise ProtocolError(f"tool call index {index} is negative", data)
        return index

    def _renumbered(self, number: int, data: str | bytes) -> int:
        """A server that numbers its calls its own way (Anthropic's OpenAI endpoint: the
        first call is 1, after the text block 0): each number it sends is the next call the
        first time, and that call again after. The events keep our own 0, 1, 2 ..."""
        if number < 0:
            raise ProtocolError(f"tool call index {number} is negative", data)
        numbers = self._numbers
        if not numbers:  # the calls so far were numbered as we number them
            numbers.update((i, i) for i in range(len(self._calls)))
        return numbers.setdefault(number, len(self._calls))

    def _close_call(self, index: int, events: list[ChatEvent], data: str | bytes) -> None:
        call = self._calls[index]
        built = call.build(index, data)
        if index not in self._saved:
            self._saved[index] = call.state()
        call.done = True
        events.append(ToolCallDone(index, built))

    def _close_calls(self, events: list[ChatEvent], data: str | bytes) -> None:
        for index, call in enumerate(self._calls):
            if not call.done:
                self._close_call(index, events, data)


def _usage(wire: WireUsage) -> Usage:
    details = wire.prompt_tokens_details
    return Usage(
        prompt_tokens=wire.prompt_tokens,
        completion_tokens=wire.completion_tokens,
        cached_tokens=details.cached_tokens if details is not None else None,
    )


def _timings(raw: msgspec.Raw | None) -> Timings | None:
    """The server's timings from their JSON as sent (see rule 3): None when there are none,
    or when they are not a timings object."""
    if raw is None:
        return None
    try:
        return TIMINGS_DECODER.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return None


def _why(exc: Exception) -> str:
    """The decoder's reason; msgspec raises RecursionError for JSON nested too deeply."""
    if isinstance(exc, RecursionError):
        return "JSON nested too deeply"
    return f"{exc}"


def _error_event(data: ErrorData) -> ServerError:
    """An ``event: error`` whose data is not ``{"error": ...}``: its text is the message."""
    try:
        body = ANY_DECODER.decode(data)
    except (msgspec.DecodeError, RecursionError):
        body = None
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        code = body.get("code")
        kind = body.get("type")
        return ServerError(
            body["message"],
            code if isinstance(code, int | str) else None,
            kind if isinstance(kind, str) else None,
        )
    return ServerError(data.decode("utf-8", "replace"))


def _server_error(error: WireError | str, data: str | bytes) -> ServerError:
    if isinstance(error, str):
        return ServerError(error)
    return ServerError(error.message, error.code, error.type)
