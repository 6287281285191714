"""Getting a streaming answer to the chat: ``POST /v1/chat/completions``, and what each
answer means before any output.

A request is retried only while nothing was generated: a refused connection, or 429, 502,
503 (not ``Loading model``, which is waited out) and 504 (``_protocol/retry.py``), with
backoff and ``Retrying``. A request the server may have read and not answered is never sent
twice blindly: with resume, the server's session says whether it has the turn (it then goes
on from its first byte); without a session it is sent again with the same conversation id,
which cancels any half-started one.
"""

from __future__ import annotations

from .._protocol.models import router_error
from .._protocol.proxies import proxy_of
from .._protocol.retry import RETRYABLE_STATUS, retry_after_seconds
from .._protocol.status import is_loading, status_error
from .._types.errors import ContextOverflowError, ResumeError
from .._types.events import Resuming as ResumingEvent
from .before import look
from .commands import ReadAll, Send
from .failures import typed_error
from .history import CacheWatch
from .phase import Backoff, Context, Header, HealthWait, Phase
from .resuming import Resuming, resumable
from .streaming import Streaming, WholeBody

__all__ = ["CHAT_PATH", "Opening", "stream"]

# How a router refuses ``?autoload=false`` for a model that is not ready: 400 "model is not
# loaded", the loading child's 503, or 500 (the child not listening yet, or it failed).
_NOT_READY = frozenset({400, 500, 503})

CHAT_PATH = "/v1/chat/completions"


def stream(ctx: Context) -> Streaming:
    """The phase that reads a streamed answer (and picks it up when it breaks); with the
    session's previous turn known, its events are watched for a cache miss."""
    history, session = ctx.plan.history, ctx.request.session
    past = history.previous(session) if history is not None and session else None
    if past is not None:
        ctx.plan.processors.append(CacheWatch(past, lambda: (ctx.request, ctx.config.base_url)))
    return Streaming(ctx, _break)


def _break(streaming: Streaming, kind: str, message: str) -> Phase | None:
    ctx = streaming.ctx
    if not resumable(ctx, kind):
        return None
    event = ResumingEvent(ctx.resumes + 1, ctx.offset, ctx.redacted(message))
    return Resuming(
        ctx,
        streamed=streaming.resumed,
        unsupported=lambda: Streaming.failed(_without_resume(streaming), kind, message),
        gone=lambda why: ctx.fail(ResumeError(why)),
        event=event,
        early=ctx.known.resume is True,
    )


def _proxied(ctx: Context, header: Header) -> None:
    """The first answer through a proxy: said once per client (``Proxied``), and nothing
    is resumed from then on (the proxy passes neither the conversation id nor the routes)."""
    proxied = ctx.proxied = proxy_of(header)
    if proxied is not None:
        ctx.known.proxy = proxied.proxy
        ctx.known.resume = False
        ctx.events.append(proxied)


def _without_resume(streaming: Streaming) -> Streaming:
    streaming._breaks = None  # a server without resume: the break ends the turn, as it is
    return streaming


