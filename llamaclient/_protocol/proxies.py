"""Proxies between the client and llama-server, as their answers name them. Pure.

LiteLLM's proxy answers every request it routes with ``x-litellm-version`` (and more
``x-litellm-*`` headers; the backend's own headers come back as ``llm_provider-*``). It passes
a chat's body on whole, llama-server's own fields included (``timings_per_token``,
``return_progress``, ``id_slot``, ``reasoning_control``), and the stream back with them, but
it does not forward the request's ``X-Conversation-Id`` and answers llama-server's other
routes 404: ``/v1/stream`` and ``/v1/streams/lookup`` (resume),
``/v1/chat/completions/control``, ``/slots``, ``/props``, ``/metrics``, ``/tokenize``,
``/apply-template`` and ``/v1/chat/completions/input_tokens`` (seen on LiteLLM 1.108.7).
The thinking budget survives: the body's ``reasoning_budget_tokens`` reaches the server
(``_turn/budget.py``).
"""

from __future__ import annotations

from collections.abc import Callable

from .._types.events import Proxied

__all__ = ["LITELLM_LOST", "proxy_of"]

#: What a client cannot do through LiteLLM's proxy (``Proxied.lost``).
LITELLM_LOST = ("resume", "slots", "token counts")


def proxy_of(header: Callable[[str], str | None]) -> Proxied | None:
    """The proxy an answer's headers name (``header``: a lookup by lower-case name), with
    what is lost through it; None for a server answering itself."""
    version = header("x-litellm-version")
    if version is None:
        return None
    return Proxied(f"LiteLLM {version.strip()[:40]}".rstrip(), LITELLM_LOST)
