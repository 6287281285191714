"""Resumable streams: a connection that breaks mid-stream is picked up where it was.

Every streamed chat carries a fresh ``X-Conversation-Id``; llama-server then tees the
response into a session buffer (4 MiB, kept 300 s after the turn) and does not cancel the
generation when the connection drops. ``GET /v1/stream?conv_id=<id>&from=<offset>`` replays
the raw body bytes from ``offset`` and follows the live output, so counting the body bytes
received is all the bookkeeping needed: the SSE decoder and the assembler go on as if the
bytes had never stopped, whatever the cut split (an event, an HTTP chunk, a UTF-8 sequence).

``DELETE /v1/stream?conv_id=<id>`` cancels the generation: a stream that ends without its
Completion (closed, cancelled, failed) sends it, bounded and never raising, because with the
header set, closing the connection no longer frees the slot.

A server without the feature answers the route with a plain 404; that is learnt once per
client, and later cuts fail as fast as they did without resume.
"""

from __future__ import annotations

import secrets
from urllib.parse import quote

import anyio

from .._protocol.retry import backoff_seconds
from .._transports.base import Response, TransportError
from .._types.errors import ConnectError, ResumeError, StreamClosedEarlyError, WaitTimeoutError
from .endpoint import Endpoint

__all__ = [
    "CANCEL_TIMEOUT",
    "ResumeSupport",
    "ResumeUnsupported",
    "Resumer",
    "cancel_conversation",
    "new_conversation_id",
]

CANCEL_TIMEOUT = 2.0  # seconds for the DELETE that cancels an abandoned generation
LOOKUP_PATH = "/v1/streams/lookup"
_EMPTY_LOOKUP = b'{"conversation_ids":[]}'


def new_conversation_id() -> str:
    """A fresh random id: 128 bits, URL-safe."""
    return secrets.token_hex(16)


class ResumeUnsupported(Exception):
    """This server cannot resume streams (learnt now, or before by this client)."""


class ResumeSupport:
    """What a client has learnt about its server: None until a resume was tried."""

    __slots__ = ("supported",)

    def __init__(self) -> None:
        self.supported: bool | None = None


class Resumer:
    """One stream's conversation id, and the reconnects that pick it up after a cut."""

    __slots__ = ("_endpoint", "_support", "attempt", "conversation_id")

    def __init__(self, endpoint: Endpoint, support: ResumeSupport, conversation_id: str) -> None:
        self._endpoint = endpoint
        self._support = support
        self.conversation_id = conversation_id
        self.attempt = 0

    @property
    def api_key(self) -> str | None:
        """The client's API key: hidden from the text of the breaks this stream reports."""
        return self._endpoint.config.api_key

    @property
    def known_to_resume(self) -> bool:
        """This client has resumed a stream on this server before."""
        return self._support.supported is True

    def path(self, offset: int) -> str:
        return f"{_stream_path(self.conversation_id)}&from={offset}"

    @property
    def _attempts(self) -> int:
        """Reconnects allowed per stream: ``max_retries``, at least one."""
        return max(self._endpoint.config.max_retries, 1)

    def can_resume(self, error: TransportError) -> bool:
        """Whether a broken stream should be picked up: the server may support it and the
        attempts (``max_retries``) are not used up."""
        if self._support.supported is False or error.kind == "connect":
            return False
        return self.attempt < self._attempts

    async def reconnect(self, offset: int) -> Response:
        """``GET /v1/stream`` from ``offset`` (the first reconnect at once, later ones after a
        backoff); the streaming response, or ``ResumeError`` (session gone), or
        ``StreamClosedEarlyError`` (no resume here)."""
        config = self._endpoint.config
        while True:
            self.attempt += 1
            if self.attempt > 1:  # the first reconnect goes at once: the session is there
                await anyio.sleep(
                    backoff_seconds(self.attempt, config.retry_backoff, config.retry_max_backoff)
                )
            try:
                return await self._get(offset)
            except (TransportError, WaitTimeoutError) as exc:
                if self.attempt >= self._attempts:
                    raise StreamClosedEarlyError(f"could not reconnect: {exc}") from None

    async def _get(self, offset: int) -> Response:
        endpoint = self._endpoint
        stall = endpoint.config.stall_timeout
        try:
            with anyio.fail_after(endpoint.config.wait_timeout):
                response = await endpoint.send(
                    "GET", self.path(offset), read_timeout=stall
                )
        except TimeoutError:
            raise WaitTimeoutError("no answer to the resume request") from None
        if response.status < 300:
            self._support.supported = True
            return response
        data = await endpoint.read_all(response)
        if response.status == 404 and not await self._supported():
            raise ResumeUnsupported
        raise ResumeError(
            f"the stream could not be resumed at byte {offset}: HTTP {response.status} "
            f"{data[:200].decode('utf-8', 'replace')}"
        )

    async def _supported(self) -> bool:
        """Whether the server has resumable streams. Its 404 body is the same for a missing
        route and an expired session, so ask once: ``POST /v1/streams/lookup`` with no ids
        answers 200 ``[]`` where the routes exist, 404 where they do not."""
        support = self._support
        if support.supported is None:
            try:
                status, _ = await self._endpoint.call("POST", LOOKUP_PATH, _EMPTY_LOOKUP)
            except (ConnectError, WaitTimeoutError):
                return False  # cannot tell now; ask again next time
            support.supported = status == 200
        return support.supported

    async def cancel(self) -> None:
        """``DELETE /v1/stream``: stop the generation. Bounded, shielded, never raises; not
        sent to a server known not to resume (closing the connection stopped it there)."""
        if self._support.supported is not False:
            status = await cancel_conversation(self._endpoint, self.conversation_id)
            if status in (404, 405):  # llama-server always answers 204: no such route here
                self._support.supported = False


async def cancel_conversation(endpoint: Endpoint, conversation_id: str) -> int | None:
    """Ask the server to stop the generation of ``conversation_id``: the HTTP status, or None
    without an answer. Bounded by ``CANCEL_TIMEOUT``, shielded from the caller's
    cancellation, never raises."""
    path = _stream_path(conversation_id)
    with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_TIMEOUT):
        try:
            status, _ = await endpoint.call("DELETE", path)
        except Exception:  # best effort, inside the caller's cleanup
            return None
        return status
    return None


def _stream_path(conversation_id: str) -> str:
    return f"/v1/stream?conv_id={quote(conversation_id)}"
