"""Parking: where a worker puts held messages past ``pause_max_held``, and how a copy is known.

A parked message is the task message republished unchanged to a queue of its hold on
the same broker, with one header more (:data:`PARKED_HEADER`, a :class:`Marker`): the
copy's id and where the message came from. When the hold is lifted a worker brings the
parked messages back, in order, to where they came from, each as a new copy.

Moving a message is publish, then acknowledge: a crash between the two leaves two copies.
Every copy that may have a twin (a parked or brought-back one, or one the broker
redelivers) claims its task id in the store before it starts, as its copy: a second copy
of the id finds the claim taken and is dropped, while the same copy delivered again (a
``task_acks_late`` task whose worker died) still runs, as Celery would run it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from .outcome import Outcome

R = TypeVar("R")
Record = dict[str, Any]
RecordChange = Callable[[Record | None, float], Outcome[Record, R]]
"""A change of a store record, as ``Store.update_record`` applies it."""

PARKED_HEADER = "celery_pause_parked"
"""The header a parked or brought-back copy carries (taken off before the task starts)."""
REGISTRY = "parking"
"""The store record naming each hold's parking queues: ``{"queues": {hold: {"queue": name,
"since": t, "values": {value: name}, "lifted": t}}, "parked_at": t}`` (``values``: those of a
pause by label, :func:`value_parked`; ``lifted`` once a worker found the hold lifted;
``parked_at``: the last time a queue was named, kept when the queues are gone)."""
MAX_PARKED_VALUES = 1000
"""The most label values of one pause given a parking queue each; later ones share the
pause's own queue (the record is read every second: it stays small)."""
CLAIMS = "claim:"
"""Prefix of the store leases the copies claim (a lease each: ``lease:claim:<task id>``)."""
SOURCE_COPY = "source"
"""The copy a message never moved claims as."""
CLAIM_LIFE = 6 * 3600.0
"""Seconds a claim is kept at least: past the broker's redelivery of a copy left unacknowledged
by a crash (Redis restores one after its visibility timeout, an hour by default)."""
GRACE = 120.0
"""Seconds a lifted hold's empty parking queue is kept: a worker that read the hold before
it was lifted may still park a message there (its lease is shorter)."""
NAMED_AGAIN = 60.0
"""Seconds after which naming a queue already named writes ``parked_at`` again."""
MIN_MAX_HELD = 64
"""The least ``pause_max_held`` the automatic default gives."""

_UNSAFE = re.compile(r"[^A-Za-z0-9_.:-]")


FLAGS = ("claimed", "turn", "owned", "sent")
"""The marker's flags: in its header only when true."""


@dataclass(frozen=True)
class Marker:
    """What the :data:`PARKED_HEADER` of a copy says."""

    copy: str
    """This copy's id: a new one each time the message is published again."""
    hold: str
    """The hold it was parked under."""
    exchange: str
    routing_key: str
    """Where the message was published before it was parked."""
    claimed: bool = False
    """Whether this copy holds its task id's claim, handed on by the copy it replaced (that
    one claimed, then was held again): the copy that replaces it takes the claim over."""
    turn: bool = False
    """Whether this copy was fed back by its fair limit (``hold``) for its turn: it starts
    without being parked for one again (:mod:`.fair`)."""
    owned: bool = False
    """Whether this copy's claim was taken for it before it was published (a batch move on
    Redis): it starts without asking the store."""
    sent: bool = False
    """Whether the producer sent it parked (no worker ever fetched it: it has no twin)."""

    def to_header(self) -> dict[str, Any]:
        header: dict[str, Any] = {
            "copy": self.copy,
            "hold": self.hold,
            "exchange": self.exchange,
            "routing_key": self.routing_key,
        }
        flags = {name: True for name in FLAGS if getattr(self, name)}
        return {**header, **flags}

    @classmethod
    def from_header(cls, value: Any) -> Marker | None:
        """The marker in ``value``, a header as received; ``None`` if it is not one (never
        raises: the header is message content)."""
        if not isinstance(value, dict):
            return None
        copy, hold = value.get("copy"), value.get("hold")
        exchange, key = value.get("exchange"), value.get("routing_key")
        if not (isinstance(copy, str) and copy and isinstance(hold, str)):
            return None
        if not (isinstance(exchange, str) and isinstance(key, str)):
            return None
        claimed, turn, owned, sent = (value.get(flag) is True for flag in FLAGS)
        return cls(copy, hold, exchange, key, claimed, turn, owned, sent)


def parking_queue(prefix: str, hold: str) -> str:
    """The queue the messages parked under ``hold`` wait in (named after the store's key
    prefix, so two apps on one broker never share one)."""
    return _UNSAFE.sub("_", f"{prefix}.parked.{hold}")


def value_queue(prefix: str, hold: str, value: str) -> str:
    """The queue the messages of label ``value`` parked under the pause ``hold`` wait in."""
    return digest_queue(f"{prefix}.parked.{hold}", value)


def digest_queue(base: str, value: str) -> str:
    """The queue of ``value`` named after ``base``: readable where the value is, and a digest
    so two values never share one."""
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return _UNSAFE.sub("_", f"{base}.{value[:40]}.{digest}")


def claim_key(task_id: str) -> str:
    """The store lease a copy of ``task_id`` takes before it starts."""
    return f"{CLAIMS}{task_id}"


