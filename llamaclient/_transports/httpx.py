"""A transport over an ``httpx.AsyncClient``: yours (not closed by us), or one we make.

This is the stack for trio, for proxies and for whatever a user configures on their own
client (custom TLS, mounts, respx in tests). httpx's exceptions are mapped here, once, to
our :class:`~llamaclient._transports.base.TransportError` with our own text: an httpx
exception's repr is never copied into a message.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Mapping
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import TYPE_CHECKING

import anyio
import httpx

from .._protocol.http11 import MAX_DECODED, Http11Error, content_decoder
from .base import KEEPALIVE_SECONDS, Response, TransportError, TransportErrorKind

if TYPE_CHECKING:
    from .._protocol.http11 import _Decoder as ContentDecoder

__all__ = ["HttpxTransport", "map_error"]


def map_error(exc: httpx.TransportError, started: bool, reused: bool = False) -> TransportError:
    """Our error for an httpx failure; ``started``: the response head had arrived;
    ``reused``: the request went out on a pooled connection (a "disconnected" one may then be
    retried silently; on a fresh connection the server may have read the request)."""
    kind: TransportErrorKind
    if isinstance(exc, httpx.TimeoutException) and started:
        kind, what = "stall", "no bytes within the read timeout"
    elif isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
        kind, what = "connect", "cannot connect"
    elif started and isinstance(exc, httpx.RemoteProtocolError) and not _cut(exc):
        kind, what = "protocol", "the response broke HTTP/1.1 framing"  # as ours says it
    elif started:
        kind, what = "read", "the response body broke"
    elif isinstance(exc, httpx.ProxyError):
        kind, what = "connect", "the proxy refused the request"
    elif isinstance(exc, httpx.RemoteProtocolError) and "without sending" not in str(exc):
        kind, what = "protocol", "the response is not valid HTTP"
    elif reused:
        kind, what = "disconnected", "the pooled connection was closed before a response"
    else:
        kind, what = "read", "the server closed the connection before responding"
    return TransportError(kind, f"{what} ({type(exc).__name__})")


def _cut(exc: httpx.RemoteProtocolError) -> bool:
    """Whether h11 complains of a connection that ended early ("peer closed connection
    without sending complete message body", "peer unexpectedly closed connection"), not of
    bytes that break the framing."""
    return "closed connection" in str(exc)


async def _response(response: httpx.Response) -> Response:
    """Ours for httpx's response: raw bytes, or decoded when the body has a content coding
    (one we decode, like our own transport; another one is refused before the body)."""
    coding = response.headers.get("content-encoding")
    if coding is None:
        return _HttpxResponse(response)
    try:
        decoder = content_decoder(coding)
    except Http11Error as exc:
        await response.aclose()
        raise TransportError("protocol", f"bad response from the server: {exc}") from None
    return _HttpxResponse(response) if decoder is None else _DecodedResponse(response, decoder)


def _verify(tls: ssl.SSLContext | str | None) -> ssl.SSLContext | bool:
    """``Config.tls`` as httpx's ``verify``: a context as given, a CA bundle path loaded."""
    if tls is None:
        return True
    if isinstance(tls, ssl.SSLContext):
        return tls
    return ssl.create_default_context(cafile=tls)


class _HttpxResponse(Response):
    __slots__ = ("_chunks", "_response")

    # Not fair_reads (see Response): httpcore hands out the HTTP chunks h11 already holds
    # without touching the socket, so many reads in a row may never suspend.

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self._chunks: AsyncIterator[bytes] | None = None

    @property
    def status(self) -> int:
        return self._response.status_code

    def header(self, name: str) -> str | None:
        value: str | None = self._response.headers.get(name)
        return value

    async def read(self) -> bytes:
        if self._chunks is None:
            self._chunks = _body(self._response)
        try:
            while True:
                chunk = await self._chunks.__anext__()
                if chunk:
                    return chunk
        except StopAsyncIteration:
            return b""
        except httpx.TransportError as exc:
            error = map_error(exc, started=True)
        except httpx.StreamError as exc:
            error = TransportError("read", f"the response was closed ({type(exc).__name__})")
        # Raised outside the handler: httpx's exception (its request holds the headers, and
        # so the API key) is not kept as the context of ours.
        raise error

    async def aclose(self) -> None:
        await self._response.aclose()


def _body(response: httpx.Response) -> AsyncIterator[bytes]:
    """The body's pieces: streamed, or the whole body of a response that is read already (an
    ``httpx.Response(200, json=...)`` that your own transport or a mock returns)."""
    try:
        content = response.content
    except httpx.ResponseNotRead:
        return response.aiter_raw().__aiter__()
    return _once(content)


async def _once(content: bytes) -> AsyncIterator[bytes]:
    yield content


class _DecodedResponse(_HttpxResponse):
    """A gzip or deflate body, decoded as our own transport decodes it (the same codings,
    the same errors): httpx's raw bytes through :mod:`~llamaclient._protocol.http11`'s
    decoder. Only a body with a ``Content-Encoding`` takes this path."""

    __slots__ = ("_decoder", "_rest")

    def __init__(self, response: httpx.Response, decoder: ContentDecoder) -> None:
        super().__init__(response)
        self._decoder = decoder
        self._rest = b""

    async def read(self) -> bytes:
        decoder = self._decoder
        while True:
            data = self._rest or await super().read()
            if not data:
                if not decoder.finished:
                    raise TransportError("protocol", f"the {decoder.coding} body is truncated")
                return b""
            try:
                out, self._rest = decoder.decode(data, MAX_DECODED)
            except Http11Error as exc:
                raise TransportError("protocol", f"bad response from the server: {exc}") from None
            if out:
                return out


class HttpxTransport:
    """A transport over an ``httpx.AsyncClient``: the one you pass (not closed by us), or ours."""

    def __init__(
        self,
        client: httpx.AsyncClient | None = None,
        connect_timeout: float | None = 10.0,
        *,
        tls: ssl.SSLContext | str | None = None,
    ) -> None:
        self._owned = client is None
        self._client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(None, connect=connect_timeout),
            limits=httpx.Limits(max_connections=None, keepalive_expiry=KEEPALIVE_SECONDS),
            follow_redirects=False,
            verify=_verify(tls),
            cookies=_no_cookies(),
        )

    async def send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        *,
        read_timeout: float | None = None,
        head_timeout: float | None = None,
    ) -> Response:
        client = self._client
        if method.upper() == "POST" and not any(k.lower() == "connection" for k in headers):
            # llama-server closes the connection after every streamed answer (measured): a
            # pooled one would only fail on its next use, so ask for the close up front.
            headers = {**headers, "Connection": "close"}
        request = client.build_request(method, url, headers=headers, content=body)
        # The wait for the head is the caller's (wait_timeout: llama-server is silent while a
        # request is queued); the read timeout bounds each body read only. httpcore reads the
        # timeout for the body when the body is first iterated, from this same dict.
        timeouts = dict(request.extensions.get("timeout") or {})
        request.extensions["timeout"] = {**timeouts, "read": None}
        reused = self._has_idle(request.url)
        try:
            with anyio.fail_after(head_timeout):
                response = await client.send(request, stream=True, follow_redirects=False)
        except TimeoutError:
            error = TransportError("timeout", "no response head in time")
        except httpx.TransportError as exc:
            error = map_error(exc, started=False, reused=reused)
        else:
            request.extensions["timeout"] = {**timeouts, "read": read_timeout}
            return await _response(response)
        raise error  # outside the handler: httpx's exception is not kept as its context

    def _has_idle(self, url: httpx.URL) -> bool:
        """Whether httpcore holds an idle connection to ``url``'s origin (it will reuse it).
        Only known for the transport httpx makes itself; otherwise False, which is safe: a
        failure is then never taken for a stale connection."""
        pool = getattr(self._client, "_transport", None)
        pool = getattr(pool, "_pool", None)
        connections = getattr(pool, "connections", None)
        if not isinstance(connections, list):
            return False
        default_port = 443 if url.scheme == "https" else 80
        origin = (url.scheme.encode(), url.raw_host, url.port or default_port)
        for conn in connections:
            info = getattr(conn, "_origin", None)
            here = (info.scheme, info.host, info.port) if info is not None else None
            if here == origin and conn.is_idle():
                return True
        return False

    async def aclose(self) -> None:
        if self._owned:
            await self._client.aclose()


def _no_cookies() -> CookieJar:
    """A jar that keeps no cookie: a server's ``Set-Cookie`` is never sent back (as by our
    own transport); the one cookie a balancer pins by is the client's to keep
    (``Config.affinity_cookie``)."""
    return CookieJar(DefaultCookiePolicy(allowed_domains=[]))
