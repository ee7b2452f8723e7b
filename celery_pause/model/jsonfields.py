"""Typed reads of decoded JSON fields: a wrong type or value raises, never passes."""

from __future__ import annotations

import math
from typing import Any


def require_str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def optional_str(value: Any) -> str | None:
    return None if value is None else require_str(value)


def number(value: Any) -> float:
    """A finite JSON number; strings, booleans, NaN and infinities are not times."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"expected a number, got {type(value).__name__}")
    result = float(value)  # OverflowError for an int too large for a float
    if not math.isfinite(result):
        raise ValueError(f"expected a finite number, got {result!r}")
    return result
