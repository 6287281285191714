"""What a non-2xx answer means. Pure.

llama-server answers errors with ``{"error": {"code", "message", "type", ...}}``; a prompt too
long for the slot is ``exceed_context_size_error`` with ``n_prompt_tokens`` and ``n_ctx``; an
image or audio part sent to a server without a projector is a 500 ``image input is not
supported - hint: ...`` (``server-common.cpp``, ``oaicompat_content_load_media``).
"""

from __future__ import annotations

import re

import msgspec

from .._types.errors import (
    AuthenticationError,
    ContextOverflowError,
    HTTPStatusError,
    InferError,
    UnsupportedInputError,
)
from .wire import ERROR_BODY_DECODER

__all__ = ["is_loading", "status_error"]


# The modality each refusal names, as /props ``modalities`` calls it.
_UNSUPPORTED = re.compile(r"(image|audio|video) input is not supported")
_MODALITY = {"image": "vision", "audio": "audio", "video": "video"}
_AUTH = (401, 403)


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
    if kind == "exceed_context_size_error":
        return ContextOverflowError(
            status, text, error.n_prompt_tokens, error.n_ctx, message=message, type=kind, code=code
        )
    refused = _UNSUPPORTED.match(error.message)
    if refused is not None:
        modality = _MODALITY[refused.group(1)]
        return UnsupportedInputError(modality, error.message, status=status, body=text)
    return HTTPStatusError(status, text, message=message, type=kind, code=code)


def is_loading(status: int, data: bytes) -> bool:
    """llama-server's answer while the model is still loading: 503 ``Loading model``."""
    return status == 503 and b"Loading model" in data
