"""Client configuration: where the server is, body defaults, and the client's policies."""

from __future__ import annotations

import ssl
from typing import Literal

import msgspec

from .checks import at_least, check_sampling, check_url, header_name, positive, printable_ascii

__all__ = ["MAX_BODY_BYTES", "MAX_ERROR_BODY_BYTES", "MAX_EVENT_BYTES", "Config"]

MAX_EVENT_BYTES = 8 * 1024 * 1024  # one SSE event (a data line is one JSON chunk)
MAX_BODY_BYTES = 8 * 1024 * 1024  # a whole 2xx answer that is not a stream
MAX_ERROR_BODY_BYTES = 64 * 1024  # a non-2xx answer's body
_LIMITS = ("max_event_bytes", "max_body_bytes", "max_error_body_bytes")
_TRANSPORTS = ("auto", "asyncio", "httpx")


class Config(msgspec.Struct, frozen=True):
    """Where the server is and how the client behaves.

    Body defaults (``max_tokens``, ``temperature``, ``top_p``, ``top_k``) apply when a request
    leaves them None. Policies (all seconds unless said):

    - ``connect_timeout``: to open a TCP connection.
    - ``wait_timeout``: from sending to the response headers. llama-server sends nothing while
      a request is queued or deferred, or the model wakes from sleep. None waits forever.
    - ``stall_timeout``: once streaming, the longest silence (no bytes at all). None: forever.
    - ``load_timeout``: how long to wait for a model that is loading (503 ``Loading model``).
    - ``max_retries``: safe retries before any output (refused/reset connection, 503, 429).
    - ``retry_backoff``/``retry_max_backoff``: exponential backoff base and cap, with jitter.
    - ``resume``: streamed chats carry a fresh ``X-Conversation-Id``, so a connection that breaks
      mid-stream is picked up where it was (``Resuming``), and the generation survives the
      client (``Client.reattach``). Closing a stream cancels the generation explicitly. False:
      a cut connection is a ``StreamClosedEarlyError`` and closing it cancels, as usual.
    - ``thinking_budget``: reasoning tokens before the client ends the reasoning (None: no cap);
      ``thinking_grace``: tokens allowed past it before ``ThinkingOverrunError``.
    - ``transport``: ``"auto"`` (the default: ours under asyncio, httpx under trio or when a
      proxy from the environment applies), ``"asyncio"`` (our own HTTP/1.1 on asyncio
      protocols, ``http://`` and ``https://``, the cheapest per read), or ``"httpx"``.
    - ``tls``: how an ``https://`` server is verified (by either transport): None (the
      default) checks its certificate against the system's CAs; a ``str`` is the path of a
      CA bundle file (PEM) to check it against instead (a private CA, a self-signed
      certificate); an :class:`ssl.SSLContext` is used as given (client certificates,
      pinning, or turning verification off at your own risk).
    - ``session_header``: the header that carries a turn's affinity, so a load balancer in
      front of several servers can keep a session on one of them (nginx ``hash
      $http_x_session_id consistent``, HAProxy ``balance hdr(X-Session-Id)``): the request's
      ``session``, else the stream's conversation id (resume on), on the chat and on every
      request of its turn (the resume, the cancel, the slot and health looks). A session
      that is not short visible ASCII is sent as ``sha256:`` and its hash. None: not sent.
    - ``affinity_cookie``: for a balancer that pins by cookie (HAProxy ``cookie NAME
      insert``), the name of its cookie. The client keeps that one cookie, per session
      (a turn without one keeps it for its own requests), and sends it back; every other
      ``Set-Cookie`` is ignored. None (the default): no cookie is kept.
    - ``preflight``: count each chat's prompt on the server before sending it (the template
      applied, tools and all: ``Client.count_tokens``), and raise ``ContextOverflowError``
      at once, with the numbers, when it and ``max_tokens`` do not fit a slot's context
      (``n_ctx`` from ``/props``); a ``ChatRequest(preflight=...)`` decides for itself.
      Off by default: the count is one more exchange before every chat.

    Memory limits (bytes; whatever the server sends, the client holds no more than these,
    and crossing one is a ``ProtocolError`` that names it):

    - ``max_event_bytes`` (8 MiB): one server-sent event, i.e. one streamed JSON chunk (or one
      line of the stream while it has no end yet). llama-server's chunks are a few hundred
      bytes; a tool call's arguments arrive in many small chunks.
    - ``max_body_bytes`` (8 MiB): a whole 2xx answer that is not a stream (a non-streamed
      chat answer, ``/health``, ``/props``, ``/slots``, control calls).
    - ``max_error_body_bytes`` (64 KiB): the body of a non-2xx answer (it becomes
      ``HTTPStatusError.body``). Reading stops there and the connection is closed.

    Every value is checked when the ``Config`` is made: a bad one (a ``base_url`` without
    ``http://``, a negative timeout, a ``top_p`` above 1, ...) is a ``ValueError`` naming the
    field. The API key is sent only to ``base_url`` and never appears in a repr.
    """

    base_url: str
    model: str = ""
    api_key: str | None = msgspec.field(default=None)
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    connect_timeout: float = 10.0
    wait_timeout: float | None = 600.0
    stall_timeout: float | None = 120.0
    load_timeout: float = 600.0
    max_retries: int = 3
    retry_backoff: float = 0.25
    retry_max_backoff: float = 8.0
    resume: bool = True
    thinking_budget: int | None = None
    thinking_grace: int = 256
    transport: Literal["auto", "asyncio", "httpx"] = "auto"
    tls: ssl.SSLContext | str | None = None
    max_event_bytes: int = MAX_EVENT_BYTES
    max_body_bytes: int = MAX_BODY_BYTES
    max_error_body_bytes: int = MAX_ERROR_BODY_BYTES
    session_header: str | None = "X-Session-Id"
    affinity_cookie: str | None = None
    preflight: bool = False

    def __post_init__(self) -> None:
        for name in _LIMITS:
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be a positive int (bytes), not {value!r}")
        check_url("Config", "base_url", self.base_url)
        if self.api_key is not None and not printable_ascii(self.api_key):
            # Checked here so no HTTP stack ever puts the key into an error message.
            raise ValueError("api_key must be printable ASCII (the value is not shown)")
        check_sampling("Config", self)
        positive("Config", "connect_timeout", self.connect_timeout)
        for name in ("wait_timeout", "stall_timeout"):
            positive("Config", name, getattr(self, name), optional=True)
        positive("Config", "load_timeout", self.load_timeout)
        if type(self.max_retries) is not int or self.max_retries < 0:
            raise ValueError(f"Config.max_retries must be an int >= 0, not {self.max_retries!r}")
        for name in ("retry_backoff", "retry_max_backoff", "thinking_budget", "thinking_grace"):
            at_least("Config", name, getattr(self, name), 0)
        header_name("Config", "session_header", self.session_header)
        header_name("Config", "affinity_cookie", self.affinity_cookie)
        if self.transport not in _TRANSPORTS:
            raise ValueError(
                f"Config.transport must be one of {_TRANSPORTS}, not {self.transport!r}"
            )

    def __rich_repr__(self) -> list[tuple[str, object]]:
        return [(name, _shown(self, name)) for name in self.__struct_fields__]

    def __repr__(self) -> str:
        fields = []
        for name in self.__struct_fields__:
            fields.append(f"{name}={_shown(self, name)!r}")
        return f"Config({', '.join(fields)})"


def _shown(config: Config, name: str) -> object:
    value = getattr(config, name)
    return "***" if name == "api_key" and value is not None else value
