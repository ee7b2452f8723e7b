"""Ramped resumes: a resumed scope's start rate rises from a trickle to unlimited.

A ramp is recorded in the state beside the holds. Over its ``duration`` the rate at
which the cluster starts tasks of its scope rises linearly from zero to ``peak`` tasks
per second (``pause_ramp_peak``); from its end on the rate is unlimited, so nothing
waits longer than the ramp. A hold pausing the scope wins over a ramp at once.

The workers share the rate without talking to each other: each one takes an equal
share, ``1 / sharers``, where ``sharers`` is the number of live workers the ramp
applies to when it was recorded. No store operation per task; the price is that the
cluster runs below the curve while some workers have nothing of the scope to start.
"""

from __future__ import annotations

import math
import uuid
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .formatting import format_duration, format_time
from .jsonfields import number, optional_str, require_str
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
    sharers: int = 1
    """Live workers sharing the rate, counted when the ramp was recorded."""
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
            "sharers": self.sharers,
            "source": self.source,
            "by": self.by,
        }

    @classmethod
    def from_json(cls, data: Any) -> Ramp:
        """Decode one ramp; raises ``ValueError``/``TypeError``/``KeyError`` if it is not one."""
        duration, peak, sharers = number(data["duration"]), number(data["peak"]), data["sharers"]
        if not 0 < duration <= MAX_RAMP or peak <= 0:
            raise ValueError(f"ramp of {duration!r} s to {peak!r}/s")
        if type(sharers) is not int or sharers < 1:
            raise ValueError(f"ramp shared by {sharers!r} workers")
        return cls(
            scope=_scope(data["scope"]),
            start=number(data["start"]),
            duration=duration,
            peak=peak,
            sharers=sharers,
            source=require_str(data["source"]),
            by=optional_str(data.get("by")),
            id=require_str(data["id"]),
        )


def count_sharers(scope: Scope, hosts: Iterable[str]) -> int:
    """How many of the live workers ``hosts`` a ramp on ``scope`` applies to (at least one):
    they share its rate."""
    return max(1, sum(1 for host in hosts if scope.for_worker(host)))


def _scope(rules: Any) -> Scope:
    if not isinstance(rules, list) or not rules:
        raise ValueError(f"ramp scope is {rules!r}"[:80])
    return Scope(frozenset(rule_from_json(rule) for rule in rules))


def phase_of(hostname: str) -> float:
    """A worker's fixed phase in (0, 1]: where in each step of its share it starts a task.

    Taken from a hash of its name, so that workers sharing a ramp do not all start at the
    same moments (each share alone would start its k-th task when the curve reaches the
    same point on every worker).
    """
    return (zlib.crc32(hostname.encode()) % 1000 + 1) / 1000


class Share:
    """One worker's share of a ramp's rate: a token bucket that refills along the curve.

    The worker's k-th start is due once its share of the curve reaches ``k - phase``.
    Unused starts carry over for at most one second's worth of the current rate, so a
    worker that had nothing to start does not burst later.
    """

    BURST = 1.0
    """Seconds of the current rate a worker may save up."""

    def __init__(self, ramp: Ramp, phase: float = 1.0) -> None:
        self.ramp = ramp
        self.share = 1.0 / ramp.sharers
        self.phase = phase
        self.used = 0.0
        """Starts counted against the share (its own, plus allowance it let lapse)."""

    def allowed(self, now: float) -> float:
        """Starts this worker may have made by ``now``: its share of the curve, plus its phase."""
        return self.ramp.allowance(now) * self.share + self.phase

    def take(self, now: float) -> bool:
        """Whether one task may start at store time ``now`` (counted if so)."""
        if not self.ramp.live(now):
            return True
        allowed = self.allowed(now)
        saved = max(1.0, self.ramp.rate(now) * self.share * self.BURST)
        self.used = max(self.used, allowed - saved)
        if self.used + 1 <= allowed:
            self.used += 1
            return True
        return False

    def next_start(self) -> float:
        """The store time the next task may start."""
        return self.ramp.when_allowed((self.used + 1 - self.phase) / self.share)
