"""Limits: a hold that slows its scope to a cluster-wide rate or concurrency instead of stopping it.

A :class:`Limit` rides on a hold (``Hold.limit``): same scope, who, why, when and auto-resume.
A pause is the limit zero and beats any limit; where several limits cover a task, each counts
it and the strictest decides.

The workers share a limit through two records in the store, each changed by a pure rule here:

- **rate**: the *theoretical arrival time* of the next start (GCRA). A worker with tasks
  waiting reserves a run of start times, ``1 / rate`` apart, that lie within
  :data:`HORIZON` seconds; the cluster's starts are then exactly that far apart, whichever
  workers hold the backlog, with one store round trip per run rather than per start.
- **concurrency**: the slots taken, each with an expiry. A worker takes one before a task
  starts and gives it back once the task ended (or keeps it for its next waiting task);
  it renews the slots it holds with its heartbeat, so a worker that dies gives them back
  within ``pause_worker_ttl``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .jsonfields import number
from .outcome import Outcome

HORIZON = 1.0
"""How far ahead, in seconds, a worker may reserve start times of a rate."""
MAX_RATE = 1e6
"""The highest rate a limit takes, in tasks per second."""
MAX_CONCURRENCY = 100_000
"""The highest concurrency a limit takes."""

Record = dict[str, Any]


@dataclass(frozen=True)
class Limit:
    """At most ``rate`` starts per second and ``concurrency`` running tasks in the cluster."""

    rate: float | None = None
    concurrency: int | None = None

    def __post_init__(self) -> None:
        if self.rate is None and self.concurrency is None:
            raise ValueError("a limit needs a rate, a concurrency or both")
        if self.rate is not None and not 0 < self.rate <= MAX_RATE:
            raise ValueError(f"rate is {self.rate!r}")
        if self.concurrency is not None and not 0 < self.concurrency <= MAX_CONCURRENCY:
            raise ValueError(f"concurrency is {self.concurrency!r}")

    @property
    def interval(self) -> float:
        """Seconds between two starts of the cluster (0 without a rate)."""
        return 0.0 if self.rate is None else 1.0 / self.rate

    def describe(self) -> str:
        """``10/s``, ``at most 3 at once``, or both."""
        parts = []
        if self.rate is not None:
            parts.append(format_rate(self.rate))
        if self.concurrency is not None:
            parts.append(f"at most {self.concurrency} at once")
        return ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"rate": self.rate, "concurrency": self.concurrency}

    @classmethod
    def from_json(cls, data: Any) -> Limit | None:
        """The limit of a stored hold (``None``: the hold pauses); ``ValueError`` or
        ``TypeError`` for anything else."""
        rate, concurrency = data.get("rate"), data.get("concurrency")
        if rate is None and concurrency is None:
            return None
        if concurrency is not None and type(concurrency) is not int:
            raise TypeError(f"concurrency is {concurrency!r}")
        return cls(rate=None if rate is None else number(rate), concurrency=concurrency)


def format_rate(rate: float) -> str:
    """``10/s``, ``0.5/s``, or ``30/m`` and ``2/h`` where that reads as a whole number."""
    for unit, seconds in (("s", 1), ("m", 60), ("h", 3600)):
        per = rate * seconds
        if per >= 1 and abs(per - round(per)) < 1e-9:
            return f"{round(per)}/{unit}"
    return f"{rate:.3g}/s"


@dataclass(frozen=True)
class Reservation:
    """Start times reserved of a rate: ``count`` of them from ``first``, ``interval``
    apart; with none, ``retry_at`` is when the run asked for fits (store times)."""

    first: float
    count: int
    interval: float
    retry_at: float

    def times(self) -> list[float]:
        return [self.first + i * self.interval for i in range(self.count)]


def reserve(
    record: Record | None, now: float, *, interval: float, want: int
) -> Outcome[Record, Reservation]:
    """Reserve ``want`` consecutive start times of a rate at store time ``now``, all or none.

    They are granted when the last lies within :data:`HORIZON` of ``now``; otherwise
    nothing is, and the reservation says when they would fit.
    """
    tat = _tat(record)
    first = max(tat, now)
    last = first + (want - 1) * interval
    if want < 1 or last > now + HORIZON:
        retry_at = max(now, last - HORIZON)
        return Outcome(None, Reservation(first, 0, interval, retry_at))
    following = {"tat": first + want * interval}
    return Outcome(following, Reservation(first, want, interval, now))


def run_length(rate: float, waiting: int) -> int:
    """How many start times a worker with ``waiting`` tasks reserves at once: a quarter of
    the horizon's worth, so that several workers take turns, never more than wait."""
    return max(1, min(waiting, math.ceil(rate * HORIZON / 4)))


