"""A tool box and the agent loop that runs it.

``Tools([fn, ...])`` makes each function a :class:`~llamaclient.ToolSchema` and runs a call
by its name; whatever goes wrong (an unknown name, arguments that do not fit, the tool's own
exception) becomes the text of its result, for the model to read. :func:`run_tools` is the
loop of ``docs/agent-loop.md`` as one object, a :class:`ToolRun`: each call starts the moment
its ``ToolCallDone`` arrives, the results go back in the order of the calls, the assistant
turn is echoed exactly, and the run is bounded by its turns and by the tokens it generates.
"""

from __future__ import annotations

import enum
import functools
import inspect
import re
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import msgspec

from ._stream import ChatStream
from ._types.completion import Completion, FinishReason, Usage
from ._types.events import ChatEvent, ToolCallDone
from ._types.messages import ChatMessage, ToolCall, ToolMessage, ToolSchema
from ._types.request import ChatRequest
from ._types.typed import OutputInvalid, OutputType, function_type

if TYPE_CHECKING:
    from types import TracebackType

    from anyio.abc import TaskGroup

    from ._types.config import Config

__all__ = ["RunOutcome", "ToolResult", "ToolRun", "Tools", "run_tools"]

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what OpenAI-style servers take as a tool name
_REDACTED = "***"


class _Tool:
    """One function of the box: its parameters (validated before it runs) and how it runs."""

    __slots__ = ("fn", "is_async", "spec")

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.spec: OutputType[Any] = function_type(fn)[0]
        self.is_async = inspect.iscoroutinefunction(fn)


class Tools:
    """A tool box: ``Tools([get_weather, async_search, ...])``.

    ``schemas`` are the functions as :class:`~llamaclient.ToolSchema`
    (``ToolSchema.from_function``: the name, the docstring without its ``Args:`` section,
    the parameters from the type hints, a pydantic model parameter through its model, each
    parameter's description from ``Args:``). ``await tools.run(call)`` runs a call. An async
    function runs on the event loop; a plain one in a worker thread (``threads=False``: on
    the loop itself, for functions that never block). A function that cannot be a tool (no
    name, ``*args``, a type msgspec cannot describe) or two of one name: ``ValueError``.
    """

    __slots__ = ("_tools", "schemas", "threads")

    def __init__(self, functions: Iterable[Callable[..., Any]], *, threads: bool = True) -> None:
        tools: dict[str, _Tool] = {}
        schemas: list[ToolSchema] = []
        for fn in functions:
            name = getattr(fn, "__name__", "")
            if not _NAME.match(name):
                raise ValueError(f"a tool needs a name of 1-64 letters, digits, _ or -: {fn!r}")
            if name in tools:
                raise ValueError(f"two tools are named {name!r}")
            try:
                schemas.append(ToolSchema.from_function(fn))
                tools[name] = _Tool(fn)
            except (TypeError, NameError) as exc:  # a hint no schema describes, or unresolved
                raise ValueError(f"{name} cannot be a tool: {exc}") from None
        self._tools = tools
        self.schemas: tuple[ToolSchema, ...] = tuple(schemas)
        self.threads = threads

    def __repr__(self) -> str:
        return f"Tools({list(self._tools)!r})"

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    @property
    def names(self) -> tuple[str, ...]:
        """The tools' names, in the order given."""
        return tuple(self._tools)

    async def run(self, call: ToolCall) -> ToolMessage:
        """The result of ``call`` as the :class:`~llamaclient.ToolMessage` that answers it
        (``name`` is the tool's). Never raises for the tool's own failure: a tool it does not
        have, arguments that do not fit the function (the validation message, with the
        path), or the exception the function raised (its type and message, never a
        traceback) are the result's text, starting ``error:``. A return value that is not a
        ``str`` goes back as JSON (a pydantic model through ``model_dump``)."""
        message, _ = await self._answer(call, ())
        return message

    async def _answer(self, call: ToolCall, redact: Sequence[str]) -> tuple[ToolMessage, bool]:
        """:meth:`run`, and whether the call failed; ``redact``: strings never shown in an
        error's text (a run's API keys)."""
        text, failed = await self._text(call)
        if failed:
            for secret in redact:
                text = text.replace(secret, _REDACTED)
        return ToolMessage(call.id, text, name=call.name), failed

    async def _text(self, call: ToolCall) -> tuple[str, bool]:
        tool = self._tools.get(call.name)
        if tool is None:
            names = ", ".join(self._tools) or "none"
            return f"error: there is no tool named {call.name!r} (the tools: {names})", True
        try:  # validated here, before the function runs: its own errors are not "arguments"
            params = tool.spec.from_json(call.arguments if call.arguments.strip() else "{}")
        except OutputInvalid as exc:
            return f"error: the arguments do not fit {call.name}: {exc}", True
        try:
            return _as_text(await self._call(tool, msgspec.structs.asdict(params))), False
        except Exception as exc:  # the tool's failure is the model's to read, not a crash
            return f"error: {_said(exc)}", True

    async def _call(self, tool: _Tool, kwargs: dict[str, Any]) -> Any:
        if tool.is_async:
            return await tool.fn(**kwargs)
        if self.threads:  # a cancelled run does not wait for a thread it cannot stop
            result = await anyio.to_thread.run_sync(
                functools.partial(tool.fn, **kwargs), abandon_on_cancel=True
            )
        else:
            result = tool.fn(**kwargs)
        return await result if inspect.isawaitable(result) else result


