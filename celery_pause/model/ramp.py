"""Ramped resumes: a resumed scope's start rate rises from a trickle to unlimited.

A ramp is recorded in the state beside the holds. Over its ``duration`` the rate at
which the cluster starts tasks of its scope rises linearly from zero to ``peak`` tasks
per second (``pause_ramp_peak``); from its end on the rate is unlimited, so nothing
waits longer than the ramp. A hold pausing the scope wins over a ramp at once.

A ramp is a limit whose rate rises (:mod:`.limit`): the workers share it through one
record in the store, the number of starts the cluster was granted, and a worker with
tasks waiting books the next start times along the curve (:func:`book`), a run at a
time. Whichever workers hold the backlog, the cluster follows the curve.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from typing import Any

from .formatting import format_duration, format_time
from .jsonfields import number, optional_str, require_str
from .limit import HORIZON, Record
from .outcome import Outcome
from .scope import Scope, rule_from_json

MAX_RAMP = 86400.0
"""The longest ramp, in seconds (a day)."""


@dataclass(frozen=True)
class Ramp:
    """One ramped resume: where, from when, for how long, and how steep."""

    scope: Scope
    start: float
    """Store time the ramp began (the resume)."""
    duration: float
    peak: float
    """The cluster's start rate, tasks per second, at the end of the ramp."""
    source: str = "manual"
    by: str | None = None
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    @property
    def end(self) -> float:
        return self.start + self.duration

    def live(self, now: float) -> bool:
        """Whether the ramp still limits at store time ``now``."""
        return now < self.end

    def progress(self, now: float) -> float:
        """How far the ramp has come at ``now``, from 0 to 1."""
        return min(max((now - self.start) / self.duration, 0.0), 1.0)

    def rate(self, now: float) -> float:
        """The cluster's start rate at ``now`` (tasks per second; infinite once over)."""
        return math.inf if not self.live(now) else self.peak * self.progress(now)

    def allowance(self, now: float) -> float:
        """How many starts the cluster may have made by ``now`` since the ramp began."""
        return self.peak * self.duration * self.progress(now) ** 2 / 2

    def when_allowed(self, starts: float) -> float:
        """The store time by which the cluster may have made ``starts`` starts."""
        if starts <= 0:
            return self.start
        reached = math.sqrt(2 * starts / (self.peak * self.duration))
        return self.start + self.duration * min(reached, 1.0)

    def describe(self, now: float) -> str:
        """``queue a: 35% through a ramp of 10 minutes, at 35.0 of 100 tasks/s, until …``."""
        by = f", by {self.by}" if self.by else ""
        source = "" if self.source == "manual" else f", {self.source}"
        return (
            f"{self.scope.describe()}: {self.progress(now):.0%} through a ramp of "
            f"{format_duration(self.duration)}, at {self.rate(now):.1f} of {self.peak:g} "
            f"tasks/s, until {format_time(self.end)}{by}{source}"
        )

    def status_json(self, now: float) -> dict[str, Any]:
        """The ramp and how far it has come at ``now`` (``pause status --json``)."""
        rate = self.rate(now) if self.live(now) else None
        return {**self.to_json(), "end": self.end, "progress": self.progress(now), "rate": rate}

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "scope": self.scope.to_json(),
            "start": self.start,
            "duration": self.duration,
            "peak": self.peak,
            "source": self.source,
            "by": self.by,
        }

    @classmethod
    def from_json(cls, data: Any) -> Ramp:
        """Decode one ramp; raises ``ValueError``/``TypeError``/``KeyError`` if it is not one
        (a ``sharers`` field of an older release is left aside)."""
        duration, peak = number(data["duration"]), number(data["peak"])
        if not 0 < duration <= MAX_RAMP or peak <= 0:
            raise ValueError(f"ramp of {duration!r} s to {peak!r}/s")
        return cls(
            scope=_scope(data["scope"]),
            start=number(data["start"]),
            duration=duration,
            peak=peak,
            source=require_str(data["source"]),
            by=optional_str(data.get("by")),
            id=require_str(data["id"]),
        )


def _scope(rules: Any) -> Scope:
    if not isinstance(rules, list) or not rules:
        raise ValueError(f"ramp scope is {rules!r}"[:80])
    return Scope(frozenset(rule_from_json(rule) for rule in rules))


BURST = 1.0
"""Seconds of the current rate the cluster may save up: starts a ramp allowed while nothing
waited are caught up on for at most that long, so a backlog that comes late does not burst."""


def book(
    record: Record | None,
    now: float,
    *,
    ramp: Ramp,
    want: int,
    known: float = 0.0,
    kept: float | None = -math.inf,
) -> Outcome[Record, Booked]:
    """Book up to ``want`` start times of ``ramp`` at store time ``now``: the next ones along
    its curve after those the cluster was granted, within :data:`HORIZON` of ``now`` (a start
    saved up is booked at ``now``, not in the past).

    A record the store lost (missing, or behind the starts this worker ``known`` granted, the
    last of them ahead of ``now``) goes on past every start booked before the loss, by the
    rule of a rate's (:func:`~.limit.lost_by`). ``kept``: since when the store kept its
    records; ``None`` if not known yet (asked for when the record is missing).
    """
    stored = number(record["granted"]) if record and "granted" in record else None
    granted = stored or 0.0
    if known > granted and ramp.when_allowed(known) > now:
        lost: float | None = now
    else:
        lost = -math.inf if stored is not None else kept
    if lost is None:
        return Outcome(None, Booked((), now, unknown=True))
    saved = max(1.0, ramp.rate(now) * BURST) if ramp.live(now) else math.inf
    granted = max(granted, math.floor(ramp.allowance(now) - saved))
    floor = lost + HORIZON
    if floor > now:  # lost: go on past every start the cluster may hold
        granted = max(granted, math.floor(ramp.allowance(floor)))
    times: list[float] = []
    while len(times) < want:
        at = ramp.when_allowed(granted + len(times) + 1)
        if at > now + HORIZON:
            break
        times.append(max(at, now))
    following = {"granted": granted + len(times)}
    retry_at = max(now, ramp.when_allowed(following["granted"] + 1) - HORIZON)
    write = bool(times) or (floor > now and granted > (stored or 0.0))
    booked = Booked(tuple(times), retry_at, granted=following["granted"])
    return Outcome(following if write else None, booked)


@dataclass(frozen=True)
class Booked:
    """Start times booked along a ramp (store times), and when more are worth asking for."""

    starts: tuple[float, ...]
    retry_at: float
    granted: float = 0.0
    """The starts the record says were granted after this."""
    unknown: bool = False
    """The record is missing, and whether the store lost it needs ``kept``: ask again."""


def ramp_key(ramp_id: str) -> str:
    """The store record of ramp ``ramp_id``: the starts the cluster was granted."""
    return f"ramp:{ramp_id}"
