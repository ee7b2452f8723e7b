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

import re
from dataclasses import dataclass
from typing import Any

PARKED_HEADER = "celery_pause_parked"
"""The header a parked or brought-back copy carries (taken off before the task starts)."""
REGISTRY = "parked:"
"""Prefix of the store records naming each hold's parking queue."""
SOURCE_COPY = "source"
"""The copy a message never moved claims as."""
CLAIM_LIFE = 6 * 3600.0
"""Seconds a claim is kept at least: past the broker's redelivery of a copy left unacknowledged
by a crash (Redis restores one after its visibility timeout, an hour by default)."""
GRACE = 120.0
"""Seconds a lifted hold's empty parking queue is kept: a worker that read the hold before
it was lifted may still park a message there (its lease is shorter)."""
MIN_MAX_HELD = 64
"""The least ``pause_max_held`` the automatic default gives."""

_UNSAFE = re.compile(r"[^A-Za-z0-9_.:-]")


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

    def to_header(self) -> dict[str, str]:
        return {
            "copy": self.copy,
            "hold": self.hold,
            "exchange": self.exchange,
            "routing_key": self.routing_key,
        }

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
        return cls(copy, hold, exchange, key)


def parking_queue(prefix: str, hold: str) -> str:
    """The queue the messages parked under ``hold`` wait in (named after the store's key
    prefix, so two apps on one broker never share one)."""
    return _UNSAFE.sub("_", f"{prefix}.parked.{hold}")


def registry_key(hold: str) -> str:
    """The store record that names ``hold``'s parking queue."""
    return f"{REGISTRY}{hold}"


def claim_key(task_id: str) -> str:
    """The store lease a copy of ``task_id`` takes before it starts."""
    return f"claim:{task_id}"


def max_held_for(prefetch: int) -> int:
    """The default ``pause_max_held`` of a worker whose prefetch window is ``prefetch``
    (``worker_prefetch_multiplier`` times concurrency; 0 when unlimited): four windows, at
    least :data:`MIN_MAX_HELD`. A short pause resumes from memory with four rounds of work for
    the pool; a held message costs a few kilobytes, so the bound costs no memory to speak of."""
    return max(MIN_MAX_HELD, 4 * prefetch)


def claim_life(visibility: float | None) -> float:
    """Seconds a claim is kept: :data:`CLAIM_LIFE`, or twice a longer visibility timeout."""
    return max(CLAIM_LIFE, 2 * (visibility or 0.0))
