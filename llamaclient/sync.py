"""The blocking client: ``llamaclient.sync.Client`` and ``sync.Pool``.

They have the async client's methods, without ``await``: ``with client.chat(request) as
stream: for event in stream: ...`` then ``stream.completion``; ``client.complete()``,
``client.parse()`` and the rest return directly. Each runs the async client on one private
event-loop thread (anyio's blocking portal, on asyncio), so it works where a loop already
runs (a Jupyter cell) and from several threads at once. A call interrupted in the calling
thread (Ctrl-C) cancels its work in that loop and waits while the turn closes: the HTTP
response is released and the server told to stop (``DELETE /v1/stream``), so it frees the
slot. See ``docs/sync.md``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import signal
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Generic, Literal, TypeVar, overload

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal

from . import (
    ChatEvent,
    ChatMessage,
    ChatRequest,
    Completion,
    Config,
    ModelInfo,
    Props,
    RerankResult,
    Routed,
    RunOutcome,
    Slot,
    SlotErased,
    SlotRestored,
    SlotSaved,
    StreamState,
    TokenPiece,
    ToolResult,
    Tools,
    Transport,
    Usage,
    UsageTotals,
)
from . import ChatStream as AsyncChatStream
from . import Client as AsyncClient
from . import Pool as AsyncPool
from . import ToolRun as AsyncToolRun
from ._driver.embeddings import BATCH

__all__ = ["ChatStream", "Client", "Pool", "ToolRun"]

T = TypeVar("T")
A = TypeVar("A", AsyncClient, AsyncPool)

# How long an interrupted call waits for its turn to close: the DELETE /v1/stream it may send
# is bounded by 2 s (CANCEL_TIMEOUT), the rest is releasing a response.
_CLOSE_WAIT = 10.0


class _Loop:
    """The private event-loop thread (an anyio blocking portal on asyncio), and calls into
    it that an exception in the calling thread (Ctrl-C) cancels and waits out."""

    __slots__ = ("_aio", "_cm", "_context", "_tasks", "closed", "portal", "thread")

    def __init__(self) -> None:
        self._cm: AbstractContextManager[BlockingPortal] = start_blocking_portal(
            "asyncio", name="llamaclient-sync"
        )
        self.portal = self._cm.__enter__()
        self._aio = self.portal.call(asyncio.get_running_loop)
        self.thread = self.portal.call(_quiet_thread)
        self.closed = False
        # The loop thread's own context: a call made from a trio (or any other) thread must
        # not carry that thread's context variables in (sniffio's would make anyio think
        # it runs under trio).
        self._context = self.portal.call(contextvars.copy_context)
        self._tasks: set[asyncio.Task[None]] = set()  # the loop keeps only weak references

    def call(self, fn: Callable[[], T]) -> T:
        """``fn()`` in the loop's thread (objects of the loop are made and read there)."""
        return self.portal.call(fn)

    def run(self, fn: Callable[[], Awaitable[T]]) -> T:
        """``await fn()`` in the loop. Interrupted here, the call is cancelled there (an
        anyio cancellation, which the turn's shielded closing respects), and this thread
        waits until it has finished before the interruption goes on."""
        if threading.get_ident() == self.thread:  # it would wait for itself forever
            raise RuntimeError(
                "the sync client was called from its own event loop (an async tool?): "
                "use the async client there"
            )
        if self.closed:
            raise RuntimeError("this sync client is closed")
        call = _Call(fn)
        # One hand-over each way. portal.call also waits for the loop to have spawned the
        # task: 208 us a call against 111 us for one hand-over each way (5,000 calls of an
        # empty coroutine, on the shared 2-core VM at load 3); a sync stream makes one call
        # per event.
        self._aio.call_soon_threadsafe(self._spawn, call, context=self._context)
        try:
            return call.future.result()
        except BaseException:
            if not call.future.done():  # KeyboardInterrupt (or any exception) in this thread
                self._aio.call_soon_threadsafe(call.cancel)
                call.done.wait(_CLOSE_WAIT)
            raise

    def _spawn(self, call: _Call[Any]) -> None:  # in the loop's thread
        task = self._aio.create_task(call.run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def close(self) -> None:
        self.closed = True
        self._cm.__exit__(None, None, None)


def _quiet_thread() -> int:
    """In the loop's thread: block SIGINT there (and in the worker threads it starts), so a
    Ctrl-C always lands in a thread that waits for the loop and can cancel its call."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    return threading.get_ident()


class _Call(Generic[T]):
    """One call into the loop, in a cancel scope the calling thread can cancel; its
    ``future`` has the outcome, ``done`` is set once it has finished either way."""

    __slots__ = ("cancelled", "done", "fn", "future", "scope")

    def __init__(self, fn: Callable[[], Awaitable[T]]) -> None:
        self.fn = fn
        self.future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self.done = threading.Event()
        self.scope: anyio.CancelScope | None = None
        self.cancelled = False

    async def run(self) -> None:
        try:
            with anyio.CancelScope() as scope:
                self.scope = scope
                if self.cancelled:  # cancelled before it started
                    scope.cancel()
                self.future.set_result(await self.fn())
                return
            self.future.cancel()  # the caller stopped waiting already
        except BaseException as exc:
            self.future.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):  # the loop itself is going away
                raise
        finally:
            self.done.set()

    def cancel(self) -> None:  # in the loop's thread
        self.cancelled = True
        if self.scope is not None:
            self.scope.cancel()


def _shut(loop: _Loop, client: AsyncClient | AsyncPool) -> None:
    """Close the async client in its loop, then stop the loop (once; also at exit)."""
    if threading.get_ident() == loop.thread:  # collected in its own loop: it cannot stop
        return
    try:
        loop.run(client.aclose)
    finally:
        loop.close()


class _Blocking(Generic[A]):
    """What a sync Client and a sync Pool share: the loop thread and the chat methods."""

    def __init__(self, make: Callable[[], A]) -> None:
        loop = self._loop = _Loop()
        try:
            self._async: A = loop.call(make)
        except BaseException:
            loop.close()
            raise
        self._close: Callable[[], object] = weakref.finalize(self, _shut, loop, self._async)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections and stop the loop thread (also done at exit)."""
        self._close()

    @property
    def usage(self) -> UsageTotals:
        """The running usage totals per model (see :attr:`llamaclient.Client.usage`)."""
        return self._loop.call(lambda: self._async.usage + UsageTotals())

    def chat(
        self,
        request: ChatRequest,
        *,
        live_arguments: bool | Iterable[str] = False,
        lenient_arguments: bool = True,
        output: type[Any] | Mapping[str, Any] | None = None,
    ) -> ChatStream:
        """Stream one chat: ``with client.chat(request) as stream: for event in stream``,
        then ``stream.completion``. The options are the async client's."""
        client = self._async

        def make() -> AsyncChatStream:
            return client.chat(
                request,
                live_arguments=live_arguments,
                lenient_arguments=lenient_arguments,
                output=output,
            )

        return ChatStream(self._loop, self._loop.call(make))

    def complete(self, request: ChatRequest) -> Completion:
        """Run one chat to its end and return the Completion."""
        client = self._async
        return self._loop.run(lambda: client.complete(request))

    @overload
    def parse(self, request: ChatRequest, output: type[T]) -> T: ...
    @overload
    def parse(self, request: ChatRequest, output: Mapping[str, Any]) -> Any: ...
    def parse(self, request: ChatRequest, output: type[T] | Mapping[str, Any]) -> T | Any:
        """Run one chat constrained to ``output`` and return the validated instance
        (``OutputError`` when the answer is not one)."""
        client = self._async
        return self._loop.run(lambda: client.parse(request, output))

    def run_tools(
        self,
        request: ChatRequest,
        tools: Tools,
        *,
        max_turns: int = 8,
        max_tokens_total: int | None = None,
    ) -> ToolRun:
        """The agent loop: ``with client.run_tools(request, tools) as run: for event in
        run``, then ``run.completion`` and ``run.messages`` (see ``llamaclient.ToolRun``).
        Async tools run on the client's loop, plain ones in its worker threads."""
        run = self._async.run_tools(
            request, tools, max_turns=max_turns, max_tokens_total=max_tokens_total
        )
        return ToolRun(self._loop, run)


class Client(_Blocking[AsyncClient]):
    """A blocking client for one llama-server: ``with sync.Client(config) as client``.

    The methods are :class:`llamaclient.Client`'s, returning directly; ``transport=`` as
    there. It owns one event-loop thread, stopped by ``close()`` (or at exit)."""

    def __init__(self, config: Config, *, transport: Transport | None = None) -> None:
        self.config = config
        super().__init__(lambda: AsyncClient(config, transport=transport))

    def __repr__(self) -> str:
        return f"sync.{self._async!r}"

    def __enter__(self) -> Client:
        return self

    def reattach(
        self,
        conversation_id: str,
        *,
        offset: int = 0,
        live_arguments: bool | Iterable[str] = False,
        lenient_arguments: bool = True,
    ) -> ChatStream:
        """Pick up a streamed turn by its ``conversation_id`` (see ``Client.reattach``)."""
        client = self._async

        def make() -> AsyncChatStream:
            return client.reattach(
                conversation_id,
                offset=offset,
                live_arguments=live_arguments,
                lenient_arguments=lenient_arguments,
            )

        return ChatStream(self._loop, self._loop.call(make))

    def cancel(self, conversation_id: str) -> bool:
        """Stop the generation of ``conversation_id``; True if the server acknowledged it."""
        client = self._async
        return self._loop.run(lambda: client.cancel(conversation_id))

    def models(self) -> list[ModelInfo]:
        """``GET /models``: a router's models with their status."""
        return self._loop.run(self._async.models)

    def load_model(self, name: str, *, wait: bool = True) -> bool:
        """Ask a router to load model ``name`` (see ``Client.load_model``)."""
        client = self._async
        return self._loop.run(lambda: client.load_model(name, wait=wait))

    def unload_model(self, name: str, *, wait: bool = True) -> bool:
        """Ask a router to stop model ``name`` (see ``Client.unload_model``)."""
        client = self._async
        return self._loop.run(lambda: client.unload_model(name, wait=wait))

    def health(self) -> dict[str, Any]:
        """``GET /health``."""
        return self._loop.run(self._async.health)

    def props(self) -> Props:
        """``GET /props``, typed."""
        return self._loop.run(self._async.props)

    def metrics(self) -> dict[str, float]:
        """``GET /metrics``'s samples (see ``Client.metrics``)."""
        return self._loop.run(self._async.metrics)

    def save_slot(self, slot: int, filename: str) -> SlotSaved:
        """See ``Client.save_slot``."""
        client = self._async
        return self._loop.run(lambda: client.save_slot(slot, filename))

    def restore_slot(self, slot: int, filename: str) -> SlotRestored:
        """See ``Client.restore_slot``."""
        client = self._async
        return self._loop.run(lambda: client.restore_slot(slot, filename))

    def erase_slot(self, slot: int) -> SlotErased:
        """See ``Client.erase_slot``."""
        client = self._async
        return self._loop.run(lambda: client.erase_slot(slot))

    def slots(self) -> list[Slot]:
        """``GET /slots``, typed."""
        return self._loop.run(self._async.slots)

    def count_tokens(self, request: ChatRequest) -> int:
        """See ``Client.count_tokens``."""
        client = self._async
        return self._loop.run(lambda: client.count_tokens(request))

    @overload
    def tokenize(
        self,
        text: str,
        *,
        add_special: bool = ...,
        parse_special: bool = ...,
        pieces: Literal[False] = ...,
    ) -> list[int]: ...
    @overload
    def tokenize(
        self,
        text: str,
        *,
        add_special: bool = ...,
        parse_special: bool = ...,
        pieces: Literal[True],
    ) -> list[TokenPiece]: ...
    def tokenize(
        self,
        text: str,
        *,
        add_special: bool = False,
        parse_special: bool = False,
        pieces: bool = False,
    ) -> list[int] | list[TokenPiece]:
        """See ``Client.tokenize`` (``pieces=True``: :class:`TokenPiece`s)."""
        client = self._async
        return self._loop.run(
            lambda: client.tokenize(
                text, add_special=add_special, parse_special=parse_special, pieces=pieces
            )
        )

    def detokenize(self, ids: Sequence[int]) -> str:
        """See ``Client.detokenize``."""
        client = self._async
        return self._loop.run(lambda: client.detokenize(ids))

    def embed(
        self, inputs: str | Sequence[str], *, normalize: bool = False, batch: int = BATCH
    ) -> list[list[float]]:
        """See ``Client.embed``."""
        client = self._async
        return self._loop.run(lambda: client.embed(inputs, normalize=normalize, batch=batch))

    def rerank(
        self, query: str, documents: Sequence[str], *, top_n: int | None = None
    ) -> list[RerankResult]:
        """See ``Client.rerank``."""
        client = self._async
        return self._loop.run(lambda: client.rerank(query, documents, top_n=top_n))


class Pool(_Blocking[AsyncPool]):
    """A blocking pool of llama-servers: ``with sync.Pool([config1, config2]) as pool``.
    ``chat()``, ``complete()``, ``parse()`` and ``run_tools()`` work as on
    :class:`llamaclient.Pool` (every stream's first event is ``Routed``)."""

    def __init__(
        self, configs: Sequence[Config], *, transports: Sequence[Transport] | None = None
    ) -> None:
        self.configs = tuple(configs)
        super().__init__(lambda: AsyncPool(configs, transports=transports))

    def __repr__(self) -> str:
        return f"sync.{self._async!r}"

    def __enter__(self) -> Pool:
        return self


class ChatStream:
    """One chat turn: ``for event in stream`` yields the ChatEvents, then
    ``stream.completion``. ``with client.chat(request) as stream`` (or ``close()``) releases
    the connection when you stop early; a Ctrl-C while it waits stops the turn, and the
    server frees the slot. The properties are :class:`llamaclient.ChatStream`'s."""

    __slots__ = ("_loop", "_owns", "_stream")

    def __init__(self, loop: _Loop, stream: AsyncChatStream, *, owns: bool = True) -> None:
        self._loop = loop
        self._stream = stream
        self._owns = owns  # dropped unfinished, it closes the turn (a view of a run's: not)

    def __iter__(self) -> ChatStream:
        return self

    def __next__(self) -> ChatEvent:
        event = self._loop.run(self._next)
        if event is None:
            raise StopIteration
        return event

    async def _next(self) -> ChatEvent | None:
        try:
            return await self._stream.__anext__()
        except StopAsyncIteration:
            return None

    def __enter__(self) -> ChatStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the stream and release its connection (the server then frees the slot)."""
        self._loop.run(self._stream.aclose)

    def collect(self) -> Completion:
        """Drain the stream and return the Completion."""
        return self._loop.run(self._stream.collect)

    @property
    def request(self) -> ChatRequest:
        return self._stream.request

    @property
    def completion(self) -> Completion:
        """The Completion, once the stream has ended normally (``RuntimeError`` before)."""
        return self._stream.completion

    @property
    def partial(self) -> Completion:
        """What arrived so far, as a Completion (see ``ChatStream.partial``)."""
        return self._loop.call(lambda: self._stream.partial)

    @property
    def state(self) -> StreamState:
        return self._stream.state

    @property
    def finished(self) -> bool:
        return self._stream.finished

    @property
    def error(self) -> Exception | None:
        return self._stream.error

    @property
    def conversation_id(self) -> str | None:
        return self._stream.conversation_id

    @property
    def route(self) -> Routed | None:
        return self._stream.route

    def output(self) -> Any:
        """The typed output decoded so far (see ``ChatStream.output``)."""
        return self._loop.call(self._stream.output)

    def __del__(self) -> None:
        if self._owns and self._stream.state is StreamState.STREAMING:  # dropped unfinished
            # In the loop's own thread (its stream then closes itself), or the loop is gone.
            with contextlib.suppress(RuntimeError):
                self._loop.portal.start_task_soon(self._stream.aclose)


class ToolRun:
    """An agent run (see ``llamaclient.ToolRun``): ``with client.run_tools(request, tools)
    as run: for event in run`` yields every ChatEvent and each ``ToolResult``; then
    ``run.completion``, ``run.messages``, ``run.outcome``. Iterated without ``with``, it
    closes itself at its end."""

    __slots__ = ("_held", "_loop", "_own", "_run")

    def __init__(self, loop: _Loop, run: AsyncToolRun) -> None:
        self._loop = loop
        self._run = run
        self._held: AbstractContextManager[AsyncToolRun] | None = None
        self._own = False  # entered by the first next(), not by `with`

    def _enter(self) -> None:
        if self._held is None:
            # One task of the loop holds the run's task group from enter to exit.
            held = self._loop.portal.wrap_async_context_manager(self._run)
            held.__enter__()
            self._held = held

    def __enter__(self) -> ToolRun:
        self._enter()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __iter__(self) -> ToolRun:
        return self

    def __next__(self) -> ChatEvent | ToolResult:
        if self._held is None:
            self._own = True
            self._enter()
        try:
            event = self._loop.run(self._next)
        except BaseException:
            if self._own:
                self.close()
            raise
        if event is None:
            if self._own:
                self.close()
            raise StopIteration
        return event

    async def _next(self) -> ChatEvent | ToolResult | None:
        try:
            return await self._run.__anext__()
        except StopAsyncIteration:
            return None

    def close(self) -> None:
        """Stop the run (its turn and its tools) and release what it holds."""
        held, self._held = self._held, None
        if held is not None:
            held.__exit__(None, None, None)  # the holder's own exit: no foreign exception

    def collect(self) -> Completion:
        """Run to the end and return the last Completion."""
        with self:
            for _ in self:
                pass
        return self.completion

    @property
    def messages(self) -> list[ChatMessage]:
        return self._run.messages

    @property
    def completions(self) -> list[Completion]:
        return self._run.completions

    @property
    def completion(self) -> Completion:
        return self._run.completion

    @property
    def outcome(self) -> RunOutcome | None:
        return self._run.outcome

    @property
    def error(self) -> Exception | None:
        return self._run.error

    @property
    def usage(self) -> Usage:
        return self._run.usage

    @property
    def turns(self) -> int:
        return self._run.turns

    @property
    def generated_tokens(self) -> int:
        return self._run.generated_tokens

    @property
    def stream(self) -> ChatStream | None:
        """The current (or last) turn's stream."""
        stream = self._run.stream
        return None if stream is None else ChatStream(self._loop, stream, owns=False)
