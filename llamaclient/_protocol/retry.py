"""When a failed attempt may be repeated, and how long to wait first. Pure.

A request is retried only while nothing was generated: the connection was refused or reset
before any response, or the server answered 429, 502, 503 (not ``Loading model``, which has
its own wait) or 504 before the first byte of a body. A 500 is never retried: llama-server
returns many plain input errors as 500.
"""

from __future__ import annotations

import random
from email.utils import parsedate_to_datetime

__all__ = ["RETRYABLE_STATUS", "backoff_seconds", "retry_after_seconds"]

RETRYABLE_STATUS = frozenset({429, 502, 503, 504})


def backoff_seconds(
    attempt: int,
    base: float,
    cap: float,
    retry_after: float | None = None,
    rng: random.Random | None = None,
) -> float:
    """Full-jitter exponential backoff for ``attempt`` (1, 2, ...), never below Retry-After
    (itself capped at ``cap * 8``, so a server cannot park the client for hours)."""
    ceiling = min(cap, base * (2 ** (attempt - 1)))
    delay = (rng or random).uniform(ceiling / 2, ceiling)
    if retry_after is not None:
        delay = max(delay, min(retry_after, cap * 8))
    return delay


def retry_after_seconds(value: str | None, date: str | None = None) -> float | None:
    """Parse a ``Retry-After`` header: delta seconds, or an HTTP date counted from ``date``,
    the same response's ``Date`` header (the server's own clock, so a skewed client clock
    does not matter, and the pure core reads no clock). A date without a ``Date`` to count
    from is None: the backoff's own delay applies."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
        now = parsedate_to_datetime(date) if date else None
    except (TypeError, ValueError):
        return None
    if now is None:
        return None
    return max(0.0, (when - now).total_seconds())
