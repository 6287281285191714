"""The one place a transport failure becomes a typed error.

Every HTTP stack reports a :class:`~llamaclient._transports.base.TransportError` whose
``kind`` says how far the request got (``connect``, ``disconnected``, ``timeout``,
``protocol``, ``read``, ``stall``); what that means for the caller depends on where the turn
was, and is decided here only (after httpx's ``map_httpcore_exceptions``):

============  =====================  ========================  ==========================
kind          opening a stream       streaming a body          a small exchange, a body
============  =====================  ========================  ==========================
connect       ConnectError (retry)   StreamClosedEarlyError    ConnectError
timeout       WaitTimeoutError       WaitTimeoutError          WaitTimeoutError
protocol      ProtocolError          ProtocolError             ConnectError / Protocol
stall         StalledError           StalledError              StalledError
read, other   (unanswered: resume)   StreamClosedEarlyError    ConnectError
============  =====================  ========================  ==========================

Past those, a few ends the turn reaches after it has weighed a failure, each named by its
``where``, whatever the kind: ``unanswered`` (the server may have read the chat, no status
line came, and its session cannot say more: ``StreamClosedEarlyError``), ``resent`` (the
same after the chat was sent again), ``reconnect`` (the resumes ran out:
``StreamClosedEarlyError``), ``health`` (the server stopped answering while its model
loaded: ``ConnectError``), ``route`` (a pool has no server left: ``ConnectError``) and
``admit`` (no place came under a shared limit in time: ``WaitTimeoutError``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from .._types.completion import Completion
from .._types.errors import (
    ConnectError,
    InferError,
    ProtocolError,
    StalledError,
    StreamClosedEarlyError,
    WaitTimeoutError,
)

__all__ = ["Where", "typed_error"]

Where = Literal[
    "open", "stream", "call", "body", "unanswered", "resent", "reconnect", "health", "route",
    "admit",
]

_AFTER: dict[str, Callable[[str], InferError]] = {
    "unanswered": lambda message: StreamClosedEarlyError(f"no response: {message}"),
    "resent": StreamClosedEarlyError,
    "reconnect": lambda message: StreamClosedEarlyError(f"could not reconnect: {message}"),
    "health": lambda message: ConnectError(
        f"the server stopped answering while the model loaded (GET /health: {message})"
    ),
    "route": ConnectError,
    "admit": lambda message: WaitTimeoutError(f"no place under the concurrency limit: {message}"),
}


def typed_error(
    kind: str,
    message: str,
    where: Where,
    *,
    timeout: float | None = None,
    what: str = "",
    partial: Completion | None = None,
) -> InferError:
    """The typed error for a transport failure of ``kind`` (``message``: the transport's
    own text, never a third-party repr) at ``where``. ``timeout`` is the bound that ran out
    (a ``timeout`` or ``stall``), ``what`` the exchange (``"GET /slots"``)."""
    after = _AFTER.get(where)
    if after is not None:
        return after(message)
    if kind == "timeout":
        if where == "call":
            return WaitTimeoutError(f"{what}: no answer within {timeout} s")
        return WaitTimeoutError(f"no response headers within {timeout} s")
    if kind == "stall":
        during = "while streaming" if where == "stream" else "while reading a response body"
        return StalledError(f"no bytes for {timeout} s {during}", partial=partial)
    if where == "call":
        return ConnectError(f"{what}: {message}")
    if kind == "protocol":
        if where == "stream":
            why = f"the response broke HTTP/1.1 framing ({message})"
        else:
            why = f"the response is not valid HTTP/1.1 ({message})"
        return ProtocolError(why, partial=partial)
    if kind == "connect" and where == "open":
        return ConnectError(message)
    if where == "open":
        return StreamClosedEarlyError(f"no response: {message}")
    return StreamClosedEarlyError(f"the stream broke: {message}", partial=partial)
