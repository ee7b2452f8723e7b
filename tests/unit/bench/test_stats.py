"""The benchmarks' statistics and targets: one definition each."""

from __future__ import annotations

import math

from bench.stats import median, percentile
from bench.targets import TARGETS, describe, mark, verdicts


def test_percentile_is_the_nearest_rank_and_nan_for_no_values() -> None:
    values = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert [percentile(values, p) for p in (0, 20, 50, 99, 100)] == [1.0, 1.0, 3.0, 5.0, 5.0]
    assert math.isnan(percentile([], 50))


def test_median_takes_the_mean_of_the_middle_two_and_is_nan_for_no_values() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 2.0, 3.0]) == 2.5
    assert math.isnan(median([]))


def test_the_verdicts_and_their_text_come_from_one_table() -> None:
    figures = {
        "throughput_ratio": 0.97,
        "pause_p99_ms": 30.0,
        "broadcast_p99_ms": 10.0,
        "fallback_p99_ms": 2000.0,
        "resume_p50_ms": 8.0,
        "idle_store_cmds_per_s": 0.8,
    }
    found = verdicts(figures)
    assert found == {
        "throughput_ratio": False,
        "pause_p99_ms": True,
        "pause_vs_broadcast": False,
        "fallback_p99_ms": True,
        "resume_p50_ms": True,
        "idle_store_cmds_per_s": True,
    }
    assert describe("pause_p99_ms", "pause_vs_broadcast") == "p99 <= 50, <= 1.5x bcast"
    assert mark(found, "pause_p99_ms", "pause_vs_broadcast") == "met, MISSED"
    assert TARGETS["fallback_p99_ms"].text == "<= 2100"
