"""Client: one connection pool to one llama-server, and the policies around a chat request.

Policies live here, never in the pure core: per-slot ordering, the busy-slot check, waiting
for a loading model, safe retries with backoff, the wait (time-to-headers) timeout, and the
thinking-budget control call. ``ChatStream`` is the per-request loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from ._policy.slots import SlotQueue
from ._protocol.body import build_body
from ._protocol.retry import RETRYABLE_STATUS, backoff_seconds, retry_after_seconds
from ._stream import ChatStream
from ._transports.base import Response, Transport, TransportError
from ._types.completion import Completion
from ._types.config import Config
from ._types.errors import (
    BusyError,
    ConnectError,
    ContextOverflowError,
    HTTPStatusError,
    LoadTimeoutError,
    ProtocolError,
    StalledError,
    WaitTimeoutError,
)
from ._types.events import ChatEvent, Queued, Retrying, Waiting
from ._types.request import ChatRequest

if TYPE_CHECKING:
    import httpx

__all__ = ["Client"]

_JSON = msgspec.json.Decoder()
CHAT_PATH = "/v1/chat/completions"
_RELEASE_GRACE = 1.5  # seconds: llama-server notices a cut connection within ~1 s


class _ErrorBody(msgspec.Struct):
    message: str = ""
    type: str = ""
    n_prompt_tokens: int = 0
    n_ctx: int = 0


class _ErrorEnvelope(msgspec.Struct):
    error: _ErrorBody


_ERROR_DECODER = msgspec.json.Decoder(_ErrorEnvelope)


class Client:
    """An asyncio client for one llama-server.

    ``Client(config)`` uses the fastest transport for the URL (see ``Config.transport``); pass
    ``http_client=`` to run over your own ``httpx.AsyncClient`` instead (it is not closed by
    us), or ``transport=`` for any :class:`~llamaclient.Transport`. Use
    ``async with Client(...) as client``.
    """

    def __init__(
        self,
        config: Config,
        *,
        http_client: httpx.AsyncClient | None = None,
        transport: Transport | None = None,
    ) -> None:
        self.config = config
        base = config.base_url.rstrip("/")
        self._base = base[:-3] if base.endswith("/v1") else base
        kind = config.transport
        https = self._base.lower().startswith("https:")
        if kind == "auto":
            kind = "httpx" if https else "asyncio"
        elif kind == "asyncio" and https and transport is None and http_client is None:
            raise ValueError('transport "asyncio" speaks http:// only: use "httpx"')
        if transport is not None:
            self._transport: Transport = transport
        elif http_client is not None or kind == "httpx":
            from ._transports.httpx import HttpxTransport

            self._transport = HttpxTransport(http_client, config.connect_timeout)
        else:
            from ._transports.native import AsyncioTransport

            self._transport = AsyncioTransport(config.connect_timeout, tls=config.tls)
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if config.api_key is not None and not _printable_ascii(config.api_key):
            # Checked here so no HTTP stack ever puts the key into an error message.
            raise ValueError("api_key must be printable ASCII (the value is not shown)")
        if config.api_key:
            headers["Authorization"] = f"Bearer {config.api_key}"
        self._headers: Mapping[str, str] = headers
        # llama-server closes the connection after every streamed response (measured), so a
        # pooled connection would only fail on its next use: ask for the close up front.
        self._chat_headers: Mapping[str, str] = {**headers, "Connection": "close"}
        self._slots = SlotQueue()
        self._released: dict[int, float] = {}  # slot -> when our last request on it ended

    def __repr__(self) -> str:
        return f"Client(base_url={self._base!r}, transport={type(self._transport).__name__})"

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._transport.aclose()

    # -- chat --------------------------------------------------------------------------------
    def chat(
        self,
        request: ChatRequest,
        *,
        live_arguments: bool | Iterable[str] = False,
        lenient_arguments: bool = True,
    ) -> ChatStream:
        """Stream one chat: ``async for event in client.chat(request)``. The body is built
        (and bad requests raise ``ValueError``) right here, before any network.

        ``live_arguments``: also yield ``ArgumentDelta`` events, the decoded text of each
        string argument as it streams, for every tool (True) or the tools named.
        ``lenient_arguments`` decodes them with the lenient rules (see ``ArgumentStream``).
        """
        body = build_body(self.config, request)
        return ChatStream(self, request, body, live_arguments, lenient_arguments)

    async def complete(self, request: ChatRequest) -> Completion:
        """Run one chat to its end and return the Completion."""
        return await self.chat(request).collect()

    # -- helpers -----------------------------------------------------------------------------
    async def health(self) -> dict[str, Any]:
        """``GET /health``: ``{"status": "ok"}`` once the model is loaded."""
        result: dict[str, Any] = await self._get_json("/health")
        return result

    async def props(self) -> dict[str, Any]:
        """``GET /props``: slots, context size, chat template and its capabilities."""
        result: dict[str, Any] = await self._get_json("/props")
        return result

    async def slots(self) -> list[dict[str, Any]]:
        """``GET /slots``: one object per slot (``id``, ``is_processing``, ...)."""
        result: list[dict[str, Any]] = await self._get_json("/slots")
        return result

    # -- internals ---------------------------------------------------------------------------
    async def _request(
        self, method: str, path: str, body: bytes | None = None, *, stream: bool = False
    ) -> Response:
        """One request; a stale pooled connection is retried once on a fresh one (nothing
        reached the model, so that is always safe)."""
        url = self._base + path
        headers = self._chat_headers if stream else self._headers
        try:
            return await self._transport.send(method, url, headers, body)
        except TransportError as exc:
            if exc.kind != "disconnected":
                raise
        return await self._transport.send(method, url, headers, body)

    async def _call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        """A small request/response exchange, bounded by ``wait_timeout``."""
        try:
            async with asyncio.timeout(self.config.wait_timeout):
                response = await self._request(method, path, body)
                try:
                    data = await response.aread()
                finally:
                    await response.aclose()
        except TimeoutError:
            raise WaitTimeoutError(
                f"{method} {path}: no answer within {self.config.wait_timeout} s"
            ) from None
        except TransportError as exc:
            raise ConnectError(f"{method} {path}: {exc}") from exc
        return response.status, data

    async def _read_all(self, response: Response) -> bytes:
        """The whole body of a response whose headers are in, then release it; bounded by
        ``stall_timeout`` (a body that stops half-way never hangs the caller)."""
        stall = self.config.stall_timeout
        try:
            async with asyncio.timeout(stall):
                return await response.aread()
        except TimeoutError:
            raise StalledError(f"no bytes for {stall} s while reading a response body") from None
        finally:
            await response.aclose()

    async def _get_json(self, path: str) -> Any:
        status, data = await self._call("GET", path)
        if status >= 400:
            raise _status_error(status, data)
        try:
            return _JSON.decode(data)
        except msgspec.DecodeError:
            raise ProtocolError(f"GET {path}: the answer is not JSON", data) from None

    async def _end_reasoning(self, completion_id: str | None) -> bool:
        """Ask the server to end the reasoning of ``completion_id`` now."""
        if not completion_id:
            return False
        body: dict[str, str] = {"id": completion_id, "action": "reasoning_end"}
        if self.config.model:
            body["model"] = self.config.model
        try:
            status, data = await self._call(
                "POST", "/v1/chat/completions/control", msgspec.json.encode(body)
            )
        except (ConnectError, WaitTimeoutError):
            return False
        return status == 200 and b'"success":true' in data

    def _slot_done(self, slot: int, ticket: object) -> None:
        """A request of this client for ``slot`` ended: the next in line may go."""
        self._released[slot] = asyncio.get_running_loop().time()
        self._slots.leave(slot, ticket)

    async def _still_busy_after_us(self, slot: int) -> bool:
        """The server frees a slot about one token step after our own request on it ended
        (or ~1 s after a cut connection): within that window, look again before calling the
        slot busy elsewhere."""
        loop = asyncio.get_running_loop()
        released = self._released.get(slot)
        while released is not None and loop.time() - released < _RELEASE_GRACE:
            await asyncio.sleep(0.05)
            if not await self._slot_busy(slot):
                return False
        return True

    async def _slot_busy(self, slot: int) -> bool:
        try:
            slots = await self.slots()
        except (HTTPStatusError, ConnectError, WaitTimeoutError, ProtocolError):
            return False  # /slots disabled, unreachable or slow: let the server queue us
        if not isinstance(slots, list) or not slots:
            return False
        entry = slots[slot % len(slots)]  # llama-server wraps id_slot the same way
        return isinstance(entry, dict) and bool(entry.get("is_processing"))

    async def _open(
        self, request: ChatRequest, body: bytes, ticket: object | None
    ) -> AsyncIterator[list[ChatEvent] | Response]:
        """Yield waiting events, then the streaming Response (status < 300). The caller holds
        ``ticket`` (its place in the slot's line) until the stream ends."""
        slot = request.slot
        if slot is not None and ticket is not None:
            async for ahead in self._slots.wait_turn(slot, ticket):
                yield [Queued(ahead)]
            busy = await self._slot_busy(slot)
            if busy and not request.wait:
                busy = await self._still_busy_after_us(slot)
                if busy:
                    raise BusyError(f"slot {slot} is busy")
            if busy:
                yield [Waiting(slot_busy=True)]
        async for item in self._attempts(body):
            yield item

    async def _attempts(self, body: bytes) -> AsyncIterator[list[ChatEvent] | Response]:
        config = self.config
        attempt = 0
        loading_since: float | None = None
        load_delay = 0.05
        loop = asyncio.get_running_loop()
        while True:
            try:
                async with asyncio.timeout(config.wait_timeout):
                    response = await self._request("POST", CHAT_PATH, body, stream=True)
            except TimeoutError:
                raise WaitTimeoutError(
                    f"no response headers within {config.wait_timeout} s"
                ) from None
            except TransportError as exc:
                error = f"{exc}"
                retry_after = None
                if attempt >= config.max_retries:
                    raise ConnectError(error) from exc
            else:
                if response.status < 300:
                    yield response
                    return
                try:
                    data = await self._read_all(response)
                except TransportError:
                    data = b""
                if response.status == 503 and b"Loading model" in data:
                    if loading_since is None:
                        loading_since = loop.time()
                        yield [Waiting(slot_busy=False)]
                    load_delay = await self._wait_loaded(loading_since, load_delay)
                    continue
                if response.status not in RETRYABLE_STATUS or attempt >= config.max_retries:
                    raise _status_error(response.status, data)
                error = f"HTTP {response.status}"
                retry_after = retry_after_seconds(response.header("retry-after"))
            attempt += 1
            delay = backoff_seconds(
                attempt, config.retry_backoff, config.retry_max_backoff, retry_after
            )
            yield [Retrying(attempt, int(delay * 1000), error)]
            await asyncio.sleep(delay)

    async def _wait_loaded(self, since: float, delay: float) -> float:
        """Poll ``/health`` with backoff until the model is loaded, or ``load_timeout``.
        Returns the next delay: the backoff goes on across calls, for a router whose
        ``/health`` is fine while the model behind it still answers 503."""
        loop = asyncio.get_running_loop()
        while True:
            if loop.time() - since > self.config.load_timeout:
                raise LoadTimeoutError(
                    f"the model was still loading after {self.config.load_timeout} s"
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
            try:
                status, _ = await self._call("GET", "/health")
            except (ConnectError, WaitTimeoutError):
                continue
            if status == 200:
                return delay


def _printable_ascii(text: str) -> bool:
    return text.isascii() and text.isprintable()


def _status_error(status: int, data: bytes) -> HTTPStatusError:
    text = data.decode("utf-8", "replace")
    try:
        error = _ERROR_DECODER.decode(data).error
    except (msgspec.DecodeError, msgspec.ValidationError):
        return HTTPStatusError(status, text)
    if error.type == "exceed_context_size_error":
        return ContextOverflowError(status, text, error.n_prompt_tokens, error.n_ctx)
    return HTTPStatusError(status, text)
