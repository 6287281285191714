"""Client: one llama-server, and the chat turns that use it.

The client owns an :class:`~llamaclient._driver.endpoint.Endpoint` (URL, headers, HTTP stack)
and the :class:`~llamaclient._driver.shared.Shared` state its turns share (what was learnt
about the server, the slot lines, the lookups). Each chat is a
:class:`~llamaclient._turn.machine.ChatTurn` (the decisions) driven by a :class:`ChatStream`
(the I/O); the stream never sees the client.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, overload

import anyio
import msgspec

from ._arguments.output import OutputDecoder
from ._calls import ServerCalls
from ._driver.endpoint import Endpoint
from ._driver.limiter import Limiter
from ._driver.logs import log_turns
from ._driver.observe import Instrument, Observer, observer_for
from ._driver.perform import Performer, Router
from ._driver.shared import Shared
from ._driver.tracing import trace_turns
from ._protocol.body import build_body
from ._stream import ChatStream
from ._tools import ToolRun, Tools, run_tools
from ._transports.base import Transport, TransportError
from ._turn.history import History
from ._turn.machine import ChatTurn
from ._turn.phase import CANCEL_TIMEOUT, stream_path
from ._turn.plan import Plan, Target
from ._types.completion import Completion
from ._types.config import Config
from ._types.messages import media_kinds
from ._types.request import ChatRequest
from ._types.totals import UsageTotals
from ._types.typed import OutputType, output_type

if TYPE_CHECKING:
    import httpx

__all__ = ["Client", "new_conversation_id", "plan_for", "stream_for"]

T = TypeVar("T")
S = TypeVar("S", bound=ChatStream)


def new_conversation_id() -> str:
    """A fresh random id: 128 bits, URL-safe."""
    return secrets.token_hex(16)


def plan_for(
    config: Config, request: ChatRequest, spec: OutputType[Any] | None, history: History
) -> Plan:
    """The turn that ``request`` asks for under ``config`` (a fresh conversation id when
    resume is on; the typed output's live decoder when ``spec`` is given; ``history``: the
    sessions' previous turns)."""
    decoder = None if spec is None else OutputDecoder()
    return Plan(
        request,
        conversation_id=new_conversation_id() if config.resume else None,
        output=spec,
        decoder=decoder,
        processors=() if decoder is None else (decoder.process,),
        media=media_kinds(request.messages),
        pooled=False,
        history=history,
    )


def stream_for(
    plan: Plan,
    target: Target,
    shared: Shared,
    live: bool | Iterable[str],
    lenient: bool,
    router: Router | None = None,
    kind: type[S] = ChatStream,  # type: ignore[assignment]
    observer: Observer | None = None,
) -> S:
    """The stream that drives ``plan``'s turn (``router``: a pool's; ``observer``: what
    watches it)."""
    turn = ChatTurn(plan, target)
    io = Performer(shared, router, observer, plan.request.session)
    return kind(turn, io, plan.request, live=live, lenient=lenient, decoder=plan.decoder)


class Client(ServerCalls):
    """An async client for one llama-server (asyncio, or trio through httpx).

    ``Client(config)`` picks the transport on first use (see ``Config.transport``); pass
    ``http_client=`` to run over your own ``httpx.AsyncClient`` instead (it is not closed by
    us), or ``transport=`` for any :class:`~llamaclient.Transport`; ``limiter=`` shares a
    concurrency limit (a :class:`~llamaclient.Limiter`) with other clients and pools. Use
    ``async with Client(...) as client``.
    """

    def __init__(
        self,
        config: Config,
        *,
        http_client: httpx.AsyncClient | None = None,
        transport: Transport | None = None,
        limiter: Limiter | None = None,
    ) -> None:
        self.config = config
        self._endpoint = Endpoint(config, http_client=http_client, transport=transport)
        self._shared = Shared(self._endpoint, limiter)
        # What watches its turns (observe.py): the logs (logs.py) unless their loggers are off.
        self.instruments: list[Instrument] = [log_turns, trace_turns]

    @property
    def usage(self) -> UsageTotals:
        """What this client's turns asked of the server so far, per model (requests,
        failures, prompt and cached tokens, tokens generated and reasoning, prefill and
        decode seconds): a running total, kept as each turn ends."""
        return self._shared.usage

    def __repr__(self) -> str:
        endpoint = self._endpoint
        return f"Client(base_url={endpoint.base!r}, transport={endpoint.transport_name})"

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._endpoint.aclose()

    def chat(
        self,
        request: ChatRequest,
        *,
        live_arguments: bool | Iterable[str] = False,
        lenient_arguments: bool = True,
        output: type[Any] | Mapping[str, Any] | None = None,
    ) -> ChatStream:
        """Stream one chat: ``async for event in client.chat(request)``. The body is built
        (and bad requests raise ``ValueError``) right here, before any network.

        ``live_arguments``: also yield ``ArgumentDelta`` events, the decoded text of each
        string argument as it streams, for every tool (True) or the tools named.
        ``lenient_arguments`` decodes them with the lenient rules (see ``ArgumentStream``).

        ``output``: constrain the answer to the JSON Schema of this type (a
        ``msgspec.Struct``, dataclass, ``TypedDict``, pydantic model, or a JSON Schema
        ``dict``). The stream also yields ``OutputDelta`` events as the answer's values are
        written, ``stream.output()`` is the value so far, and ``stream.completion.output``
        the validated instance; an answer that is not one raises ``OutputError``.
        """
        spec = None if output is None else _output_spec(request, output)
        if spec is not None:
            request = msgspec.structs.replace(request, response_format=spec.response_format())
        plan = plan_for(self.config, request, spec, self._shared.history)
        body = build_body(self.config, request, proxied=self._shared.known.proxy is not None)
        limited = self._shared.limiter is not None
        target = Target(self.config, self._shared.known, body, limited=limited)
        observer = observer_for(self.instruments, plan, target) if self.instruments else None
        return stream_for(
            plan, target, self._shared, live_arguments, lenient_arguments, observer=observer
        )

    @overload
    async def parse(self, request: ChatRequest, output: type[T]) -> T: ...
    @overload
    async def parse(self, request: ChatRequest, output: Mapping[str, Any]) -> Any: ...
    async def parse(self, request: ChatRequest, output: type[T] | Mapping[str, Any]) -> T | Any:
        """Run one chat constrained to ``output`` (see :meth:`chat`) and return the validated
        instance. Raises ``OutputError`` when the answer is not one (also when it reached
        ``max_tokens`` first), with the raw text and the partial value."""
        completion = await self.chat(request, output=output).collect()
        return completion.output

    def reattach(
        self,
        conversation_id: str,
        *,
        offset: int = 0,
        live_arguments: bool | Iterable[str] = False,
        lenient_arguments: bool = True,
    ) -> ChatStream:
        """Pick up a streamed turn by its ``conversation_id`` (``ChatStream.conversation_id``),
        e.g. after the process that started it restarted. From ``offset`` 0 the stream yields
        every event of the turn and ends with the same Completion; a larger offset (body bytes
        already seen) skips what came before it. ``ResumeError`` when the server's session is
        gone (it keeps a finished turn 300 s)."""
        if offset < 0:
            raise ValueError(f"offset must be >= 0, not {offset}")
        request = ChatRequest([])
        plan = Plan(request, conversation_id=conversation_id, offset=offset, reattach=True)
        target = Target(self.config, self._shared.known, None)
        return stream_for(plan, target, self._shared, live_arguments, lenient_arguments)

    async def cancel(self, conversation_id: str) -> bool:
        """Stop the generation of ``conversation_id`` (``DELETE /v1/stream``), e.g. one a
        killed process left running. True if the server acknowledged it. Never raises."""
        endpoint = self._endpoint
        with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_TIMEOUT):
            try:
                status, _, _ = await endpoint.exchange("DELETE", stream_path(conversation_id))
            except TransportError:
                return False
            return status < 300
        return False

    async def complete(self, request: ChatRequest) -> Completion:
        """Run one chat to its end and return the Completion."""
        return await self.chat(request).collect()

    def run_tools(
        self,
        request: ChatRequest,
        tools: Tools,
        *,
        max_turns: int = 8,
        max_tokens_total: int | None = None,
    ) -> ToolRun:
        """Run ``request`` as an agent with the tool box ``tools`` until the model answers,
        ``max_turns`` turns, or ``max_tokens_total`` generated tokens:
        ``async with client.run_tools(request, tools) as run: async for event in run: ...``
        (see :class:`~llamaclient.ToolRun`). Leave ``request.tools`` empty: each turn sends
        the box's schemas."""
        return run_tools(
            self.chat,
            request,
            tools,
            max_turns=max_turns,
            max_tokens_total=max_tokens_total,
            configs=(self.config,),
        )


def _output_spec(request: ChatRequest, output: type[Any] | Mapping[str, Any]) -> OutputType[Any]:
    if request.response_format is not None or request.json_schema is not None:
        raise ValueError("output= sets response_format: leave response_format/json_schema unset")
    return output_type(output)
