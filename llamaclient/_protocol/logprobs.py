"""Token log-probabilities on the wire.

Pure: no I/O. llama-server attaches ``"logprobs": {"content": [...]}`` to a choice when the
request asked for them (``logprobs: true`` or, with tools while streaming, ``n_probs``: both
give this shape). Each entry is one token: ``token``, ``logprob``, ``bytes``,
``top_logprobs`` and llama-server's own ``id``.
"""

from __future__ import annotations

import msgspec

from .._types.logprobs import Tokens

__all__ = ["decode_tokens"]


class _WireLogprobs(msgspec.Struct, gc=False):
    content: Tokens | None = None


_DECODER = msgspec.json.Decoder(_WireLogprobs)


def decode_tokens(raw: msgspec.Raw, top: int | None = None) -> Tokens:
    """The tokens of a choice's ``logprobs`` (empty: none, or not a logprobs object: they
    are telemetry, not the answer). ``top`` keeps at most that many alternatives each (a
    request for 0 sent as ``n_probs: 1``)."""
    try:
        tokens = _DECODER.decode(raw).content
    except (msgspec.DecodeError, RecursionError):
        return ()
    if not tokens:
        return ()
    if top is not None and any(len(t.top_logprobs) > top for t in tokens):
        tokens = tuple(
            msgspec.structs.replace(t, top_logprobs=t.top_logprobs[:top]) for t in tokens
        )
    return tokens
