"""Fair share: the order in which the values of a label (tenants) take their turns.

A fair limit (``throttle --fair tenant``) parks every task of its scope in a queue of its
label value (:func:`fair_queue`), and one worker at a time feeds them back, a turn each, in
the order :func:`turns` gives: start-time fair queuing over one virtual time per value
(weighted round robin in the limit of small turns). A value's next turn comes ``1 / weight``
of virtual time after its last, so while several values wait each gets turns in proportion
to its weight (default 1); a value that was idle joins at the virtual time of those waiting
(it starts at once, but does not catch up on what it did not use); a value alone takes
every turn (work-conserving).

The turns record (:func:`turns_key`): ``{"tags": {value: virtual time of its next turn},
"clock": virtual time}``; a value idle at the clock's time is dropped from it, so it
holds the values waiting, not every value ever seen.
"""

from __future__ import annotations

import fnmatch
import heapq
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .outcome import Outcome
from .parking import Record, RecordChange, digest_queue

MAX_WEIGHT = 1000.0
"""The largest weight a value takes (the smallest is its inverse)."""
FAIR_REGISTRY = "fair"
"""The store record naming each fair limit's value queues: ``{"holds": {hold: {"values":
{value: queue}, "lifted": t}}}`` (``lifted`` once a worker found the limit lifted)."""
MAX_VALUES = 1000
"""The most values of one fair limit given a queue each; later ones share the queue of
:data:`OTHERS` (the registry is read every second: it stays small)."""
OTHERS = "<others>"
"""The value a task takes when its label is missing or past :data:`MAX_VALUES`."""


@dataclass(frozen=True)
class Weights:
    """The weight of each value: the first pattern that matches it (exact names before
    glob patterns, in the order given), else 1."""

    rules: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        for pattern, weight in self.rules:
            if not (isinstance(pattern, str) and pattern and pattern.isprintable()):
                raise ValueError(f"a weight's value pattern is {pattern!r}"[:80])
            if not (isinstance(weight, float | int) and 1 / MAX_WEIGHT <= weight <= MAX_WEIGHT):
                raise ValueError(f"weight of {pattern!r} is {weight!r}: 0.001 to 1000"[:80])

    def of(self, value: str) -> float:
        for pattern, weight in self.rules:
            if pattern == value:
                return float(weight)
        for pattern, weight in self.rules:
            if fnmatch.fnmatchcase(value, pattern):
                return float(weight)
        return 1.0

    def describe(self) -> str:
        """``acme=3, trial-*=0.5`` (empty if every value weighs 1)."""
        return ", ".join(f"{pattern}={weight:g}" for pattern, weight in self.rules)

    def to_json(self) -> list[list[Any]]:
        return [[pattern, weight] for pattern, weight in self.rules]

    @classmethod
    def from_json(cls, data: Any) -> Weights:
        """Weights as stored; ``ValueError``/``TypeError`` for anything else."""
        if data is None:
            return cls()
        if not isinstance(data, list):
            raise TypeError(f"weights are {data!r}"[:80])
        rules = []
        for item in data:
            if not (isinstance(item, list) and len(item) == 2) or isinstance(item[1], bool):
                raise TypeError(f"a weight is {item!r}"[:80])
            rules.append((item[0], item[1]))
        return cls(tuple(rules))

    @classmethod
    def parse(cls, items: Mapping[str, float] | Iterable[str]) -> Weights:
        """From ``{"acme": 3}`` or ``["acme=3", "trial-*=0.5"]``."""
        if isinstance(items, Mapping):
            pairs = list(items.items())
        else:
            pairs = []
            for item in items:
                pattern, sep, weight = str(item).rpartition("=")
                if not sep:
                    raise ValueError(f"a weight is VALUE=WEIGHT, not {item!r}"[:80])
                try:
                    pairs.append((pattern, float(weight)))
                except ValueError:
                    raise ValueError(f"weight of {pattern!r} is {weight!r}"[:80]) from None
        for _, weight in pairs:
            if isinstance(weight, bool) or not isinstance(weight, int | float):
                raise TypeError(f"a weight is {weight!r}"[:80])
            if not math.isfinite(weight):
                raise ValueError(f"a weight is {weight!r}")
        return cls(tuple((pattern, float(weight)) for pattern, weight in pairs))


EVEN = Weights()
"""Every value weighs 1."""


def fair_value(labels: Iterable[str] | None, label: str) -> str:
    """The value of ``label`` among a task's ``name=value`` labels (:data:`OTHERS` if absent)."""
    prefix = f"{label}="
    return next((v[len(prefix) :] for v in labels or () if v.startswith(prefix)), OTHERS)


def turns_key(hold: str) -> str:
    """The store record of a fair limit's virtual times."""
    return f"fair:{hold}"


