"""Parsing of operator input: durations (``90s``, ``1h30m``) and ISO 8601 date-times."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from .errors import InvalidInput

UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
DURATION = re.compile(r"(\d+(?:\.\d+)?)([dhms])")
MAX_DURATION = timedelta(days=366)


def parse_duration(text: str) -> timedelta:
    """``90s``, ``30m``, ``2h``, ``1h30m``, ``1d`` or plain seconds (``45``, ``2.5``)."""
    value = text.strip().lower()
    try:
        seconds = float(value)
    except ValueError:
        parts = DURATION.findall(value)
        if not parts or "".join(n + u for n, u in parts) != value:
            raise InvalidInput(
                f"not a duration: {text[:40]!r} (use e.g. 90s, 30m, 2h, 1h30m or seconds)"
            ) from None
        seconds = sum(float(number) * UNITS[unit] for number, unit in parts)
    if not 0 < seconds <= MAX_DURATION.total_seconds() or seconds != seconds:
        raise InvalidInput(f"duration must be positive and at most 366 days: {text[:40]!r}")
    return timedelta(seconds=seconds)


def parse_datetime(text: str) -> datetime:
    """ISO 8601; without a zone it is the local time of this machine."""
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInput(
            f"not an ISO 8601 date-time: {text[:40]!r} (e.g. 2026-01-28T14:00 or …T14:00Z)"
        ) from None
    return moment if moment.tzinfo else moment.astimezone()


def format_duration(seconds: float) -> str:
    """``25 minutes``, ``1 hour 30 minutes``, ``40 seconds``: the two largest units."""
    remaining = max(0, round(seconds))
    parts: list[str] = []
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)):
        count, remaining = divmod(remaining, size)
        if count:
            parts.append(f"{count} {unit}" + ("" if count == 1 else "s"))
        if len(parts) == 2 or (parts and not count):
            break
    return " ".join(parts) or "0 seconds"
