"""Adaptive limits: a limit whose rate (and concurrency) is a ceiling, and whose level below it
the downstream decides, in one store record per limit (:func:`adapt_key`).

A task that finds the downstream overloaded (:class:`~celery_pause.Overloaded`) *cuts* the
level multiplicatively; the level then comes back along a curve of the time since the cut,
as CUBIC does for TCP (RFC 9438): quickly at first, flat near the level it was cut from (the
*peak*, where the downstream said no), then growing ever faster past it, until it finds the
downstream's capacity again or reaches the ceiling. A downstream whose capacity is steady
sees a few overloads a minute; one whose capacity fell is found within a few cuts, one whose
capacity rose within seconds. Each change is a pure rule on the record; the level is a pure
function of it and the time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from .jsonfields import number
from .limit import Limit, Record
from .outcome import Outcome

DECREASE = 0.85
"""The fraction of the level a cut keeps (RFC 9438's beta is 0.7: a cut here comes with the
Retry-After's pause, a loss TCP does not have, so it takes less)."""
RECOVER = 12.0
"""Seconds the level takes to come back to its peak after a cut: in a steady downstream, one
overload (and its Retry-After) every thirteen seconds or so."""
GROWTH = 0.3
"""How fast the level grows past its peak: 30 % a second, compounding (three times the peak
in 4.2 s), so a downstream whose capacity rose is found within seconds of the recovery."""
COOL_DOWN = 1.0
"""Seconds after a cut (or until its Retry-After passed, if longer) in which overloads do not
cut again: they come from tasks started at the old level."""
FLOOR = 1e-3
"""The lowest level, as a fraction of the ceiling."""
MAX_WAIT = 3600.0
"""The longest a Retry-After holds the scope, in seconds (a longer one, or a record saying
so, holds it an hour)."""
STEPPED_BACK = 60.0
"""Seconds a cut may lie ahead of the store's clock before it is taken for one made before
the clock stepped back (then it is over: the level is back, and the next overload cuts)."""


@dataclass(frozen=True)
class Cut:
    """The last cut of an adaptive limit: the level it was cut from (``peak``, a fraction of
    the ceiling), when (store time), why, and until when nothing starts (its Retry-After)."""

    peak: float
    at: float
    why: str
    until: float | None = None
    count: int = 1
    """Cuts since the limit was set."""

    def level(self, now: float) -> float:
        """The fraction of the ceiling the limit allows at store time ``now``."""
        since = math.inf if self.stepped_back(now) else max(0.0, now - self.at)
        if since <= RECOVER:
            shortfall = (1.0 - DECREASE) * (1.0 - since / RECOVER) ** 3
            level = self.peak * (1.0 - shortfall)
        else:
            level = self.peak * (1.0 + GROWTH) ** min(since - RECOVER, 120.0)  # 1 by then
        return min(1.0, max(FLOOR, level))

    def cools(self, now: float) -> bool:
        """Whether an overload at ``now`` comes too soon after this cut to cut again."""
        return not self.stepped_back(now) and now < max(self.at + COOL_DOWN, self.until or 0.0)

    def stepped_back(self, now: float) -> bool:
        """Whether the cut lies so far ahead of ``now`` that the clock stepped back since."""
        return now < self.at - STEPPED_BACK

    def to_json(self) -> dict[str, Any]:
        until = {} if self.until is None else {"until": self.until}
        return {"peak": self.peak, "at": self.at, "why": self.why, "count": self.count, **until}

    @classmethod
    def from_json(cls, data: Any) -> Cut:
        at, until = number(data["at"]), data.get("until")
        why, count = data.get("why", ""), data.get("count", 1)
        return cls(
            peak=min(1.0, max(FLOOR, number(data["peak"]))),
            at=at,
            why=why if isinstance(why, str) else "",
            until=None if until is None else min(number(until), at + MAX_WAIT),
            count=count if type(count) is int else 1,
        )


def cut_of(record: Record | None) -> Cut | None:
    """The last cut an adaptive limit's record holds (``None``: never cut, or unreadable)."""
    if not record or "cut" not in record:
        return None
    try:
        return Cut.from_json(record["cut"])
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def level_of(record: Record | None, now: float) -> float:
    """The fraction of its ceiling an adaptive limit allows at store time ``now``: its
    ceiling if never cut (or the record was lost), one cut below it if the record cannot be
    read (the next overload writes it afresh)."""
    cut = cut_of(record)
    if cut is None:
        return DECREASE if record and "cut" in record else 1.0
    return cut.level(now)


def at_level(limit: Limit, level: float) -> Limit:
    """``limit`` at ``level`` of its ceiling: the rate times it, the concurrency too (at
    least one task at a time)."""
    if level >= 1.0:
        return limit
    rate = None if limit.rate is None else max(limit.rate * level, 1e-9)
    concurrency = (
        None if limit.concurrency is None else max(1, math.floor(limit.concurrency * level))
    )
    return replace(limit, rate=rate, concurrency=concurrency)


def overload(
    record: Record | None, now: float, *, why: str, retry_after: float | None
) -> Outcome[Record, Cut | None]:
    """A task found the downstream overloaded at store time ``now``: cut the level (unless
    the last cut :meth:`~Cut.cools`) and, with ``retry_after``, hold every start until then
    (a later Retry-After extends the last cut's); the cut, if one was made.

    As in RFC 9438 (fast convergence), a cut below the previous peak lowers the peak to
    halfway between the two: the downstream's capacity fell, and the level need not
    climb back that high. A cut while growing past the previous peak takes the level a
    second of growth ago for the peak (no lower than the previous one): a downstream's
    burst allowance lets the level grow that long past its capacity before it says no."""
    last = cut_of(record)
    until = None if retry_after is None else now + retry_after
    if last is not None and last.cools(now):
        if until is None or until <= (last.until or -math.inf):
            return Outcome(None, None)
        return Outcome(_written(record, replace(last, until=until)), None)
    level = 1.0 if last is None else last.level(now)
    if last is None:
        peak = level
    elif level > last.peak:  # growing past it: the downstream said no a moment ago
        peak = max(last.peak, level / (1.0 + GROWTH))
    else:
        peak = level * (1.0 + DECREASE) / 2
    count = 1 if last is None else last.count + 1
    cut = Cut(peak=max(FLOOR, peak), at=now, why=why, until=until, count=count)
    return Outcome(_written(record, cut), cut)


def _written(record: Record | None, cut: Cut) -> Record:
    return {**(record or {}), "cut": cut.to_json()}


def adapt_key(limit_id: str) -> str:
    """The store record of the level of adaptive limit (or partition) ``limit_id``."""
    return f"limit:{limit_id}:adapt"


def forget_level(record: Record | None, now: float) -> Outcome[Record, None]:
    """Delete an adaptive limit's level (its limit was lifted, or its partition forgotten:
    a limit set again starts at its ceiling)."""
    return Outcome(None if record is None else {}, None)
