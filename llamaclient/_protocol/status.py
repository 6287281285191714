"""What a non-2xx answer means. Pure.

llama-server answers errors with ``{"error": {"code", "message", "type", ...}}``; a prompt too
long for the slot is ``exceed_context_size_error`` with ``n_prompt_tokens`` and ``n_ctx``; an
image or audio part sent to a server without a projector is a 500 ``image input is not
supported - hint: ...`` (``server-common.cpp``, ``oaicompat_content_load_media``).

A proxy passes them on in its own envelope: LiteLLM answers a prompt too long with 400
``invalid_request_error`` whose message quotes llama-server's (``litellm.
ContextWindowExceededError: ... request (45021 tokens) exceeds the available context size
(4096 tokens)``), and a model it does not route with 400 ``Invalid model name passed in
model=...``. The meaning is read from the message there.
"""

from __future__ import annotations

import re

import msgspec

from .._types.errors import (
    AuthenticationError,
    ContextOverflowError,
    HTTPStatusError,
    InferError,
    ModelNotFoundError,
    UnsupportedInputError,
)
from .wire import ERROR_BODY_DECODER, WireError

__all__ = ["is_loading", "status_error"]


# The modality each refusal names, as /props ``modalities`` calls it (at the start of the
# message, or of llama-server's as LiteLLM quotes it).
_UNSUPPORTED = re.compile(
    r"(?:litellm\.\w+: OpenAIException - )?(image|audio|video) input is not supported"
)
_MODALITY = {"image": "vision", "audio": "audio", "video": "video"}
_AUTH = (401, 403)
# llama-server's own words for a prompt over the context, as a proxy quotes them.
_OVERFLOW = re.compile(
    r"request \((\d+) tokens\) exceeds the available context size \((\d+) tokens\)"
)
_UNKNOWN_MODEL = "Invalid model name passed in model="  # LiteLLM's proxy


def status_error(status: int, data: bytes, location: str | None = None) -> InferError:
    """The typed error for a non-2xx answer whose body is ``data``: an
    :class:`HTTPStatusError` with the envelope's ``message``/``type``/``code``, or the
    subclass or sibling that names the problem. A redirect is never followed (it would
    re-send the prompt elsewhere): its error names the ``Location``."""
    text = data.decode("utf-8", "replace")
    if 300 <= status < 400:
        where = f"redirect to {location!r} not followed" if location else "redirect not followed"
        return HTTPStatusError(status, f"{where}; {text}" if text else where)
    try:
        error = ERROR_BODY_DECODER.decode(data).error
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return (AuthenticationError if status in _AUTH else HTTPStatusError)(status, text)
    message, kind, code = error.message or None, error.type, error.code
    if status in _AUTH:
        return AuthenticationError(status, text, message=message, type=kind, code=code)
    refused = _UNSUPPORTED.match(error.message)
    if refused is not None:
        modality = _MODALITY[refused.group(1)]
        return UnsupportedInputError(modality, error.message, status=status, body=text)
    if _UNKNOWN_MODEL in error.message:
        return ModelNotFoundError(status, text, message=message, type=kind, code=code)
    overflow = _overflow(error)
    if overflow is not None:
        prompt, n_ctx = overflow
        return ContextOverflowError(
            status, text, prompt, n_ctx, message=message, type=kind, code=code
        )
    return HTTPStatusError(status, text, message=message, type=kind, code=code)


def _overflow(error: WireError) -> tuple[int, int] | None:
    """A prompt over the context: its tokens and the context, from llama-server's fields,
    or from its words quoted by a proxy; None for another error."""
    if error.type == "exceed_context_size_error":
        return error.n_prompt_tokens, error.n_ctx
    quoted = _OVERFLOW.search(error.message)
    if quoted is None:
        return None
    return int(quoted.group(1)), int(quoted.group(2))


def is_loading(status: int, data: bytes) -> bool:
    """llama-server's answer while the model is still loading: 503 ``Loading model``."""
    return status == 503 and b"Loading model" in data
