"""Every error llamaclient raises, in one tree.

::

    InferError                    base; ``partial`` is the Completion so far (or None)
    ├── BusyError                 the pinned slot is busy and the request asked not to wait
    ├── ConnectError              the server could not be reached (after the allowed retries)
    ├── WaitTimeoutError          no response headers within ``wait_timeout`` (queued, asleep, ...)
    ├── LoadTimeoutError          the model was still loading after ``load_timeout``
    ├── StalledError              the stream sent no bytes at all for ``stall_timeout``
    ├── StreamClosedEarlyError    the body ended before a finish reason arrived
    │   └── ResumeError           the cut stream could not be picked up (session gone)
    ├── ThinkingOverrunError      reasoning went on past the thinking budget plus its grace
    ├── ModelLoadError            a router could not load the model (``model``, ``exit_code``)
    ├── HTTPStatusError           a non-2xx answer (``status``, ``body``, ``message``, ...)
    │   ├── AuthenticationError   401 or 403: a wrong or missing API key
    │   ├── ContextOverflowError  the prompt does not fit the slot (``n_prompt_tokens``, ``n_ctx``)
    │   ├── ModelNotFoundError    a router has no model by that name
    │   ├── ModelNotLoadedError   a router's model is not running (``autoload=False``, unload)
    │   └── ModelLimitError       a router is at ``models_max`` and can unload none of them
    ├── UnsupportedInputError     an input the server cannot take (``modality``)
    ├── ServerError               an in-band ``{"error": ...}`` event inside a 200 stream
    └── ProtocolError             bytes that are not what llama-server sends (``raw``)
        └── OutputError           a typed output or tool call that is not valid JSON or not a T

Nothing that was generated is lost: whenever any output had arrived, ``partial`` holds it, with
``finish_reason`` None unless the finish reason itself had arrived before the error. Errors
never include the API key.
"""

from __future__ import annotations

from typing import Any

from . import typed
from .completion import Completion

__all__ = [
    "AuthenticationError",
    "BusyError",
    "ConnectError",
    "ContextOverflowError",
    "HTTPStatusError",
    "InferError",
    "LoadTimeoutError",
    "ModelLimitError",
    "ModelLoadError",
    "ModelNotFoundError",
    "ModelNotLoadedError",
    "OutputError",
    "ProtocolError",
    "ResumeError",
    "ServerError",
    "StalledError",
    "StreamClosedEarlyError",
    "ThinkingOverrunError",
    "UnsupportedInputError",
    "WaitTimeoutError",
]


class InferError(Exception):
    """Base of every llamaclient error.

    ``partial`` is the Completion assembled so far when any chunk had arrived, else None.
    """

    partial: Completion | None

    def __init__(self, message: str, *, partial: Completion | None = None) -> None:
        super().__init__(message)
        self.partial = partial


class BusyError(InferError):
    """The pinned slot is busy (seen in ``GET /slots``) and the request asked not to wait."""


class ConnectError(InferError):
    """The server could not be reached: connection refused, reset or timed out."""


class WaitTimeoutError(InferError):
    """No response headers arrived within ``wait_timeout``.

    llama-server sends nothing at all while a request is queued, deferred behind a busy slot,
    or while the model wakes from sleep, so this is the only signal of a long wait.
    """


class LoadTimeoutError(InferError):
    """The server kept answering 503 ``Loading model`` for longer than ``load_timeout``."""


class StalledError(InferError):
    """Once streaming, no bytes at all (not even a ``:`` ping) arrived for ``stall_timeout``."""


class StreamClosedEarlyError(InferError):
    """The response body ended before a finish reason arrived (connection cut, server died)."""


class ResumeError(StreamClosedEarlyError):
    """The stream broke and could not be resumed: the server's session for the conversation
    expired or was never made (404), or the offset was dropped from its buffer (400)."""


class ThinkingOverrunError(InferError):
    """Reasoning went on past the thinking budget plus its grace allowance, so the client
    stopped the stream. ``partial`` holds the reasoning so far."""


class HTTPStatusError(InferError):
    """The server answered with a non-2xx status. ``body`` is the response text (a body
    longer than ``Config.max_error_body_bytes`` is read only that far: ``body`` is its start,
    and the message says it was cut).

    ``message``, ``type`` and ``code`` come from llama-server's error envelope
    ``{"error": {"code", "message", "type"}}`` (e.g. ``"tools param requires --jinja flag"``,
    ``"server_error"``, ``500``); ``code`` is kept as sent, an int (llama-server) or a string
    (OpenAI, Groq, LiteLLM: ``"tool_use_failed"``). Each is None when the body is not that
    envelope (a proxy's page, plain text) or lacks the field. The error's text is short: the
    status, the type and the message (or the start of the body).

    llama-server returns many plain input errors as 500, so a status alone never means
    "retry"; see the client's retry rules.
    """

    status: int
    body: str
    message: str | None
    type: str | None
    code: int | str | None

    def __init__(
        self,
        status: int,
        body: str,
        *,
        partial: Completion | None = None,
        message: str | None = None,
        type: str | None = None,
        code: int | str | None = None,
    ) -> None:
        head = f"HTTP {status} {type}" if type and message is not None else f"HTTP {status}"
        super().__init__(f"{head}: {_clip(body if message is None else message)}", partial=partial)
        self.status = status
        self.body = body
        self.message = message
        self.type = type
        self.code = code


class AuthenticationError(HTTPStatusError):
    """The server refused the API key: HTTP 401 (wrong or missing, e.g. llama-server started
    with ``--api-key``) or 403 (a gateway's forbidden). Never retried. The key itself is
    never in the error."""


