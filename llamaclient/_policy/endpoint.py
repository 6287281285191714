"""One llama-server as the policies see it: its URL, the headers we send, the HTTP stack, and
the small request/response exchanges (``/health``, ``/slots``, ``/props``, control calls)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from .._protocol.models import model_query
from .._protocol.status import status_error
from .._protocol.wire import ANY_DECODER
from .._transports.base import Response, Transport, TransportError
from .._transports.choose import choose_transport, current_backend
from .._types.config import Config
from .._types.errors import (
    RAW_KEPT,
    ConnectError,
    ProtocolError,
    StalledError,
    WaitTimeoutError,
)
from .secret import hide_key

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
        # identity: we never ask for compression (a proxy that forces it is decoded or named).
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
            "Accept-Encoding": "identity",
        }
        if config.api_key:
            headers["Authorization"] = f"Bearer {config.api_key}"
        self.headers: Mapping[str, str] = headers

    @property
    def transport(self) -> Transport:
        transport = self._transport
        if transport is None:
            transport = self._transport = choose_transport(
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
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        """One request; a stale pooled connection is retried once on a fresh one (nothing
        reached the model, so that is always safe). ``headers`` replace the defaults."""
        url = self.base + path
        if headers is None:
            headers = self.headers
        transport = self.transport
        try:
            return await transport.send(method, url, headers, body, read_timeout=read_timeout)
        except TransportError as exc:
            if exc.kind != "disconnected":
                raise
        return await transport.send(method, url, headers, body, read_timeout=read_timeout)

    async def call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        """A small request/response exchange, bounded by ``wait_timeout``."""
        wait = self.config.wait_timeout
        try:
            with anyio.fail_after(wait):
                response = await self.send(method, path, body)
                try:
                    data = await self._read_bounded(response)
                finally:
                    await response.aclose()
        except TimeoutError:
            raise WaitTimeoutError(f"{method} {path}: no answer within {wait} s") from None
        except TransportError as exc:
            raise ConnectError(f"{method} {path}: {exc}") from None
        return response.status, data

    async def read_all(self, response: Response) -> bytes:
        """The whole body of a response whose headers are in, then release it; bounded by
        ``stall_timeout`` (a body that stops half-way never hangs the caller) and in size
        (see :meth:`_read_bounded`)."""
        stall = self.config.stall_timeout
        try:
            with anyio.fail_after(stall):
                return await self._read_bounded(response)
        except TimeoutError:
            raise StalledError(f"no bytes for {stall} s while reading a response body") from None
        finally:
            with anyio.CancelScope(shield=True):
                await response.aclose()

    async def _read_bounded(self, response: Response) -> bytes:
        """The whole body, at most ``max_body_bytes`` for a 2xx answer and
        ``max_error_body_bytes`` for any other: past that, reading stops (the caller closes
        the response, and so the connection) with a ``ProtocolError`` naming the limit."""
        config = self.config
        status = response.status
        if status < 300:
            name, limit = "max_body_bytes", config.max_body_bytes
        else:
            name, limit = "max_error_body_bytes", config.max_error_body_bytes
        pieces: list[bytes] = []
        size = 0
        while piece := await response.read():
            size += len(piece)
            pieces.append(piece)
            if size > limit:
                head = _head(pieces, RAW_KEPT)
                pieces.clear()  # the error's traceback must not keep the body alive
                raise ProtocolError(
                    f"the body of an HTTP {status} answer is longer than {name} ({limit} bytes)",
                    head,
                )
        return b"".join(pieces)

    def model_path(self, path: str) -> str:
        """``path`` with ``?model=`` naming the configured model (a router proxies the GET to
        that model's server), unchanged without one."""
        return model_query(path, self.config.model)

    async def get_json(self, path: str) -> Any:
        """``GET path`` (with ``?model=``, see :meth:`model_path`), decoded."""
        path = self.model_path(path)
        status, data = await self.call("GET", path)
        if status >= 400:
            error = status_error(status, data)
            hide_key(error, self.config.api_key)  # a proxy's error page may quote the headers
            raise error
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

