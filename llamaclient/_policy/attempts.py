"""Getting a streaming response: safe retries with backoff, and waiting out a loading model.

A request is retried only while nothing was generated (``_protocol/retry.py`` says when and
how long). ``503 Loading model`` is not a failure: it yields ``Waiting(slot_busy=False)`` once
and polls ``/health`` with backoff until ``load_timeout``. A server that refuses connections
while we wait for it to load has died: after as many refusals in a row as the retry policy
allows, ``ConnectError``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from typing import NamedTuple

import anyio

from .._protocol.models import router_error
from .._protocol.retry import RETRYABLE_STATUS, backoff_seconds, retry_after_seconds
from .._protocol.status import is_loading, status_error
from .._transports.base import Response, TransportError
from .._types.config import Config
from .._types.errors import (
    ConnectError,
    InferError,
    LoadTimeoutError,
    ProtocolError,
    ResumeError,
    StreamClosedEarlyError,
    WaitTimeoutError,
)
from .._types.events import ChatEvent, Resuming, Retrying, Waiting
from .endpoint import Endpoint
from .resume import Resumer, ResumeUnsupported
from .secret import hide_key, redact

__all__ = ["CHAT_PATH", "LoadingWait", "attempts", "hide_key", "redact"]

CHAT_PATH = "/v1/chat/completions"


class LoadingWait:
    """Polls ``/health`` with backoff while the model loads. The backoff goes on across calls,
    for a router whose ``/health`` is fine while the model behind it still answers 503."""

    def __init__(self, endpoint: Endpoint) -> None:
        self._endpoint = endpoint
        self.since: float | None = None
        self._delay = 0.05
        self._refused = 0

    async def wait(self) -> None:
        config = self._endpoint.config
        since = self.since = self.since if self.since is not None else anyio.current_time()
        while True:
            if anyio.current_time() - since > config.load_timeout:
                raise LoadTimeoutError(f"the model was still loading after {config.load_timeout} s")
            await anyio.sleep(self._delay)
            self._delay = min(self._delay * 2, 2.0)
            try:
                status, _ = await self._endpoint.call("GET", self._endpoint.model_path("/health"))
            except ConnectError as exc:
                self._refused += 1
                if self._refused > config.max_retries:
                    raise ConnectError(
                        f"the server stopped answering while the model loaded ({exc})"
                    ) from None
                continue
            except WaitTimeoutError:
                continue
            self._refused = 0
            if status == 200:
                return


class _Failed(NamedTuple):
    """An attempt that got no streaming response."""

    status: int | None  # None: the server was not reached
    data: bytes = b""
    error: str = ""
    retry_after: float | None = None
    location: str | None = None
    unanswered: TransportError | None = None  # reached the server, then no status line
    reached: bool = False  # the server may have read the request


async def attempts(
    endpoint: Endpoint,
    body: bytes,
    headers: Mapping[str, str] | None = None,
    resumer: Resumer | None = None,
    path: str = CHAT_PATH,
    model: str = "",
) -> AsyncGenerator[list[ChatEvent] | Response, None]:
    """Yield waiting events, then the streaming Response (status < 300). ``model``: the
    router model the chat names (its errors are typed for it)."""
    config = endpoint.config
    attempt = 0
    loading = LoadingWait(endpoint)
    while True:
        outcome = await _try_once(endpoint, config, body, headers, path)
        if isinstance(outcome, _Failed) and outcome.unanswered is not None:
            error = outcome.unanswered
            outcome = await _unanswered(error, resumer)
            if resumer is not None and not isinstance(outcome, _Failed):
                yield [Resuming(resumer.attempt, 0, redact(f"{error}", config.api_key))]
        if not isinstance(outcome, _Failed):
            yield outcome
            return
        status = outcome.status
        if status is not None and is_loading(status, outcome.data):
            if loading.since is None:
                yield [Waiting(slot_busy=False)]
            await loading.wait()
            continue
        if status is not None and (status not in RETRYABLE_STATUS or attempt >= config.max_retries):
            raise _status_error(model, status, outcome)
        if attempt >= config.max_retries:
            raise (StreamClosedEarlyError if outcome.reached else ConnectError)(outcome.error)
        attempt += 1
        delay = backoff_seconds(
            attempt, config.retry_backoff, config.retry_max_backoff, outcome.retry_after
        )
        yield [Retrying(attempt, int(delay * 1000), redact(outcome.error, config.api_key))]
        await anyio.sleep(delay)


def _status_error(model: str, status: int, outcome: _Failed) -> InferError:
    """The typed error of a failed answer; a router's own answers (unknown model, not
    loaded, model limit, failed load) when a model is named."""
    error = status_error(status, outcome.data, outcome.location)
    return router_error(error, model) if model else error


async def _try_once(
    endpoint: Endpoint,
    config: Config,
    body: bytes,
    headers: Mapping[str, str] | None,
    path: str = CHAT_PATH,
) -> Response | _Failed:
    """One POST: the Response when it is a success, else what failed."""
    try:
        with anyio.fail_after(config.wait_timeout):
            response = await endpoint.send(
                "POST",
                path,
                body,
                read_timeout=config.stall_timeout,
                headers=headers,
            )
    except TimeoutError:
        raise WaitTimeoutError(f"no response headers within {config.wait_timeout} s") from None
    except TransportError as exc:
        if exc.kind == "connect":  # nothing reached the server: safe to try again
            return _Failed(None, error=f"{exc}")
        if exc.kind == "protocol":
            raise ProtocolError(f"the response is not valid HTTP/1.1 ({exc})") from None
        return _Failed(None, error=f"{exc}", unanswered=exc)
    status = response.status
    if status < 300:
        return response
    try:
        data = await endpoint.read_all(response)
    except TransportError:
        data = b""
    retry_after = retry_after_seconds(response.header("retry-after"))
    return _Failed(status, data, f"HTTP {status}", retry_after, response.header("location"))


async def _unanswered(error: TransportError, resumer: Resumer | None) -> Response | _Failed:
    """The server may have read the request, and no status line came back: sending it again
    could run it twice. With resume, the server's session says what happened: if it has the
    turn, the stream goes on from its first byte; if not, the request was never started (or
    was dropped), and sending it again with the same conversation id is safe (a new request
    with the id cancels any old one)."""
    if resumer is None:
        raise StreamClosedEarlyError(f"no response: {error}") from None
    try:
        return await resumer.reconnect(0)
    except ResumeUnsupported:
        raise StreamClosedEarlyError(f"no response: {error}") from None
    except ResumeError:
        why = f"{error}; the server has no session for it: sending it again"
        return _Failed(None, error=why, reached=True)
