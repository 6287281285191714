"""Usage totals, pure: a turn without timings counts what its usage says; totals add up,
model by model, and refuse to add anything else; they read like a dict. Synchronous."""

from __future__ import annotations

import pytest

from llamaclient import Completion, FinishReason, ModelUsage, Usage, UsageTotals
from llamaclient._types.totals import turn_usage


def test_a_turn_without_timings_counts_its_usage() -> None:
    done = Completion(
        "c", None, "hi", None, (), FinishReason.STOP, None, Usage(10, 3, 4), reasoning_tokens=1
    )
    assert turn_usage(done, failed=False) == ModelUsage(1, 0, 10, 4, 3, 1, 0.0, 0.0)
    bare = Completion("c", None, "hi", None, (), FinishReason.STOP, None, Usage())
    assert turn_usage(bare, failed=True) == ModelUsage(1, 1)
    assert turn_usage(None, failed=True) == ModelUsage(1, 1)


def test_totals_add_model_by_model_and_read_like_a_dict() -> None:
    a = UsageTotals({"m": ModelUsage(1, 0, 10)})
    b = UsageTotals({"m": ModelUsage(1, 1, 5), "n": ModelUsage(2)})
    both = a + b
    assert (len(both), sorted(both)) == (2, ["m", "n"])
    assert both["m"] == ModelUsage(2, 1, 15)
    assert both.total == ModelUsage(4, 1, 15)
    assert (len(a), a["m"]) == (1, ModelUsage(1, 0, 10))  # unchanged
    assert repr(UsageTotals()) == "UsageTotals({})"


@pytest.mark.parametrize("other", [1, "x", None])
def test_totals_and_usage_add_only_their_own_kind(other: object) -> None:
    with pytest.raises(TypeError):
        UsageTotals() + other  # type: ignore[operator]
    with pytest.raises(TypeError):
        Usage() + other  # type: ignore[operator]
    assert Usage(1, None, 2) + Usage(None, 3, 4) == Usage(1, 3, 6)
