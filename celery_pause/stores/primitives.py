"""Logs, event windows and leases built on records: pure changes any store applies with
:meth:`~celery_pause.stores.base.Store.update_record`, tested once for every store.

Each lives in a record of its own, under a key that says what it is:

- ``log:<name>``: ``{"entries": [...]}``, newest first, at most ``keep``;
- ``events:<key>``: ``{"events": [[at, detail], ...]}``, oldest first, those of the window;
- ``lease:<key>``: ``{"owner": ..., "expires": ...}`` in store time.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import InvalidInput, StoreError
from ..model.outcome import Outcome

R = TypeVar("R")
Record = dict[str, Any]
"""A record: one JSON object a pure function changes in one atomic step (the limits' rates,
slots and partitions, the breakers' state, and the logs, event windows and leases here)."""

RecordChange = Callable[[Record | None, float], Outcome[Record, R]]
"""Given a record (``None`` if there is none) and store time, the next record (``None``: no
change) and a result."""

KEY = re.compile(r"[A-Za-z0-9_.:@-]{1,210}\Z")
SHORT = 200
"""The longest key of an event window or a lease (its record's key says what it is first)."""
LOG_NAME = re.compile(r"[a-z][a-z0-9_-]{0,63}\Z")
UNREADABLE = "<unreadable>"


@dataclass(frozen=True)
class Event:
    """One event of a sliding window: when (store time) and a short detail."""

    at: float
    detail: str = ""


def check_key(key: str) -> str:
    """A record's key: 1-210 of ``A-Z a-z 0-9 _ . : @ -`` (200 for events and leases)."""
    if not isinstance(key, str) or not KEY.match(key):
        raise InvalidInput(f"not a store key: {str(key)[:60]!r}")
    return key


def check_log_name(log: str) -> str:
    """A log name: lower-case letters, digits, ``-`` and ``_``."""
    if not isinstance(log, str) or not LOG_NAME.match(log):
        raise InvalidInput(f"not a log name: {str(log)[:40]!r}")
    return log


def log_key(log: str) -> str:
    """The record of log ``log``."""
    return f"log:{check_log_name(log)}"


def events_key(key: str) -> str:
    """The record of the event window ``key``."""
    return f"events:{_short(key)}"


def lease_key(key: str) -> str:
    """The record of lease ``key``."""
    return f"lease:{_short(key)}"


def _short(key: str) -> str:
    if len(check_key(key)) > SHORT:
        raise InvalidInput(f"not a store key: {key[:60]!r}… is over {SHORT} characters")
    return key


# -- logs ------------------------------------------------------------------------------------
def checked_entry(entry: Mapping[str, Any]) -> dict[str, Any]:
    """``entry`` as a log keeps it: a JSON object, or :class:`InvalidInput`."""
    try:
        return dict(json.loads(json.dumps(dict(entry), allow_nan=False)))
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"log entries must be JSON objects: {exc}") from None


def prepend(entry: dict[str, Any], keep: int, before: list[dict[str, Any]]) -> RecordChange[None]:
    """Put ``entry`` first in a log, keeping the newest ``keep``; ``before``: the entries of
    an older layout, taken over when the log has no record yet."""

    def change(current: Record | None, now: float) -> Outcome[Record, None]:
        entries = _stored(current) if current is not None else before
        return Outcome({"entries": [entry, *entries][: max(keep, 1)]}, None)

    return change


def entries_of(record: Record | None) -> list[dict[str, Any]]:
    """A log record's entries, newest first; one that is not an object is reported."""
    return [decode_entry(item) for item in _stored(record)]


def _stored(record: Record | None) -> list[Any]:
    """A log record's entries as stored: a damaged one is kept as it is, never rewritten."""
    raw = (record or {}).get("entries", [])
    return raw if isinstance(raw, list) else [raw]


def decode_entry(raw: object) -> dict[str, Any]:
    """A stored log entry (JSON text or an object); anything else is reported, not dropped."""
    try:
        entry = json.loads(raw) if isinstance(raw, bytes | str) else raw
    except (ValueError, RecursionError) as exc:
        return {"unreadable": f"{exc}"[:200]}
    if not isinstance(entry, dict):
        return {"unreadable": f"expected an object, got {type(entry).__name__}"}
    return entry


# -- event windows ---------------------------------------------------------------------------
def add_event(window: float, detail: str, limit: int) -> RecordChange[int]:
    """Record an event at store time in a window of ``window`` seconds, keeping the newest
    ``limit``; the result is how many the window holds."""

    def change(current: Record | None, now: float) -> Outcome[Record, int]:
        kept = [[e.at, e.detail] for e in events_of(current) if e.at >= now - window]
        events = [*kept, [now, detail]][-max(limit, 1) :]
        return Outcome({"events": events}, len(events))

    return change


def events_of(record: Record | None, key: str = "") -> list[Event]:
    """The events of window ``key``, oldest first; :class:`StoreError` if unreadable."""
    try:
        return [Event(float(at), str(detail)) for at, detail in (record or {}).get("events", [])]
    except (ValueError, TypeError) as exc:
        raise StoreError(f"events {key!r} are unreadable: {exc}"[:300]) from None


# -- leases ----------------------------------------------------------------------------------
def lease_holder(record: Record | None, now: float) -> str | None:
    """Who holds a lease at store time ``now``; ``None`` if it is free or expired (or its
    expiry cannot be read: it would never expire). An owner that cannot be read holds it as
    ``<unreadable>`` until it expires."""
    if record is None:
        return None
    expires, owner = record.get("expires"), record.get("owner")
    if not isinstance(expires, int | float) or not math.isfinite(expires):
        return None
    if expires <= now:
        return None
    return owner if isinstance(owner, str) else UNREADABLE


def acquire(owner: str, ttl: float) -> RecordChange[bool]:
    """Take a lease for ``ttl`` seconds if it is free, or extend it if ``owner`` holds it."""

    def change(current: Record | None, now: float) -> Outcome[Record, bool]:
        if lease_holder(current, now) not in (None, owner):
            return Outcome(None, False)
        return Outcome({"owner": owner, "expires": now + ttl}, True)

    return change


def release(owner: str) -> RecordChange[bool]:
    """Give up a lease if ``owner`` holds it."""

    def change(current: Record | None, now: float) -> Outcome[Record, bool]:
        if current is None or lease_holder(current, now) != owner:
            return Outcome(None, False)
        return Outcome({}, True)

    return change