def parking_queues(record: Record | None) -> dict[str, str]:
    """Each hold's parking queue that the :data:`REGISTRY` record names (an entry it cannot
    read is left out)."""
    queues = record.get("queues") if record is not None else None
    if not isinstance(queues, dict):
        return {}
    return {
        hold: entry["queue"]
        for hold, entry in queues.items()
        if isinstance(entry, dict) and isinstance(entry.get("queue"), str)
    }


def parked_values(record: Record | None, hold: str) -> dict[str, str]:
    """Each label value's parking queue of the pause ``hold`` that the :data:`REGISTRY`
    record names (an entry it cannot read is left out)."""
    entry = _queues(record).get(hold)
    values = entry.get("values") if isinstance(entry, dict) else None
    if not isinstance(values, dict):
        return {}
    return {v: q for v, q in values.items() if isinstance(v, str) and isinstance(q, str)}


def named(hold: str, queue: str) -> RecordChange[bool]:
    """Name ``queue`` as ``hold``'s parking queue in the :data:`REGISTRY` record, and note
    when (no write if it is named, not marked lifted, and noted within :data:`NAMED_AGAIN`)."""

    def change(current: Record | None, now: float) -> Outcome[Record, bool]:
        queues = _queues(current)
        fresh = _fresh(queues.get(hold), queue)
        if fresh is not None and now - (parked_at(current) or float("-inf")) < NAMED_AGAIN:
            return Outcome(None, False)
        kept = fresh if fresh is not None else _renamed(current, hold, queue, now)
        return Outcome({"queues": {**queues, hold: kept}, "parked_at": now}, True)

    return change


def value_parked(hold: str, queue: str, value: str, own: str) -> RecordChange[str]:
    """Name ``own`` as the parking queue of label ``value`` of the pause ``hold`` (whose own
    queue is ``queue``); the queue its messages go to: ``own``, or ``queue`` past
    :data:`MAX_PARKED_VALUES` values. No write if named and noted within :data:`NAMED_AGAIN`."""

    def change(current: Record | None, now: float) -> Outcome[Record, str]:
        queues, values = _queues(current), parked_values(current, hold)
        fresh = _fresh(queues.get(hold), queue)
        given = own if values.get(value) == own or len(values) < MAX_PARKED_VALUES else queue
        known = given == queue or values.get(value) == own
        recent = now - (parked_at(current) or float("-inf")) < NAMED_AGAIN
        if fresh is not None and known and recent:
            return Outcome(None, given)
        kept = fresh if fresh is not None else _renamed(current, hold, queue, now)
        if given == own:
            kept["values"] = {**values, value: own}
        return Outcome({"queues": {**queues, hold: kept}, "parked_at": now}, given)

    return change


def lifted(hold: str, queue: str) -> RecordChange[float]:
    """Mark ``hold`` lifted (at the store's time, unless marked before); when it was."""

    def change(current: Record | None, now: float) -> Outcome[Record, float]:
        queues = _queues(current)
        entry = queues.get(hold)
        at = entry.get("lifted") if isinstance(entry, dict) else None
        if isinstance(at, int | float) and not isinstance(at, bool):
            return Outcome(None, float(at))
        marked = {"queue": queue, "since": now, **(entry or {}), "lifted": now}
        return Outcome({**(current or {}), "queues": {**queues, hold: marked}}, now)

    return change


def forgotten(hold: str) -> RecordChange[bool]:
    """Take ``hold`` out of the :data:`REGISTRY` record (its queue was deleted)."""

    def change(current: Record | None, now: float) -> Outcome[Record, bool]:
        queues = _queues(current)
        if hold not in queues:
            return Outcome(None, False)
        rest = {key: entry for key, entry in queues.items() if key != hold}
        return Outcome({**(current or {}), "queues": rest}, True)

    return change


def parked_at(record: Record | None) -> float | None:
    """When a parking queue was last named (store time), if ever."""
    at = record.get("parked_at") if record is not None else None
    return float(at) if isinstance(at, int | float) and not isinstance(at, bool) else None


def _fresh(entry: Any, queue: str) -> dict[str, Any] | None:
    """A hold's ``entry`` (a copy) if it names ``queue`` and is not marked lifted."""
    if isinstance(entry, dict) and entry.get("queue") == queue and "lifted" not in entry:
        return dict(entry)
    return None


def _renamed(record: Record | None, hold: str, queue: str, now: float) -> dict[str, Any]:
    """A new entry of ``hold`` naming ``queue`` (its label values' queues kept: they may
    still hold messages)."""
    values = parked_values(record, hold)
    return {"queue": queue, "since": now, **({"values": values} if values else {})}


def _queues(record: Record | None) -> dict[str, Any]:
    queues = record.get("queues") if record is not None else None
    return dict(queues) if isinstance(queues, dict) else {}


def max_held_for(prefetch: int) -> int:
    """The default ``pause_max_held`` of a worker whose prefetch window is ``prefetch``
    (``worker_prefetch_multiplier`` times concurrency; 0 when unlimited): four windows, at
    least :data:`MIN_MAX_HELD`. A short pause resumes from memory with four rounds of work for
    the pool; a held message costs a few kilobytes, so the bound costs no memory to speak of."""
    return max(MIN_MAX_HELD, 4 * prefetch)


def claim_life(visibility: float | None) -> float:
    """Seconds a claim is kept: :data:`CLAIM_LIFE`, or twice a longer visibility timeout."""
    return max(CLAIM_LIFE, 2 * (visibility or 0.0))
