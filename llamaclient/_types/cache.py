"""What the prompt cache gave a turn, against what it would have given, and why not."""

from __future__ import annotations

from typing import Literal

import msgspec

__all__ = ["CacheReason", "CacheReport"]

CacheReason = Literal["server", "slot", "window", "messages", "tools", "settings", "evicted"]
"""Why a turn reused less of the prompt cache than exact echo gives, in the order they are
looked for: ``server`` (the session's turn went to another server), ``slot`` (to another
pinned slot), ``messages`` (a message differs from the previous turn's, or its answer was not
sent back as it came), ``tools`` (the tool list changed, or its order), ``settings``
(``thinking`` or the template's arguments changed), ``window`` (none of these, and at most 5
tokens short: a sliding-window model's checkpoint, by design), ``evicted`` (none of these:
the server no longer had it; its slot served another prompt, or a balancer sent the turn to
another backend)."""


class CacheReport(msgspec.Struct, frozen=True, gc=False):
    """A turn's prompt cache: ``prompt`` tokens in all, ``reused`` from the cache
    (``timings.cache_n``), ``expected`` what exact echo of the session's previous turn
    reuses (that turn's whole prompt; None when no previous turn is known: a request
    without a ``session``, or its first turn), ``reason`` why ``reused`` fell short of it
    (None: it did not), ``detail`` the same in words (the message and field that differ)."""

    prompt: int
    reused: int
    expected: int | None = None
    reason: CacheReason | None = None
    detail: str = ""

    @property
    def shortfall(self) -> int:
        """Tokens short of ``expected`` (0 when none is known, or none were lost)."""
        return 0 if self.expected is None else max(self.expected - self.reused, 0)
