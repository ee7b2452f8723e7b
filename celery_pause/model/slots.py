"""The concurrency of a limit: the slots taken, each with an expiry, in one store record.

A worker takes a slot before a task starts and gives it back once the task ended (or keeps it
for its next waiting task); it renews the slots it holds with its heartbeat, so a worker that
dies gives them back within ``pause_worker_ttl``. Each change is a pure rule on the record.
"""

from __future__ import annotations

from .jsonfields import number
from .limit import Record
from .outcome import Outcome


def take_slots(
    record: Record | None, now: float, *, limit: int, ids: list[str], ttl: float
) -> Outcome[Record, list[str]]:
    """Take as many of the slots ``ids`` as the concurrency ``limit`` has free at ``now``
    (expired ones are free); the ids taken."""
    slots = live_slots(record, now)
    taken = ids[: max(0, limit - len(slots))]
    if not taken:
        return Outcome(None, [])
    slots.update((slot, now + ttl) for slot in taken)
    return Outcome({**(record or {}), "slots": slots}, taken)


def has_free_slot(record: Record | None, now: float, *, limit: int) -> bool:
    """Whether the concurrency ``limit`` has a slot free at ``now`` (expired ones are)."""
    return len(live_slots(record, now)) < limit


def give_back(record: Record | None, now: float, *, ids: list[str]) -> Outcome[Record, int]:
    """Free the slots ``ids`` (and every expired one); how many of ``ids`` were held."""
    slots = live_slots(record, now)
    held = [slot for slot in ids if slot in slots]
    for slot in held:
        del slots[slot]
    if record is not None and len(slots) == len(record.get("slots", {})):
        return Outcome(None, 0)
    return Outcome(_slots_record(record, slots), len(held))


def renew_slots(
    record: Record | None, now: float, *, ids: list[str], ttl: float
) -> Outcome[Record, list[str]]:
    """Extend the slots ``ids`` to ``now + ttl``; those that had expired are lost (the ids
    still held are returned)."""
    slots = live_slots(record, now)
    held = [slot for slot in ids if slot in slots]
    slots.update((slot, now + ttl) for slot in held)
    return Outcome(_slots_record(record, slots), held)


def live_slots(record: Record | None, now: float) -> dict[str, float]:
    """The slots taken and not expired at ``now``: id to expiry."""
    if record is None:
        return {}
    slots = record.get("slots", {})
    if not isinstance(slots, dict):
        raise TypeError(f"slots is {type(slots).__name__}")
    return {str(slot): expiry for slot, expiry in slots.items() if number(expiry) > now}


def _slots_record(record: Record | None, slots: dict[str, float]) -> Record:
    """The slots record holding ``slots`` (empty, so deleted, when there are none)."""
    if not slots:
        return {}
    return {**({} if record is None else record), "slots": slots}