class ContextOverflowError(HTTPStatusError):
    """The prompt does not fit the slot's context: the server's ``exceed_context_size_error``
    (or its words, as a proxy such as LiteLLM quotes them), or, with ``Config(preflight=True)``,
    found before sending (``preflight`` True: the prompt, counted by the server, plus
    ``max_tokens`` is more than ``n_ctx``; nothing was evaluated). ``n_prompt_tokens``,
    ``max_tokens`` (the request's, None when unset) and ``n_ctx`` (a slot's context) are the
    numbers."""

    n_prompt_tokens: int
    n_ctx: int
    max_tokens: int | None
    preflight: bool

    def __init__(
        self,
        status: int,
        body: str,
        n_prompt_tokens: int,
        n_ctx: int,
        *,
        message: str | None = None,
        type: str | None = None,
        code: int | str | None = None,
    ) -> None:
        super().__init__(status, body, message=message, type=type, code=code)
        self.n_prompt_tokens = n_prompt_tokens
        self.n_ctx = n_ctx
        self.max_tokens: int | None = None
        self.preflight = False


class UnsupportedInputError(InferError):
    """The server cannot take an input the request holds: ``modality`` is ``"vision"``,
    ``"audio"`` or ``"video"`` (it runs no projector for it, ``--mmproj``), or
    ``"reasoning_effort"`` (its chat template cannot render one).

    Raised before sending when the server's ``/props`` says so (checked once per client;
    ``status`` is then None), or mapped from the server's own refusal (``image input is not
    supported ...``, an HTTP 500: ``status``, ``body`` and ``message`` are the server's).
    """

    modality: str
    status: int | None
    body: str
    message: str

    def __init__(
        self, modality: str, message: str, *, status: int | None = None, body: str = ""
    ) -> None:
        super().__init__(_clip(message))
        self.modality = modality
        self.status = status
        self.body = body
        self.message = message


class ModelNotFoundError(HTTPStatusError):
    """The server has no model by that name: a router (``404`` on load, ``400 model '<x>'
    not found``), or a proxy that routes by model (LiteLLM: ``400 Invalid model name``)."""


class ModelNotLoadedError(HTTPStatusError):
    """A router's model is not running: a chat with ``autoload=False`` (``400 model is not
    loaded``), or ``unload_model`` of a model that was not running."""


class ModelLimitError(HTTPStatusError):
    """A router is at ``--models-max`` and could not unload a model to make room (``500
    model limit reached``): try again later."""


class ModelLoadError(InferError):
    """A router could not load ``model``: its child process exited with ``exit_code`` (None
    when the router only said that it failed)."""

    model: str
    exit_code: int | None

    def __init__(self, model: str, exit_code: int | None = None) -> None:
        code = "" if exit_code is None else f" (exit code {exit_code})"
        super().__init__(f"the router could not load model {model!r}{code}")
        self.model = model
        self.exit_code = exit_code


class ServerError(InferError):
    """The server reported an error inside a 200 stream (``data: {"error": ...}``).

    ``message``, ``code`` and ``type`` are the server's (``code`` as sent: an int, or a string
    such as ``"rate_limit_exceeded"``); ``partial`` holds what was generated. Also raised for
    an ``event: error`` event (Groq's in-band form).
    The error's text shows the first 500 characters of ``message``.
    """

    message: str
    code: int | str | None
    type: str | None

    def __init__(
        self,
        message: str,
        code: int | str | None = None,
        type: str | None = None,
        *,
        partial: Completion | None = None,
    ) -> None:
        super().__init__(f"server error {code}: {_clip(message)}", partial=partial)
        self.message = message
        self.code = code
        self.type = type


class ProtocolError(InferError):
    """Input that is not what the protocol allows. ``raw`` is the offending text: at most
    its first :data:`RAW_KEPT` characters (64 Ki), so an error never holds a huge input."""

    raw: str

    def __init__(
        self, message: str, raw: str | bytes = "", *, partial: Completion | None = None
    ) -> None:
        size = len(raw)
        kept = raw[:RAW_KEPT]  # cut before decoding: a huge input is never copied whole
        text = kept.decode("utf-8", "replace") if isinstance(kept, bytes) else kept
        unit = "bytes" if isinstance(raw, bytes) else "chars"
        shown = _clip(text, total=size if size > RAW_KEPT else None, unit=unit)
        super().__init__(f"{message}: {shown!r}" if text else message, partial=partial)
        self.raw = text


class OutputError(ProtocolError):
    """The answer (or a tool call's arguments) is not valid JSON, or does not convert to the
    requested type; a ``length`` finish before the JSON closed is one too.

    ``raw`` is the text, ``validation`` why it was refused, ``output`` the value decoded so
    far (plain dicts and lists; ``None`` if none) and ``partial`` the Completion.
    """

    validation: str
    output: Any

    def __init__(
        self,
        message: str,
        raw: str,
        *,
        validation: str,
        output: Any = None,
        partial: Completion | None = None,
    ) -> None:
        super().__init__(f"{message}: {validation}", raw, partial=partial)
        self.validation = validation
        self.output = output


RAW_KEPT = 64 * 1024  # characters of the offending input a ProtocolError keeps in ``raw``


def _clip(text: str, limit: int = 500, *, total: int | None = None, unit: str = "chars") -> str:
    if total is None:
        if len(text) <= limit:
            return text
        total = len(text)
    return text[:limit] + f"... ({total} {unit})"


typed.refused = OutputError  # ToolCall.parse and invoke refuse arguments with it (typed.py)