class Opening(Phase):
    """``POST /v1/chat/completions`` (attempt ``attempt``; ``reached``: an earlier attempt
    may have reached the server)."""

    __slots__ = ("_after", "_attempt", "_location", "_reached", "_status")
    name = "sending the chat"

    def __init__(self, ctx: Context, attempt: int = 0, reached: bool = False) -> None:
        config = ctx.config
        headers = ctx.affinity
        conversation = ctx.plan.conversation_id
        if conversation is not None:
            headers = (*headers, ("X-Conversation-Id", conversation))
        autoload = ctx.request.autoload and not ctx.optimistic
        path = CHAT_PATH if autoload else f"{CHAT_PATH}?autoload=false"
        send = Send("POST", path, ctx.body, headers, config.wait_timeout, config.stall_timeout)
        super().__init__(ctx, send)
        self._attempt = attempt
        self._reached = reached
        self._status = 0
        self._after: float | None = None
        self._location: str | None = None

    def opened(self, status: int, header: Header) -> Phase:
        ctx = self.ctx
        ctx.open = True
        if ctx.known.proxy is None:
            _proxied(ctx, header)
        if status < 300:
            ctx.generating = True
            if "text/event-stream" in (header("content-type") or "").lower():
                return stream(ctx)
            return WholeBody(ctx, status)
        self._status = status
        self._after = retry_after_seconds(header("retry-after"), header("date"))
        self._location = header("location")
        self.command = ReadAll(ctx.config.max_error_body_bytes)
        return self

    def body(self, data: bytes, truncated: bool) -> Phase:
        """The body of a non-2xx answer (a body over ``max_error_body_bytes`` is cut there:
        the error holds its start)."""
        ctx = self.ctx
        status = self._status
        if not status:
            self._unexpected("body")
        ctx.open = False
        if ctx.optimistic and status in _NOT_READY:  # a router's model is not running
            attempt, reached = self._attempt, self._reached
            return look(ctx, lambda: Opening(ctx, attempt, reached))
        ctx.optimistic = False
        if is_loading(status, data):
            return HealthWait(ctx, lambda: Opening(ctx, self._attempt, self._reached))
        if status in RETRYABLE_STATUS and self._attempt < ctx.config.max_retries:
            return self._retry(f"HTTP {status}", self._after)
        error = status_error(status, data, self._location)
        if isinstance(error, ContextOverflowError):  # the numbers, as the pre-flight gives them
            asked = ctx.request.max_tokens
            error.max_tokens = ctx.config.max_tokens if asked is None else asked
        if truncated:  # the start of the body is kept; the error says it was cut
            limit = ctx.config.max_error_body_bytes
            error.args = (f"{error} (the body was cut at max_error_body_bytes, {limit} bytes)",)
        return ctx.fail(router_error(error, ctx.model) if ctx.model else error)

    def failed(self, kind: str, message: str) -> Phase:
        ctx = self.ctx
        if ctx.open:  # the error body broke off: judge the status alone (a stall is one)
            if kind == "stall":
                ctx.open = False
                stall = ctx.config.stall_timeout
                return ctx.fail(typed_error(kind, message, "body", timeout=stall))
            return self.body(b"", False)
        if kind == "connect":  # nothing reached the server: safe to try again
            if self._attempt < ctx.config.max_retries and ctx.server is None:
                return self._retry(message)
            return ctx.fail(typed_error(kind, message, "resent" if self._reached else "open"))
        if kind in ("timeout", "protocol"):
            return ctx.fail(typed_error(kind, message, "open", timeout=ctx.config.wait_timeout))
        return self._unanswered(message)

    def _retry(self, error: str, retry_after: float | None = None) -> Phase:
        ctx, attempt, reached = self.ctx, self._attempt + 1, self._reached
        return Backoff(ctx, attempt, error, lambda: Opening(ctx, attempt, reached), retry_after)

    def _unanswered(self, message: str) -> Phase:
        """The server may have read the request, and no status line came back: sending it
        again could run it twice. The server's session says what happened."""
        ctx = self.ctx
        ctx.generating = True  # it may have started: the cleanup cancels it
        if ctx.plan.conversation_id is None or ctx.known.resume is False:
            return ctx.fail(typed_error("read", message, "unanswered"))
        event = ResumingEvent(ctx.resumes + 1, 0, ctx.redacted(message))

        def gone(why: str) -> Phase:
            # The server has no session for it: it never started (or dropped it), and the
            # same conversation id cancels any half-started one.
            again = f"{message}; the server has no session for it: sending it again"
            if self._attempt < ctx.config.max_retries:
                return Opening(ctx, self._attempt, True)._retry(again)
            return ctx.fail(typed_error("read", again, "resent"))

        return Resuming(
            ctx,
            streamed=lambda: stream(ctx),
            unsupported=lambda: ctx.fail(typed_error("read", message, "unanswered")),
            gone=gone,
            event=event,
            early=False,
        )
