"""The benchmarks' statistics: one percentile, one median, NaN for no values."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable


def percentile(values: Iterable[float], pct: float) -> float:
    """The nearest-rank percentile: the smallest value with ``pct`` % of the values at or below it.

    Parameters:
        values: the samples, in any order.
        pct: the percentile, from 0 (the smallest value) to 100 (the largest).

    NaN when there are no values.
    """
    ordered = sorted(values)
    if not ordered:
        return math.nan
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def median(values: Iterable[float]) -> float:
    """The middle value, or the mean of the two middle ones; NaN when there are no values."""
    found = list(values)
    return statistics.median(found) if found else math.nan


def aligned(rows: list[tuple[str, ...]]) -> str:
    """``rows`` as a table of left-aligned columns."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows)
    return "\n".join(lines)