def _said(exc: BaseException) -> str:
    """An exception as the model reads it: its type and message (no traceback, no locals)."""
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return msgspec.json.encode(value, enc_hook=_dump).decode()


def _dump(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)  # a pydantic model, without importing pydantic
    if callable(dump):
        return dump(mode="json")
    raise TypeError(f"a {type(value).__name__} is not JSON")


class RunOutcome(enum.StrEnum):
    """How a :class:`ToolRun` ended (``run.outcome``)."""

    ANSWERED = "answered"
    """The model's turn called no tool: ``run.completion`` is the answer."""
    MAX_TURNS = "max_turns"
    """The last turn ``max_turns`` allows called tools; their results are in ``run.messages``."""
    MAX_TOKENS = "max_tokens"
    """The run generated ``max_tokens_total`` tokens; what it had is in ``run.messages``."""


class ToolResult(msgspec.Struct, frozen=True):
    """A tool call's result, as the run sends it back: call ``index`` of turn ``turn``
    (both from 0), the ``call``, the :class:`~llamaclient.ToolMessage` that answers it, and
    whether it ``failed`` (an unknown tool, arguments that did not fit, an exception)."""

    turn: int
    index: int
    call: ToolCall
    message: ToolMessage
    failed: bool


class _Running:
    """One call's tool, started as its ``ToolCallDone`` arrived; ``done`` once it answered."""

    __slots__ = ("call", "done", "failed", "index", "message", "scope")

    def __init__(self, index: int, call: ToolCall) -> None:
        self.index = index
        self.call = call
        self.done = anyio.Event()
        self.scope = anyio.CancelScope()
        self.message: ToolMessage | None = None
        self.failed = False


Chat = Callable[[ChatRequest], ChatStream]


def run_tools(
    chat: Chat,
    request: ChatRequest,
    tools: Tools,
    *,
    max_turns: int = 8,
    max_tokens_total: int | None = None,
    configs: Sequence[Config] = (),
) -> ToolRun:
    """The agent loop over ``chat`` (a client's ``chat``): see :class:`ToolRun`.
    ``configs`` are the clients' (their ``max_tokens``, the per-turn default a run's
    token cap lowers, and their API keys, never shown in a tool's error text)."""
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, not {max_turns}")
    if max_tokens_total is not None and max_tokens_total < 1:
        raise ValueError(f"max_tokens_total must be >= 1, not {max_tokens_total}")
    if request.tools:
        raise ValueError("run_tools sends the tool box's schemas: leave request.tools empty")
    default = min((c.max_tokens for c in configs if c.max_tokens is not None), default=None)
    secrets = tuple(c.api_key for c in configs if c.api_key)
    return ToolRun(chat, request, tools, max_turns, max_tokens_total, default, secrets)