def _tat(record: Record | None) -> float:
    if record is None or "tat" not in record:
        return float("-inf")
    return number(record["tat"])


def take_slots(
    record: Record | None, now: float, *, limit: int, ids: list[str], ttl: float
) -> Outcome[Record, list[str]]:
    """Take as many of the slots ``ids`` as the concurrency ``limit`` has free at ``now``
    (expired ones are free); the ids taken."""
    slots = live_slots(record, now)
    free = max(0, limit - len(slots))
    taken = ids[:free]
    if not taken:
        return Outcome(None, [])
    slots.update((slot, now + ttl) for slot in taken)
    return Outcome({"slots": slots}, taken)


def give_back(record: Record | None, now: float, *, ids: list[str]) -> Outcome[Record, int]:
    """Free the slots ``ids`` (and every expired one); how many of ``ids`` were held."""
    slots = live_slots(record, now)
    held = [slot for slot in ids if slot in slots]
    for slot in held:
        del slots[slot]
    if record is not None and len(slots) == len(record.get("slots", {})):
        return Outcome(None, 0)
    return Outcome({"slots": slots}, len(held))


def renew_slots(
    record: Record | None, now: float, *, ids: list[str], ttl: float
) -> Outcome[Record, list[str]]:
    """Extend the slots ``ids`` to ``now + ttl``; those that had expired are lost (the ids
    still held are returned)."""
    slots = live_slots(record, now)
    held = [slot for slot in ids if slot in slots]
    slots.update((slot, now + ttl) for slot in held)
    return Outcome({"slots": slots}, held)


def live_slots(record: Record | None, now: float) -> dict[str, float]:
    """The slots taken and not expired at ``now``: id to expiry."""
    if record is None:
        return {}
    slots = record.get("slots", {})
    if not isinstance(slots, dict):
        raise TypeError(f"slots is {type(slots).__name__}")
    return {str(slot): expiry for slot, expiry in slots.items() if number(expiry) > now}


@dataclass(frozen=True)
class Usage:
    """How much of one limit the cluster uses, as its store records say."""

    running: int | None
    """Slots of the concurrency taken (tasks running or about to), ``None`` without one."""
    booked: float | None
    """Seconds of the rate's start times reserved ahead of now (0: the rate is not all used;
    above 0: tasks queue for their turn), ``None`` without a rate."""

    @classmethod
    def of(cls, limit: Limit, slots: Record | None, rate: Record | None, now: float) -> Usage:
        running = None if limit.concurrency is None else len(live_slots(slots, now))
        booked = None if limit.rate is None else max(0.0, _tat(rate) - now)
        return cls(running=running, booked=booked)

    def describe(self, limit: Limit) -> str:
        """``2 of 3 running``, ``rate fully used`` or ``rate not fully used``."""
        parts = []
        if self.running is not None:
            parts.append(f"{self.running} of {limit.concurrency} running")
        if self.booked is not None:
            parts.append("rate fully used" if self.booked > 0 else "rate not fully used")
        return ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"running": self.running, "booked": self.booked}


def slots_key(hold_id: str) -> str:
    """The store record of the concurrency slots of hold ``hold_id``'s limit."""
    return f"limit:{hold_id}:slots"


def rate_key(hold_id: str) -> str:
    """The store record of the rate of hold ``hold_id``'s limit."""
    return f"limit:{hold_id}:rate"
