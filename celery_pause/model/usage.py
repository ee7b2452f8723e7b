"""How much of a limit the cluster uses, as its store records say (``pause status``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .adaptive import Cut, at_level, cut_of, level_of
from .formatting import format_duration
from .limit import Limit, Record, format_rate, next_start
from .slots import live_slots

BUSIEST = 5
"""Partitions of a limit per label a status names (it counts the rest)."""


@dataclass(frozen=True)
class Usage:
    """How much of one limit the cluster uses, as its store records say."""

    running: int | None
    """Slots of the concurrency taken (tasks running or about to), ``None`` without one;
    of a limit per label, in every partition."""
    booked: float | None
    """Seconds of the rate's start times reserved ahead of now (0: the rate is not all used;
    above 0: tasks queue for their turn), ``None`` without a rate; of a limit per label,
    the most of any partition."""
    partitions: int | None = None
    """Of a limit per label: the label values in use (with a slot taken or a start booked)."""
    busiest: tuple[tuple[str, int, float], ...] = ()
    """Of a limit per label: the :data:`BUSIEST` partitions most in use, each as its label
    value, slots taken and seconds booked ahead."""
    level: float | None = None
    """Of an adaptive limit: the fraction of its ceiling it allows now."""
    cut: Cut | None = None
    """Of an adaptive limit: its last cut, if any."""
    now: float = 0.0
    """Store time the records were read."""

    @classmethod
    def of(
        cls,
        limit: Limit,
        slots: Record | None,
        rate: Record | None,
        now: float,
        adapt: Record | None = None,
    ) -> Usage:
        running = None if limit.concurrency is None else len(live_slots(slots, now))
        booked = None if limit.rate is None else max(0.0, next_start(rate) - now)
        if not limit.adaptive:
            return cls(running=running, booked=booked)
        level = level_of(adapt, now)
        return cls(running=running, booked=booked, level=level, cut=cut_of(adapt), now=now)

    @classmethod
    def of_partitions(cls, limit: Limit, records: dict[str, Record], now: float) -> Usage:
        """The use of a limit per label from the records of its partitions, keyed as they
        follow :func:`~.limit_keys.records_prefix` (``<digest>:slots``, ``<digest>:rate``)."""
        parts: dict[str, list[Any]] = {}
        for key, record in records.items():
            partition, _, kind = key.partition(":")
            if kind not in ("slots", "rate"):
                continue  # not a partition's record
            part = parts.setdefault(partition, [str(record.get("of", "?")), 0, 0.0])
            if kind == "slots":
                part[1] = len(live_slots(record, now))
            else:
                part[2] = max(0.0, next_start(record) - now)
        used = sorted((p for p in parts.values() if p[1] or p[2]), key=lambda p: (-p[1], -p[2]))
        return cls(
            running=None if limit.concurrency is None else sum(p[1] for p in used),
            booked=None if limit.rate is None else max((p[2] for p in used), default=0.0),
            partitions=len(used),
            busiest=tuple((value, running, booked) for value, running, booked in used[:BUSIEST]),
        )

    def describe(self, limit: Limit) -> str:
        """``2 of 3 running``, ``rate fully used`` or ``rate not fully used``; of a limit per
        label, how many values use it and the busiest (``4 tenants in use, busiest: acme
        2 running, …``)."""
        if self.partitions is not None:
            return self._describe_partitions(limit)
        parts = self._adapted(limit)
        current = limit if self.level is None else at_level(limit, self.level)
        if self.running is not None:
            parts.append(f"{self.running} of {current.concurrency} running")
        if self.booked is not None:
            parts.append("rate fully used" if self.booked > 0 else "rate not fully used")
        return ", ".join(parts)

    def _adapted(self, limit: Limit) -> list[str]:
        """An adaptive limit's level and last cut: ``now 31.5/s (cut 12 seconds ago from
        40/s: 429 from the API; nothing starts for 0.4s)``."""
        if self.level is None:
            return []
        current = at_level(limit, self.level)
        shown = [] if current.rate is None else [f"{current.rate:.1f}/s"]
        shown += [] if current.concurrency is None else [f"at most {current.concurrency} at once"]
        now = ", ".join(shown)
        if self.cut is None:
            return [f"now {now} (never cut)"]
        cut = self.cut
        peak = at_level(limit, cut.peak)
        was = format_rate(peak.rate) if peak.rate is not None else f"{peak.concurrency} at once"
        held = (
            f"; nothing starts for {cut.until - self.now:.1f}s"
            if cut.until is not None and cut.until > self.now
            else ""
        )
        ago = format_duration(max(0.0, self.now - cut.at))
        return [f"now {now} (cut {ago} ago from {was}: {cut.why}{held})"]

    def _describe_partitions(self, limit: Limit) -> str:
        head = f"{self.partitions} {limit.per} value{'s' if self.partitions != 1 else ''} in use"
        if not self.busiest:
            return head
        shown = []
        for value, running, booked in self.busiest:
            use = [f"{running} running"] if limit.concurrency is not None else []
            if limit.rate is not None:
                use.append("rate fully used" if booked > 0 else "rate not fully used")
            shown.append(f"{value!r} {', '.join(use)}")
        return f"{head}, busiest: {'; '.join(shown)}"

    def to_json(self) -> dict[str, Any]:
        if self.partitions is None:
            adaptive = {} if self.level is None else {"adaptive": self._adaptive_json()}
            return {"running": self.running, "booked": self.booked, **adaptive}
        busiest = [{"value": v, "running": r, "booked": b} for v, r, b in self.busiest]
        return {
            "running": self.running,
            "booked": self.booked,
            "partitions": self.partitions,
            "busiest": busiest,
        }

    def _adaptive_json(self) -> dict[str, Any]:
        cut = None if self.cut is None else self.cut.to_json()
        return {"level": self.level, "cut": cut}