class ToolRun:
    """An agent run: ``async with client.run_tools(request, tools) as run:``, then
    ``async for event in run``; ``run.completion`` is the last turn's Completion.

    Each turn is a chat of ``run.messages`` with the tool box's schemas. Its events come out
    as they arrive (every :data:`~llamaclient.ChatEvent`); each tool call starts the moment
    its ``ToolCallDone`` does, so tools run while the model writes the next call. When the
    turn ends, its assistant message (``Completion.message()``: the exact echo, so the
    prompt cache covers it next turn) and then each call's :class:`ToolResult`, in the order
    of the calls, go into ``run.messages`` (and the results out as events), and the next
    turn starts. The run ends (``run.outcome``, a :class:`RunOutcome`) on a turn that calls
    no tool, after ``max_turns`` turns, or once it generated ``max_tokens_total`` tokens:
    each turn's ``max_tokens`` is lowered to what is left of it, so the whole run never
    generates more. ``run.messages`` then ends with the results of every call made, so
    ``ChatRequest(run.messages, ...)`` can go on from there.

    A turn's error (an ``InferError``) is raised from the loop and ends the run
    (``run.error``; the failed turn is not in ``run.messages``, ``run.stream.partial`` has
    what it showed). Leaving the block, ``aclose()`` or a cancel stops the turn (the server
    frees the slot) and the tools still running.
    """

    def __init__(
        self,
        chat: Chat,
        request: ChatRequest,
        tools: Tools,
        max_turns: int,
        max_tokens_total: int | None,
        default_max_tokens: int | None,
        secrets: tuple[str, ...],
    ) -> None:
        self.messages: list[ChatMessage] = list(request.messages)
        self.completions: list[Completion] = []
        self.outcome: RunOutcome | None = None
        self.error: Exception | None = None
        self.stream: ChatStream | None = None  # the current (or last) turn's stream
        self.tools = tools
        self.max_turns = max_turns
        self.max_tokens_total = max_tokens_total
        self._chat = chat
        self._request = request
        self._default_max_tokens = default_max_tokens
        self._secrets = secrets
        self._group: TaskGroup | None = None
        self._running: dict[int, _Running] = {}  # this turn's calls, by index
        self._results: deque[_Running] = deque()  # the ended turn's, to deliver in order
        self._ending: RunOutcome | None = None  # the outcome, once the results are out
        self._in_turn = False
        self._closed = False

    # -- what the run has --------------------------------------------------------------------
    @property
    def turns(self) -> int:
        """How many turns have ended."""
        return len(self.completions)

    @property
    def completion(self) -> Completion:
        """The last turn's Completion, once the run has ended (``RuntimeError`` before)."""
        if self.outcome is None or not self.completions:
            raise RuntimeError(
                "the run has not ended" if self.error is None else f"the run failed: {self.error}"
            )
        return self.completions[-1]

    @property
    def usage(self) -> Usage:
        """The run's token counts so far: each field summed over the turns (None where no
        turn reported it)."""
        usages = [c.usage for c in self.completions]
        return Usage(
            prompt_tokens=_total(u.prompt_tokens for u in usages),
            completion_tokens=_total(u.completion_tokens for u in usages),
            cached_tokens=_total(u.cached_tokens for u in usages),
        )

    @property
    def generated_tokens(self) -> int:
        """The tokens the run's turns generated (what ``max_tokens_total`` bounds)."""
        return sum(_generated(c) for c in self.completions)

    # -- the loop ----------------------------------------------------------------------------
    async def __aenter__(self) -> ToolRun:
        if self._group is not None:
            raise RuntimeError("a ToolRun is entered once")
        group = anyio.create_task_group()
        await group.__aenter__()
        self._group = group
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        try:
            await self.aclose()
        finally:
            group = self._group
            if group is not None:
                # The block's own exception is not the tools' (they never raise): given to
                # the task group, it would come out wrapped in an ExceptionGroup. Only a
                # cancellation is the group's business.
                cancelled = isinstance(exc, anyio.get_cancelled_exc_class())
                if cancelled:
                    await group.__aexit__(exc_type, exc, tb)
                else:
                    await group.__aexit__(None, None, None)
        return None

    def __aiter__(self) -> ToolRun:
        return self

    async def __anext__(self) -> ChatEvent | ToolResult:
        if self._group is None:
            raise RuntimeError(
                "iterate a ToolRun inside `async with client.run_tools(...) as run:` "
                "(its tools run in tasks the block holds)"
            )
        while True:
            if self._results:  # the ended turn's results, in the order of the calls
                return await self._deliver()
            if not self._in_turn:
                if self._closed or self.outcome is not None or self.error is not None:
                    raise StopAsyncIteration
                self._start_turn()
            stream = self.stream
            assert stream is not None
            try:
                event = await stream.__anext__()
            except StopAsyncIteration:
                self._end_turn(stream.completion)
                continue
            except Exception as exc:  # the turn's typed error ends the run
                self.error = exc
                self._in_turn = False
                self._stop_tools()
                raise
            if isinstance(event, ToolCallDone):
                self._start(event.index, event.call)
            return event

    def _start_turn(self) -> None:
        request = msgspec.structs.replace(
            self._request,
            messages=list(self.messages),
            tools=self.tools.schemas,
            max_tokens=self._turn_max_tokens(),
        )
        self._running = {}
        try:
            self.stream = self._chat(request)
        except ValueError as exc:  # a request the client refuses before any network
            self.error = exc
            raise
        self._in_turn = True

    def _turn_max_tokens(self) -> int | None:
        """The request's ``max_tokens``, lowered to what the run has left of its cap."""
        asked = self._request.max_tokens
        if self.max_tokens_total is None:
            return asked
        wanted = asked if asked is not None else self._default_max_tokens
        left = self.max_tokens_total - self.generated_tokens
        return left if wanted is None else min(wanted, left)

    def _start(self, index: int, call: ToolCall) -> None:
        if index in self._running:
            return
        running = self._running[index] = _Running(index, call)
        assert self._group is not None
        self._group.start_soon(self._run_tool, running)

    async def _run_tool(self, running: _Running) -> None:
        with running.scope:
            outcome = await self.tools._answer(running.call, self._secrets)
            running.message, running.failed = outcome
            running.done.set()

    def _end_turn(self, completion: Completion) -> None:
        self._in_turn = False
        self.completions.append(completion)
        self.messages.append(completion.message())
        for index, call in enumerate(completion.tool_calls):  # one without ToolCallDone
            self._start(index, call)
        self._results.extend(self._running[i] for i in sorted(self._running))
        self._ending = self._outcome_after(completion)
        if not self._results:
            self.outcome = self._ending

    def _outcome_after(self, completion: Completion) -> RunOutcome | None:
        spent = self.max_tokens_total is not None and self.generated_tokens >= self.max_tokens_total
        if not completion.tool_calls:
            capped = spent and completion.finish_reason is FinishReason.LENGTH
            return RunOutcome.MAX_TOKENS if capped else RunOutcome.ANSWERED
        if spent:
            return RunOutcome.MAX_TOKENS
        if self.turns >= self.max_turns:
            return RunOutcome.MAX_TURNS
        return None

    async def _deliver(self) -> ToolResult:
        running = self._results[0]
        await running.done.wait()
        self._results.popleft()
        assert running.message is not None
        self.messages.append(running.message)
        if not self._results:
            self.outcome = self._ending
        turn = self.turns - 1
        return ToolResult(turn, running.index, running.call, running.message, running.failed)

    def _stop_tools(self) -> None:
        for running in self._running.values():
            running.scope.cancel()
        self._results.clear()

    async def aclose(self) -> None:
        """Stop the run: the current turn (the server frees the slot) and its tools."""
        self._closed = True
        self._stop_tools()
        if self._in_turn and self.stream is not None:
            self._in_turn = False
            await self.stream.aclose()

    async def collect(self) -> Completion:
        """Run to the end and return the last Completion (``run.messages`` has the rest)."""
        async with self:
            async for _ in self:
                pass
        return self.completion


def _generated(completion: Completion) -> int:
    generated = completion.usage.completion_tokens
    if generated is None:
        generated = completion.timings.predicted_n if completion.timings is not None else 0
    return generated


def _total(values: Iterable[int | None]) -> int | None:
    seen = [v for v in values if v is not None]
    return sum(seen) if seen else None