def fair_queue(prefix: str, hold: str, value: str) -> str:
    """The queue a fair limit's tasks of label ``value`` wait in for their turn."""
    return digest_queue(f"{prefix}.fair.{hold}", value)


def turns(
    record: Record | None, backlog: Mapping[str, int], weights: Weights, count: int
) -> Outcome[Record, list[str]]:
    """The values whose tasks take the next ``count`` turns, in order, given how many of
    each wait (``backlog``), and the record that follows."""
    tags, clock = _read(record)
    heap = [(max(tags.get(value, clock), clock), value) for value, n in backlog.items() if n > 0]
    if not heap or count <= 0:
        return Outcome(None, [])
    left = dict(backlog)
    heapq.heapify(heap)
    order: list[str] = []
    while heap and len(order) < count:
        tag, value = heapq.heappop(heap)
        order.append(value)
        left[value] -= 1
        tags[value] = tag + 1.0 / weights.of(value)
        if left[value] > 0:
            heapq.heappush(heap, (tags[value], value))
    clock = min((tag for tag, _ in heap), default=max(tags[value] for value in order))
    kept = {value: tag for value, tag in tags.items() if tag > clock}
    return Outcome({"tags": kept, "clock": clock}, order)


def _read(record: Record | None) -> tuple[dict[str, float], float]:
    """The tags and clock of a turns record (what cannot be read is left out)."""
    tags = record.get("tags") if record is not None else None
    kept = {}
    for value, tag in tags.items() if isinstance(tags, dict) else ():
        number = _finite(tag)
        if isinstance(value, str) and number is not None:
            kept[value] = number
    clock = _finite(record.get("clock") if record is not None else None)
    return kept, 0.0 if clock is None else clock


def _finite(value: Any) -> float | None:
    """``value`` as a finite float, if it is a number that is one."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def fair_queues(record: Record | None, hold: str) -> dict[str, str]:
    """Each value's queue of the fair limit ``hold``, as the :data:`FAIR_REGISTRY` names."""
    values = _entry(record, hold).get("values")
    if not isinstance(values, dict):
        return {}
    return {v: q for v, q in values.items() if isinstance(v, str) and isinstance(q, str)}


def fair_holds(record: Record | None) -> list[str]:
    """The fair limits the :data:`FAIR_REGISTRY` names queues of."""
    holds = record.get("holds") if record is not None else None
    return [hold for hold in holds if isinstance(hold, str)] if isinstance(holds, dict) else []


def value_named(hold: str, value: str, queue: str) -> RecordChange[str]:
    """Name ``queue`` as the queue of ``value`` of the fair limit ``hold`` in the
    :data:`FAIR_REGISTRY`; the queue its tasks go to: ``queue``, or, past
    :data:`MAX_VALUES` values, the one of :data:`OTHERS` (``queue`` with that name)."""

    def change(current: Record | None, now: float) -> Outcome[Record, str]:
        values = fair_queues(current, hold)
        name, given = value, queue
        if values.get(name) != given and len(values) >= MAX_VALUES:
            name, given = OTHERS, queue.rpartition(".fair.")[0] + f".fair.{hold}.others"
        if values.get(name) == given:
            return Outcome(None, given)
        entry = {**_entry(current, hold), "values": {**values, name: given}}
        return Outcome({"holds": {**_holds(current), hold: entry}}, given)

    return change


def fair_lifted(hold: str) -> RecordChange[float]:
    """Mark the fair limit ``hold`` lifted (at the store's time, unless marked before);
    when it was."""

    def change(current: Record | None, now: float) -> Outcome[Record, float]:
        entry = _entry(current, hold)
        at = entry.get("lifted")
        if isinstance(at, int | float) and not isinstance(at, bool):
            return Outcome(None, float(at))
        return Outcome({"holds": {**_holds(current), hold: {**entry, "lifted": now}}}, now)

    return change


def fair_forgotten(hold: str) -> RecordChange[bool]:
    """Take the fair limit ``hold`` out of the :data:`FAIR_REGISTRY` (its queues are gone)."""

    def change(current: Record | None, now: float) -> Outcome[Record, bool]:
        holds = _holds(current)
        if hold not in holds:
            return Outcome(None, False)
        return Outcome({"holds": {h: e for h, e in holds.items() if h != hold}}, True)

    return change


def _holds(record: Record | None) -> dict[str, Any]:
    holds = record.get("holds") if record is not None else None
    return dict(holds) if isinstance(holds, dict) else {}


def _entry(record: Record | None, hold: str) -> dict[str, Any]:
    entry = _holds(record).get(hold)
    return dict(entry) if isinstance(entry, dict) else {}
