"""What a non-2xx answer means. Pure.

llama-server answers errors with ``{"error": {"code", "message", "type", ...}}``; a prompt too
long for the slot is ``exceed_context_size_error`` with ``n_prompt_tokens`` and ``n_ctx``.
"""

from __future__ import annotations

import msgspec

from .._types.errors import ContextOverflowError, HTTPStatusError
from .wire import ERROR_BODY_DECODER

__all__ = ["is_loading", "status_error"]


def status_error(status: int, data: bytes, location: str | None = None) -> HTTPStatusError:
    """The typed error for a non-2xx answer whose body is ``data``. A redirect is never
    followed (it would re-send the prompt elsewhere): its error names the ``Location``."""
    text = data.decode("utf-8", "replace")
    if 300 <= status < 400:
        where = f"redirect to {location!r} not followed" if location else "redirect not followed"
        return HTTPStatusError(status, f"{where}; {text}" if text else where)
    try:
        error = ERROR_BODY_DECODER.decode(data).error
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return HTTPStatusError(status, text)
    if error.type == "exceed_context_size_error":
        return ContextOverflowError(status, text, error.n_prompt_tokens, error.n_ctx)
    return HTTPStatusError(status, text)


def is_loading(status: int, data: bytes) -> bool:
    """llama-server's answer while the model is still loading: 503 ``Loading model``."""
    return status == 503 and b"Loading model" in data
