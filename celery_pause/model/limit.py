"""Limits: a hold that slows its scope to a cluster-wide rate or concurrency instead of stopping it.

A :class:`Limit` rides on a hold (``Hold.limit``): same scope, who, why, when and auto-resume.
A pause is the limit zero and beats any limit; where several limits cover a task, each counts
it and the strictest decides.

The workers share a limit through two records in the store, each changed by a pure rule here:

- **rate**: the *theoretical arrival time* of the next start (GCRA). A worker with tasks
  waiting reserves a run of start times, ``1 / rate`` apart, that lie within
  :data:`HORIZON` seconds; the cluster's starts are then exactly that far apart, whichever
  workers hold the backlog, with one store round trip per run rather than per start. Each
  is spent within :func:`lateness` of its turn or not at all (a stalled worker never spends
  its times at once), and a record the store lost with everything else (a flush, a restart
  without persistence), or found behind what the booking worker saw, goes on past every time
  still held (a single record lost alone is caught only by a worker that saw it ahead).
- **concurrency**: the slots taken, each with an expiry (:mod:`.slots`).

A limit ``per`` a label (``per="tenant"``) is one limit for each value of that label: each
partition has its own two records (:func:`~.limit_keys.partition_id`), made when its value
is first seen and removed once nothing uses them (a rule that leaves a record empty deletes
it), so the store holds the partitions in use, not every value ever seen.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .fair import EVEN, Weights
from .formatting import format_duration
from .jsonfields import number
from .outcome import Outcome

HORIZON = 1.0
"""How far ahead, in seconds, a worker may reserve start times of a rate."""
LATE = 0.01
"""The fewest seconds after its turn a start time may still be spent, whatever the rate (the
worker's loop wakes every few milliseconds: a very high rate is not starved by that)."""
DELAY = 0.05
"""Seconds late a start time may be spent where the rate leaves room: a loaded host's threads
wait that long for a core (1 start in 100 was 40 ms late on two cores at load 10)."""
KEPT_KEY = "limits:kept"
"""The store record saying since when the store has kept the records of the rates and ramps:
written once, it goes only with everything else (a flush, a restart without persistence)."""
MAX_RATE = 1e6
"""The highest rate a limit takes, in tasks per second."""
MAX_CONCURRENCY = 100_000
"""The highest concurrency a limit takes."""
MAX_RISE = 86400.0
"""The longest a rate may take to rise (a ramped resume), in seconds: a day."""
MAX_COST_SECONDS = 3600.0
"""The most one task may cost, in seconds of its rate: a cost above an hour's budget is
charged an hour's budget (a producer's typo never stops a scope for days)."""

Record = dict[str, Any]


@dataclass(frozen=True)
class Limit:
    """At most ``rate`` starts per second and ``concurrency`` running tasks in the cluster
    (for each value of the label ``per``, if given). With ``rise`` the limit is a ramp: over
    ``(start, duration)`` its rate rises linearly from zero to ``rate``."""

    rate: float | None = None
    concurrency: int | None = None
    per: str | None = None
    rise: tuple[float, float] | None = None
    """Store time the rate starts rising from zero, and seconds until it reaches ``rate``."""
    cost: str | None = None
    """The keyword argument (or message header) of a task that says how many units of the
    rate it spends (``None``: each task spends one)."""
    adaptive: bool = False
    """The rate and concurrency are a ceiling: overloads cut them, and they come back
    (:mod:`.adaptive`)."""
    fair: str | None = None
    """A label: the scope's tasks start in turns shared across its values (:mod:`.fair`)."""
    weights: Weights = EVEN
    """Each value's share of the turns of a fair limit (1 unless given)."""

    def __post_init__(self) -> None:
        if self.rate is None and self.concurrency is None and self.fair is None:
            raise ValueError("a limit needs a rate, a concurrency, fair turns or some of them")
        if self.weights.rules and self.fair is None:
            raise ValueError("weights weigh the turns of a fair limit")
        if self.rate is not None and not 0 < self.rate <= MAX_RATE:
            raise ValueError(f"rate is {self.rate!r}")
        if self.concurrency is not None and not 0 < self.concurrency <= MAX_CONCURRENCY:
            raise ValueError(f"concurrency is {self.concurrency!r}")
        if self.rise is not None:
            start, duration = self.rise
            if not (math.isfinite(start) and 0 < duration <= MAX_RISE) or self.rate is None:
                raise ValueError(f"a rate rising over {duration!r} s")
            if self.concurrency is not None or self.per is not None:
                raise ValueError("a rising rate is neither a concurrency nor per label")
        if self.cost is not None and (self.rate is None or self.rise is not None):
            raise ValueError("a cost weighs a rate (not a concurrency, not a ramp)")
        if self.adaptive and self.rise is not None:
            raise ValueError("a rising rate is not adaptive")
        if self.fair is not None and self.rise is not None:
            raise ValueError("a rising rate takes no fair turns")

    @property
    def most_cost(self) -> float:
        """The most one task is charged (:data:`MAX_COST_SECONDS` of the rate)."""
        return max(1.0, (self.rate or 0.0) * MAX_COST_SECONDS)

    @property
    def interval(self) -> float:
        """Seconds between two starts of the cluster at the full rate (0 without a rate)."""
        return 0.0 if self.rate is None else 1.0 / self.rate

    def progress(self, now: float) -> float:
        """How far a rising rate has come at ``now``, from 0 to 1 (1 if it does not rise)."""
        if self.rise is None:
            return 1.0
        start, duration = self.rise
        return min(max((now - start) / duration, 0.0), 1.0)

    def rate_at(self, now: float) -> float:
        """The cluster's start rate at store time ``now`` (``inf`` without a rate)."""
        return math.inf if self.rate is None else self.rate * self.progress(now)

    def after(self, at: float, starts: float) -> float:
        """The store time ``starts`` starts after one at ``at``: an ``interval`` apart each,
        or along the rising rate's curve (then at the full rate past its end)."""
        if self.rise is None:
            return at + starts * self.interval
        rate, (start, duration) = self.rate or 0.0, self.rise
        risen = rate * duration / 2  # the starts the rise allows in all
        done = (
            0.0
            if at <= start
            else risen * self.progress(at) ** 2 + max(0.0, at - start - duration) * rate
        )
        total = done + starts
        if total <= risen:
            return start + duration * math.sqrt(total / risen)
        return start + duration + (total - risen) / rate

    def describe(self) -> str:
        """``10/s``, ``at most 3 at once``, or both; ``rising to 100/s over 10 minutes``;
        ``1500/s of tokens``."""
        parts = []
        if self.rate is not None:
            parts.append(format_rate(self.rate))
        if self.cost is not None:
            parts[0] += f" of {self.cost}"
        if self.rise is not None:
            parts[0] = f"rising to {parts[0]} over {format_duration(self.rise[1])}"
        if self.concurrency is not None:
            parts.append(f"at most {self.concurrency} at once")
        each = "" if self.per is None else f" per {self.per}"
        adapts = "adaptive, up to " if self.adaptive else ""
        if self.fair is not None:
            weighed = self.weights.describe()
            parts.append(f"fair by {self.fair}" + (f" ({weighed})" if weighed else ""))
        return adapts + ", ".join(parts) + each

    def to_json(self) -> dict[str, Any]:
        optional = {
            "per": self.per,
            "cost": self.cost,
            "adaptive": self.adaptive or None,
            "fair": self.fair,
            "weights": self.weights.to_json() or None,
        }
        rise = {} if self.rise is None else {"rise": list(self.rise)}
        shown = {name: value for name, value in optional.items() if value is not None}
        return {"rate": self.rate, "concurrency": self.concurrency, **shown, **rise}

    @classmethod
    def from_json(cls, data: Any) -> Limit | None:
        """The limit of a stored hold (``None``: the hold pauses); ``ValueError`` or
        ``TypeError`` for anything else."""
        rate, concurrency, per = data.get("rate"), data.get("concurrency"), data.get("per")
        rise, cost, adaptive = data.get("rise"), data.get("cost"), data.get("adaptive", False)
        fair, weights = data.get("fair"), Weights.from_json(data.get("weights"))
        if fair is not None and not isinstance(fair, str):
            raise TypeError(f"fair is {fair!r}"[:80])
        if rate is None and concurrency is None and fair is None:
            if per is not None or rise is not None or cost is not None or adaptive:
                raise ValueError("a limit per label or rising needs a rate or a concurrency")
            return None
        if concurrency is not None and type(concurrency) is not int:
            raise TypeError(f"concurrency is {concurrency!r}")
        if per is not None and not isinstance(per, str):
            raise TypeError(f"per is {per!r}")
        if cost is not None and not isinstance(cost, str):
            raise TypeError(f"cost is {cost!r}"[:80])
        if type(adaptive) is not bool:
            raise TypeError(f"adaptive is {adaptive!r}"[:80])
        if rise is not None:
            if not isinstance(rise, list) or len(rise) != 2:
                raise TypeError(f"rise is {rise!r}"[:80])
            rise = (number(rise[0]), number(rise[1]))
        rate = None if rate is None else number(rate)
        return cls(
            rate=rate,
            concurrency=concurrency,
            per=per,
            rise=rise,
            cost=cost,
            adaptive=adaptive,
            fair=fair,
            weights=weights,
        )


def format_rate(rate: float) -> str:
    """``10/s``, ``0.5/s``, or ``30/m`` and ``2/h`` where that reads as a whole number."""
    for unit, seconds in (("s", 1), ("m", 60), ("h", 3600)):
        per = rate * seconds
        if per >= 1 and abs(per - round(per)) < 1e-9:
            return f"{round(per)}/{unit}"
    return f"{rate:.3g}/s"


def lateness(rate: float) -> float:
    """Seconds after its turn a start time of ``rate`` may still be spent: half the room the
    rate plus one start leaves to a second (``room``: 1 less the fraction of the rate, so
    half an interval at a whole rate), widened up to the whole room for :data:`DELAY`; at
    least :data:`LATE`, at most :data:`HORIZON`.

    The cluster's start times lie an interval apart: a second holds ``rate`` of them, and
    starts up to ``late`` seconds late add ``late * rate``: within the room, no more than the
    rate plus one (the other half is for the workers' clocks where the rate leaves it).
    Above 100/s :data:`LATE` lets a second hold up to 1 % more."""
    if not 0 < rate < math.inf:
        return HORIZON if rate <= 0 else LATE
    room = (1.0 if abs(rate - round(rate)) < 1e-9 else 1.0 - rate % 1.0) / rate
    return min(HORIZON, max(LATE, min(room, max(room / 2, DELAY))))


@dataclass(frozen=True)
class Reservation:
    """Start times reserved of a rate (store times); with none, ``retry_at`` is when the
    run asked for fits."""

    starts: tuple[float, ...]
    retry_at: float
    tat: float = -math.inf
    """The record's next start time after this (what a later ask must not find it behind)."""
    unknown: bool = False
    """The record is missing, and whether the store lost it needs ``kept``: ask again."""

    @property
    def count(self) -> int:
        return len(self.starts)

    def times(self) -> list[float]:
        return list(self.starts)


def reserve(
    record: Record | None,
    now: float,
    *,
    limit: Limit,
    costs: Sequence[float],
    known: float = -math.inf,
    kept: float | None = -math.inf,
) -> Outcome[Record, Reservation]:
    """Reserve a start time of ``limit``'s rate for each task of ``costs`` (the units of the
    rate each spends, in turn) at store time ``now``, all or none (a rising rate's along its
    curve).

    A task starts once its units have accrued (it pays first), up to a horizon's worth of the
    rate (a dearer task pays the rest after it started): one of cost 1 at the record's next
    start time, one of cost ``c`` ``min(c, rate * HORIZON) - 1`` units later, and the record
    goes on past every unit spent, holding back what follows. The times are granted when the
    last lies within :data:`HORIZON` of ``now`` (a lone task always fits by then: none is
    too dear to start); otherwise nothing is, and the reservation says when they would fit.
    A record the store lost (it is missing, or behind what this worker ``known`` of it)
    restarts a start past every start time booked before the loss (:func:`lost_by`), written
    even when the run does not fit yet.

    Parameters:
        known: The record's next start time as this worker last saw it.
        kept: Store time since which the store kept its records (:func:`kept_since`);
            ``None``: not known yet, and asked for if the record is missing.
    """
    stored = next_start(record)
    lost = lost_by(stored, now, known=known, kept=kept)
    if lost is None:
        return Outcome(None, Reservation((), now, tat=stored, unknown=True))
    tat = max(stored, limit.after(lost + HORIZON, 1))
    first = max(tat, now)
    budget = max(1.0, limit.rate_at(first) * HORIZON)  # what a dear task pays before it starts
    credit = credit_of(record, now)
    starts, spent = [], 0.0
    for cost in costs:
        pay = max(0.0, cost - credit)  # what tasks spent less than they said pays first
        credit -= cost - pay
        paid = spent + min(pay, budget) - 1
        starts.append(limit.after(first, paid) if paid > 0 else first)
        spent += pay
    if not (starts and starts[-1] <= now + HORIZON):
        retry_at = max(now, (starts[-1] if starts else first) - HORIZON)
        restored = {"tat": tat} if tat > max(stored, now) else None
        return Outcome(restored, Reservation((), retry_at, tat=tat))
    following: Record = {"tat": limit.after(first, spent), **({"credit": credit} if credit else {})}
    return Outcome(following, Reservation(tuple(starts), now, tat=following["tat"]))


def charge(
    record: Record | None, now: float, *, limit: Limit, units: float
) -> Outcome[Record, float]:
    """Charge ``units`` more of ``limit``'s rate to its record at store time ``now`` (a
    task spent more than its message said), or credit them (negative: it spent less); the
    units charged or credited.

    A charge moves the next start time on (paid from a credit first); a credit is kept
    beside it (``credit``) for the next tasks booked, never moving it back (a worker would
    take that for a record the store lost). Nothing unspent is banked: a credit is at most
    the units booked ahead of ``now``, and lapses once they all passed. A missing record
    is left missing: its rate starts afresh."""
    stored = next_start(record)
    if record is None or stored == -math.inf or units == 0:
        return Outcome(None, 0.0)
    credit = credit_of(record, now)
    if units > 0:
        owed = max(0.0, units - credit)
        tat = max(stored, now) + owed * limit.interval
        return Outcome(_credited({**record, "tat": tat}, credit - (units - owed)), units)
    ahead = max(0.0, stored - now) * (limit.rate or 0.0)
    kept = min(ahead, credit - units)
    return Outcome(_credited(dict(record), kept), -max(0.0, kept - credit))


def credit_of(record: Record | None, now: float) -> float:
    """The units tasks spent less than they said, not yet paid out to later tasks (none
    once the record's next start time passed: nothing unspent is banked)."""
    if record is None or next_start(record) <= now:
        return 0.0
    return max(0.0, number(record.get("credit", 0.0)))


def _credited(record: Record, credit: float) -> Record:
    record.pop("credit", None)
    return {**record, "credit": credit} if credit > 0 else record


def lost_by(stored: float, now: float, *, known: float, kept: float | None) -> float | None:
    """The latest store time the store may have lost a record found at ``now`` with next
    start time ``stored`` (``-inf``: missing): ``-inf`` if it did not lose it, ``None`` if
    that cannot be told without ``kept``.

    No start time booked before a loss lies over a horizon (and an interval) after it. A
    record found behind a next start time this worker ``known`` ahead of ``now`` was lost
    by ``now``; a missing one by when the store last forgot everything (``kept``). One
    deleted once its start times all passed (:func:`forget_rate`, a tenant gone idle) was
    behind ``now``: it is not taken for lost."""
    if known > now and stored < known:
        return now
    if stored > -math.inf:
        return -math.inf
    return kept


def kept_since(record: Record | None, now: float) -> Outcome[Record, float]:
    """Since when the store has kept the records of rates and ramps (:data:`KEPT_KEY`): if
    it does not say, it may have just forgotten them all, so from ``now`` (written)."""
    if record is not None and "since" in record:
        return Outcome(None, number(record["since"]))
    return Outcome({"since": now}, now)


def run_length(rate: float, costs: Iterable[float]) -> int:
    """How many of the waiting tasks ``costs`` a worker reserves start times for at once:
    half the horizon's worth of units, so that two workers' runs fit the horizon and each
    booking (a store write) serves several starts (at least one task, never more than
    wait)."""
    budget, count, spent = math.ceil(rate * HORIZON / 2), 0, 0.0
    for cost in costs:
        if count and spent + cost > budget:
            break
        count, spent = count + 1, spent + cost
    return count


def next_start(record: Record | None) -> float:
    """The next start time a rate's record holds (``-inf``: none)."""
    if record is None or "tat" not in record:
        return float("-inf")
    return number(record["tat"])


def forget_rate(record: Record | None, now: float) -> Outcome[Record, bool]:
    """Delete a rate's record whose start times all passed (it then limits nothing a
    missing record would not): whether it was."""
    if record is None or next_start(record) > now:
        return Outcome(None, False)
    return Outcome({}, True)
