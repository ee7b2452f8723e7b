"""What an operator types, as the Python API takes it: one coercion for the command line's
text and the admin API's JSON values (durations, date-times, lists of names). What the
values may be is checked after, by :mod:`.validation`, for every caller alike."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

from ..errors import InvalidInput

UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
DURATION = re.compile(r"(\d+(?:\.\d+)?)([dhms])")
MAX_DURATION = timedelta(days=366)


def duration(value: Any, key: str = "resume_after") -> timedelta:
    """A ``timedelta``, a number of seconds, or text (:func:`parse_duration`)."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return parse_duration(str(value))
    if isinstance(value, str):
        return parse_duration(value)
    raise InvalidInput(f"{key} must be a duration such as 90s, 30m, 2h or seconds")


def moment(value: Any, key: str = "resume_at") -> datetime:
    """A ``datetime``, seconds since the epoch, or ISO 8601 text (:func:`parse_datetime`)."""
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        return parse_datetime(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(float(value), tz=timezone.utc)
        except (OverflowError, ValueError, OSError):
            raise InvalidInput(f"{key} is out of range") from None
    raise InvalidInput(f"{key} must be an ISO 8601 date-time")


def name_list(value: Any, kind: str, *, also: str = "") -> list[str] | None:
    """A list of names, or comma-separated text (``a,b``, none of them empty); ``None`` for
    none given (all). ``also``: what else the caller takes, for the error."""
    if value is None or value == []:
        return None
    if isinstance(value, str):
        names = [name.strip() for name in value.split(",")]
        if not all(names):
            raise InvalidInput(f"empty {kind} name in {value[:80]!r}")
        return names
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise InvalidInput(f"{kind}s must be a list of names{also} or a comma-separated string")
    return value


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
    duration = timedelta(seconds=seconds) if 0 < seconds <= MAX_DURATION.total_seconds() else None
    if not duration:  # out of range, NaN, or too small to count (under a microsecond)
        raise InvalidInput(f"duration must be positive and at most 366 days: {text[:40]!r}")
    return duration


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
    if moment.tzinfo:
        return moment
    try:
        return moment.astimezone()
    except (OverflowError, ValueError, OSError):
        raise InvalidInput(f"date-time out of range: {text[:40]!r} (add a zone, e.g. …Z)") from None
