"""One llama-server as the driver sees it: its URL, the headers we send, the HTTP stack, and
the small request/response exchanges (``/health``, ``/slots``, ``/props``, control calls).

Failures stay ``TransportError`` here (the turn decides what they mean); the client's own
helpers (``health()``, ``props()``, ...) get typed errors from the same mapper the turns use
(``_turn/failures.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from .._protocol.models import model_query
from .._protocol.status import status_error
from .._protocol.wire import ANY_DECODER
from .._transports.base import Response, TimedTransport, Transport, TransportError
from .._transports.choose import choose_transport, current_backend
from .._turn.failures import typed_error
from .._turn.known import Known
from .._turn.secret import hide_key
from .._types.config import Config
from .._types.errors import RAW_KEPT, InferError, ProtocolError

if TYPE_CHECKING:
    import httpx

__all__ = ["Endpoint"]


class Endpoint:
    """Where the server is and how to talk to it. The transport is chosen on first use,
    inside the event loop, so the same ``Client`` works under asyncio and trio."""

    def __init__(
        self,
        config: Config,
        *,
        http_client: httpx.AsyncClient | None = None,
        transport: Transport | None = None,
    ) -> None:
        self.config = config
        base = config.base_url.rstrip("/")
        self.base = base[:-3] if base.endswith("/v1") else base
        self._http_client = http_client
        self._transport = transport
        self._timed: TimedTransport | None = None  # ours: it bounds the wait for a head
        # identity: we never ask for compression (a proxy that forces it is decoded or named).
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
            "Accept-Encoding": "identity",
        }
        if config.api_key:
            headers["Authorization"] = f"Bearer {config.api_key}"
        self.headers: Mapping[str, str] = headers
        self.known: Known | None = None  # what the client learnt (a proxy in the way)

    @property
    def transport(self) -> Transport:
        transport = self._transport
        if transport is None:
            transport = self._transport = self._timed = choose_transport(
                self.config, backend=current_backend(), http_client=self._http_client
            )
        return transport

    @property
    def transport_name(self) -> str:
        """The chosen transport's class name, or ``"auto"`` before the first request."""
        return "auto" if self._transport is None else type(self._transport).__name__

    async def aclose(self) -> None:
        if self._transport is not None:
            await self._transport.aclose()

    async def send(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        *,
        read_timeout: float | None = None,
        head_timeout: float | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        """One request, its head within ``head_timeout`` (else ``TransportError("timeout")``);
        a stale pooled connection is retried once on a fresh one (nothing reached the model,
        so that is always safe). ``headers`` replace the defaults."""
        url = self.base + path
        if headers is None:
            headers = self.headers
        for last in (False, True):
            try:
                return await self._send(method, url, headers, body, read_timeout, head_timeout)
            except TransportError as exc:
                if exc.kind != "disconnected" or last:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def _send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        read_timeout: float | None,
        head_timeout: float | None,
    ) -> Response:
        transport = self.transport
        timed = self._timed
        if timed is not None:  # ours: one timer, no cancel scope (part of every stream)
            return await timed.send(
                method, url, headers, body, read_timeout=read_timeout, head_timeout=head_timeout
            )
        try:
            with anyio.fail_after(head_timeout):
                response = await transport.send(
                    method, url, headers, body, read_timeout=read_timeout
                )
        except TimeoutError:
            raise TransportError("timeout", "no response head in time") from None
        if Response in type(response).__mro__:
            return response
        return _Plain(response)  # a transport of your own, written before the defaults

    async def exchange(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        *,
        limit: int = 0,
        headers: Mapping[str, str] | None = None,
        heard: Callable[[Response], None] | None = None,
    ) -> tuple[int, bytes, bool]:
        """A small request/response exchange, bounded as a whole by ``wait_timeout``: the
        status, the body (at most ``limit`` bytes; 0: the config's limit for its status)
        and whether it was cut there (``headers``: see :meth:`send`; ``heard`` sees the
        response once its head is in). Raises ``TransportError`` (``"timeout"`` past the
        bound)."""
        try:
            with anyio.fail_after(self.config.wait_timeout):
                response = await self.send(method, path, body, headers=headers)
                try:
                    if heard is not None:
                        heard(response)
                    data, cut = await self.read_bounded(response, limit)
                finally:
                    await response.aclose()
        except TimeoutError:
            raise TransportError("timeout", "no answer in time") from None
        return response.status, data, cut

    def limit(self, status: int) -> int:
        """The size bound of a whole body: ``max_body_bytes`` for a 2xx answer,
        ``max_error_body_bytes`` for any other."""
        config = self.config
        return config.max_body_bytes if status < 300 else config.max_error_body_bytes

    async def read_bounded(self, response: Response, limit: int = 0) -> tuple[bytes, bool]:
        """The whole body, at most ``limit`` bytes (0: :meth:`limit`); past that, reading
        stops (the caller closes the response, and so the connection) and the start is
        returned, ``True`` for cut."""
        limit = limit or self.limit(response.status)
        pieces: list[bytes] = []
        size = 0
        while piece := await response.read():
            size += len(piece)
            pieces.append(piece)
            if size > limit:
                return _head(pieces, limit), True
        return b"".join(pieces), False

    # -- the client's own helpers ---------------------------------------------------------
    async def call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        """:meth:`exchange`, with typed errors (``ConnectError``, ``WaitTimeoutError``; a
        2xx body over ``max_body_bytes`` is a ``ProtocolError``)."""
        try:
            status, data, cut = await self.exchange(method, path, body)
        except TransportError as exc:
            what = f"{method} {path}"
            timeout = self.config.wait_timeout
            raise typed_error(exc.kind, f"{exc}", "call", timeout=timeout, what=what) from None
        if cut and status < 300:
            limit = self.config.max_body_bytes
            raise ProtocolError(
                f"the body of an HTTP {status} answer is longer than max_body_bytes "
                f"({limit} bytes)",
                data[:RAW_KEPT],
            )
        return status, data

    def model_path(self, path: str) -> str:
        """``path`` with ``?model=`` naming the configured model (a router proxies the GET to
        that model's server), unchanged without one."""
        return model_query(path, self.config.model)

    async def get_bytes(self, path: str) -> bytes:
        """``GET path`` (with ``?model=``, see :meth:`model_path`): the body of a 2xx answer,
        else its typed error."""
        status, data = await self.call("GET", self.model_path(path))
        if status >= 400:
            raise self._error(status, data, path)
        return data

    async def post(self, path: str, body: bytes) -> bytes:
        """``POST path`` (``?model=`` as for a GET): a 2xx answer's body, else its typed
        error."""
        status, data = await self.call("POST", self.model_path(path), body)
        if status >= 400:
            raise self._error(status, data, path)
        return data

    def _error(self, status: int, data: bytes, path: str) -> InferError:
        """The typed error of a non-2xx answer to ``path``, the key hidden (a proxy's error
        page may quote the headers); a 404 through a known proxy says why."""
        error = status_error(status, data)
        proxy = self.known.proxy if self.known is not None else None
        if status == 404 and proxy is not None:
            error.args = (f"{error} ({proxy} is a proxy: it passes on no {path})",)
        hide_key(error, self.config.api_key)
        return error

    def json_body(self, body: Any) -> bytes:
        """``body`` as JSON, for a router that finds the model in the body: a ``dict`` gets
        ``Config.model`` as its ``"model"`` when it names none."""
        if self.config.model and isinstance(body, dict) and "model" not in body:
            body = {**body, "model": self.config.model}
        return msgspec.json.encode(body)

    async def post_json(self, path: str, body: Any) -> Any:
        """``POST path`` with the JSON ``body`` (``?model=`` as for a GET, and the model in a
        ``dict`` body, see :meth:`json_body`), decoded; a non-2xx answer is its typed
        error."""
        data = await self.post(path, self.json_body(body))
        path = self.model_path(path)
        try:
            return ANY_DECODER.decode(data)
        except (msgspec.DecodeError, RecursionError):
            raise ProtocolError(f"POST {path}: the answer is not JSON", data) from None

    async def get_json(self, path: str) -> Any:
        """``GET path`` (with ``?model=``, see :meth:`model_path`), decoded."""
        data = await self.get_bytes(path)
        path = self.model_path(path)
        try:
            return ANY_DECODER.decode(data)
        except (msgspec.DecodeError, RecursionError) as exc:
            why = "nested too deeply" if isinstance(exc, RecursionError) else "not JSON"
            raise ProtocolError(f"GET {path}: the answer is {why}", data) from None


def _head(pieces: list[bytes], size: int) -> bytes:
    """The first ``size`` bytes of ``pieces`` joined, without joining them all."""
    kept: list[bytes] = []
    for piece in pieces:
        kept.append(piece[:size])
        size -= len(kept[-1])
        if not size:
            break
    return b"".join(kept)


class _Plain(Response):
    """A response of a transport of your own that does not subclass :class:`Response`: its
    members, with the defaults of the ones it lacks (not ``fair_reads``, never
    ``complete``)."""

    __slots__ = ("_response",)

    def __init__(self, response: Response) -> None:
        self._response = response

    @property
    def status(self) -> int:
        return self._response.status

    def header(self, name: str) -> str | None:
        return self._response.header(name)

    async def read(self) -> bytes:
        return await self._response.read()

    async def aclose(self) -> None:
        await self._response.aclose()
