"""How times, durations and long texts read, everywhere celery-pause shows them."""

from __future__ import annotations

from datetime import datetime, timezone

SHOWN_TEXT = 1000
"""Longest reason or operator name shown (longer ones are clipped)."""


def format_time(timestamp: float) -> str:
    """ISO 8601 in UTC, to the second."""
    try:
        moment = datetime.fromtimestamp(timestamp, tz=timezone.utc)
    except (OverflowError, ValueError, OSError):
        return f"{timestamp!r} (out of range)"
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


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


def clip(text: str, limit: int = SHOWN_TEXT) -> str:
    """``text``, cut to ``limit`` characters with an ellipsis, shown :func:`printable`."""
    return printable(text if len(text) <= limit else text[:limit] + "…")


def printable(text: str) -> str:
    """``text`` with every control or other non-printable character written as its escape
    (``\\x1b``, ``\\n``, ``\\u202e``), so that text from a store, a report or a caller can
    never move a terminal's cursor, forge a line or reorder what follows."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
