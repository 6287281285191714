"""Retry arithmetic (``llamaclient._protocol.retry``): backoff bounds and Retry-After."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest

from llamaclient._protocol.retry import RETRYABLE_STATUS, backoff_seconds, retry_after_seconds


class _Bounds(random.Random):
    """An rng whose ``uniform`` returns its bounds, so the tests see the jitter interval."""

    def __init__(self, pick: int) -> None:
        super().__init__(0)
        self.pick = pick
        self.calls: list[tuple[float, float]] = []

    def uniform(self, a: float, b: float) -> float:
        self.calls.append((a, b))
        return (a, b)[self.pick]


def test_retryable_statuses() -> None:
    assert frozenset({429, 502, 503, 504}) == RETRYABLE_STATUS
    assert 500 not in RETRYABLE_STATUS


@pytest.mark.parametrize(
    ("attempt", "ceiling"),
    [(1, 0.25), (2, 0.5), (3, 1.0), (4, 2.0), (6, 8.0), (7, 8.0), (30, 8.0)],
)
def test_backoff_is_full_jitter_between_half_and_ceiling(attempt: int, ceiling: float) -> None:
    for pick in (0, 1):
        rng = _Bounds(pick)
        delay = backoff_seconds(attempt, 0.25, 8.0, rng=rng)
        assert rng.calls == [(ceiling / 2, ceiling)]
        assert delay == (ceiling / 2, ceiling)[pick]


def test_backoff_with_a_real_rng_stays_in_bounds() -> None:
    rng = random.Random(1)
    for attempt in range(1, 10):
        ceiling = min(4.0, 0.5 * 2 ** (attempt - 1))
        for _ in range(50):
            assert ceiling / 2 <= backoff_seconds(attempt, 0.5, 4.0, rng=rng) <= ceiling


def test_backoff_without_rng_uses_the_module_random() -> None:
    random.seed(5)
    first = backoff_seconds(3, 1.0, 10.0)
    random.seed(5)
    assert backoff_seconds(3, 1.0, 10.0) == first
    assert 2.0 <= first <= 4.0


def test_backoff_never_below_retry_after() -> None:
    assert backoff_seconds(1, 0.25, 8.0, retry_after=5.0, rng=_Bounds(1)) == 5.0
    assert backoff_seconds(1, 0.25, 8.0, retry_after=0.0, rng=_Bounds(1)) == 0.25
    assert backoff_seconds(4, 0.25, 8.0, retry_after=1.5, rng=_Bounds(1)) == 2.0  # jitter wins


def test_retry_after_is_capped_at_eight_caps() -> None:
    assert backoff_seconds(1, 0.25, 8.0, retry_after=64.0, rng=_Bounds(0)) == 64.0
    assert backoff_seconds(1, 0.25, 8.0, retry_after=3600.0, rng=_Bounds(0)) == 64.0
    assert backoff_seconds(1, 0.25, 2.0, retry_after=3600.0, rng=_Bounds(0)) == 16.0


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (None, None),
        ("", None),
        ("0", 0.0),
        ("7", 7.0),
        (" 12 ", 12.0),
        ("120\r\n", 120.0),
        ("-3", None),
        ("1.5", None),
        ("\uff15", None),  # a fullwidth digit is not a delta-seconds
        ("soon", None),
        ("Wed, 99 Foo 2015 07:28:00 GMT", None),
    ],
)
def test_retry_after_delta_seconds(value: str | None, seconds: float | None) -> None:
    assert retry_after_seconds(value, "Fri, 02 Jan 2026 03:04:05 GMT") == seconds


def test_retry_after_http_date_counts_from_the_responses_date() -> None:
    """The server's clock, not ours: the response's ``Date`` is the start."""
    now = format_datetime(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), usegmt=True)
    later = format_datetime(datetime(2026, 1, 2, 3, 4, 35, tzinfo=UTC), usegmt=True)
    past = format_datetime(datetime(2026, 1, 2, 3, 6, 5, tzinfo=UTC), usegmt=True)
    assert later == "Fri, 02 Jan 2026 03:04:35 GMT"
    assert retry_after_seconds(later, now) == 30.0
    assert retry_after_seconds(f"  {later} ", now) == 30.0
    assert retry_after_seconds(later, past) == 0.0  # already past: no wait


@pytest.mark.parametrize("date", [None, "", "yesterday"])
def test_retry_after_http_date_without_a_date_to_count_from_is_none(date: str | None) -> None:
    """No ``Date`` (or one that is no date): the backoff's own delay applies."""
    assert retry_after_seconds("Fri, 02 Jan 2026 03:04:35 GMT", date) is None
