"""Live tool arguments inside a chat stream: routes tool-call pieces to ArgumentStreams.

Pure: it takes the events the assembler produced and returns them with ``ArgumentDelta``
events inserted after each ``ToolCallDelta`` whose call is decoded live. Calls are decoded
when the stream was asked for events of that tool (``live_arguments``), or when the user took
the call's :class:`ArgumentStream` with ``stream.arguments(...)``.

A malformed argument text never ends the chat: that call's ArgumentStream fails (its handles
raise ``ProtocolError``), its events stop, and the raw pieces keep flowing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from .._types.errors import ProtocolError
from .._types.events import ArgumentDelta, ChatEvent, ToolCallDelta, ToolCallDone
from .._types.logprobs import Confidence, Tokens, field_confidence
from .stream import ArgumentStream, FieldText, NestedText

__all__ = ["LiveArguments"]


class _Live:
    __slots__ = ("args", "emit", "name")

    def __init__(self, args: ArgumentStream, name: str, emit: bool) -> None:
        self.args = args
        self.name = name
        self.emit = emit


CallState = tuple[str | None, str, bool]
"""What the assembler knows of one call: its name, its argument text so far, whether done."""


class LiveArguments:
    """The live argument decoders of one chat stream.

    ``calls`` gives the assembler's view of the calls so far, for calls that started before
    anyone asked to decode them.
    """

    def __init__(
        self,
        calls: Callable[[], list[CallState]],
        tools: bool | Iterable[str] = False,
        *,
        lenient: bool = True,
        tokens: Callable[[int], list[tuple[int, int, Tokens]]] | None = None,
    ) -> None:
        self._snapshot = calls
        self._tokens = tokens  # a call's pieces with tokens (Assembler.call_tokens)
        self._all = tools is True
        self._tools = frozenset(()) if isinstance(tools, bool) else frozenset(tools)
        self._lenient = lenient
        self._calls: dict[int, _Live] = {}  # calls being decoded, by index
        self._count = len(calls())  # calls seen so far
        self._handed: set[int] = set()  # calls whose ArgumentStream the user holds
        self._by_index: dict[int, ArgumentStream] = {}  # claimed before the call started
        self._by_name: list[tuple[str, ArgumentStream]] = []  # claims waiting for a call

    def _new(self) -> ArgumentStream:
        args = ArgumentStream(lenient=self._lenient)
        args._nested_events = True
        return args

    def claim(self, index: int | None = None, tool: str | None = None) -> ArgumentStream:
        """The ArgumentStream of call ``index``, or of the next call of ``tool`` nobody
        claimed yet. A call that already started is caught up with what arrived so far."""
        if index is None and tool is None:
            raise ValueError("arguments() needs an index or a tool name")
        if index is not None and index >= self._count:
            return self._by_index.setdefault(index, self._new())
        calls = self._snapshot()
        for i, (name, text, done) in enumerate(calls):
            if (i == index) or (index is None and name == tool and i not in self._handed):
                self._handed.add(i)
                live = self._calls.get(i)
                if live is None:
                    live = self._calls[i] = _Live(self._new(), name or "", False)
                    self._run(live, i, text, [])
                    if done:
                        self._run(live, i, None, [])
                return live.args
        assert tool is not None
        args = self._new()
        self._by_name.append((tool, args))
        return args

    def process(self, events: list[ChatEvent]) -> list[ChatEvent]:
        """Insert ``ArgumentDelta`` events for the decoded calls."""
        if not any(isinstance(e, (ToolCallDelta, ToolCallDone)) for e in events):
            return events
        out: list[ChatEvent] = []
        for event in events:
            out.append(event)
            if isinstance(event, ToolCallDelta):
                self._piece(event, out)
            elif isinstance(event, ToolCallDone):
                live = self._calls.get(event.index)
                if live is not None:
                    self._run(live, event.index, None, out)
        return out

    def abort(self, reason: str) -> None:
        """The chat ended without completing these calls: fail their open handles."""
        streams = [live.args for live in self._calls.values()]
        streams += self._by_index.values()
        streams += [args for _, args in self._by_name]
        for args in streams:
            args.abort(reason)

    # -- internals -------------------------------------------------------------------------------
    def _piece(self, event: ToolCallDelta, out: list[ChatEvent]) -> None:
        index = event.index
        if index == self._count:  # a new call
            self._count += 1
            name = event.name or ""
            claimed = self._by_index.pop(index, None)
            if claimed is None:
                for n, (tool, args) in enumerate(self._by_name):
                    if tool == name:
                        claimed = args
                        del self._by_name[n]
                        break
            if claimed is not None:
                self._handed.add(index)
            if claimed is not None or self._all or name in self._tools:
                self._calls[index] = _Live(
                    claimed or self._new(), name, self._all or name in self._tools
                )
        live = self._calls.get(index)
        if live is not None and event.arguments:
            self._run(live, index, event.arguments, out, event.logprobs)

    def _confidence(self, live: _Live, index: int, field: str) -> Confidence | None:
        """A top-level field's confidence, as ``ToolCall.confidence`` will have it."""
        pieces = self._tokens(index) if self._tokens is not None else None
        if not pieces:
            return None
        found = field_confidence(live.args.raw, pieces, whole=False)
        return None if found is None else found.get(field)

    def _run(
        self,
        live: _Live,
        index: int,
        fragment: str | None,
        out: list[ChatEvent],
        tokens: Tokens | None = None,
    ) -> None:
        try:
            pieces: list[FieldText | NestedText] = live.args._pieces(fragment)
        except ProtocolError:
            return  # the call's handles now raise; the raw pieces keep flowing
        if live.emit:
            name = live.name
            for piece in pieces:
                if isinstance(piece, FieldText):
                    field = piece.field
                    sure = self._confidence(live, index, field) if piece.done else None
                    out.append(
                        ArgumentDelta(index, name, field, piece.text, piece.done, (), tokens, sure)
                    )
                else:  # a string inside a field: its path
                    path = piece.path
                    field = str(path[0])
                    out.append(
                        ArgumentDelta(index, name, field, piece.text, piece.done, path, tokens)
                    )
