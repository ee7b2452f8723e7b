"""A limit per label value (``throttle --per tenant``): one partition of the limit per value.

Each value of the label gets its own :class:`~.permits.Permits` the first time a request of
it arrives, with no command: the same rate or concurrency, counted in store records of its
own (:func:`~celery_pause.model.limit.partition_id`). A request without the label is
outside the limit, as it is outside every scope of that label. A partition that held
nothing and had nothing waiting for :data:`IDLE` seconds is forgotten; the store thread then
deletes its records if no other worker uses them, so neither a worker nor the store keeps
every value ever seen.

The gate and the store thread look only at the partitions in use (:meth:`Partitions.active`:
a request waits, or a slot or start time is held), not at every value seen within
:data:`IDLE`: with thousands of one-task tenants a second, a look at every partition at every
start made each start cost as much as all of them.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

from ..model.limit import Limit
from ..model.limit_keys import partition_id
from ..model.scope import Target
from ..model.state import Hold
from .permits import Permits

IDLE = 5.0
"""Seconds a partition stays known on a worker after its last request (more than the
rate's horizon, so its start times have all passed when it is forgotten)."""


class Partitions:
    """One worker's permits of a limit per label value, a partition per value seen."""

    def __init__(self, hold: Hold) -> None:
        assert hold.limit is not None and hold.limit.per is not None
        self.id = hold.id
        self.scope = hold.scope
        self.limit: Limit = hold.limit
        self._label = f"{hold.limit.per}="
        self._members: OrderedDict[str, Permits] = OrderedDict()
        """Every partition known, the one whose request came longest ago first."""
        self._active: dict[str, Permits] = {}
        """The partitions a request waited for since they were last found idle."""
        self._lock = threading.Lock()

    def of(self, target: Target) -> Permits | None:
        """The permits of ``target``'s partition (made on its value's first sight), or
        ``None`` if the limit does not cover it."""
        if not self.scope.covers(target):
            return None
        value = self._value(target)
        if value is None:
            return None
        with self._lock:
            member = self._members.get(value)
            if member is None:
                member = Permits(
                    id=partition_id(self.id, value),
                    scope=self.scope,
                    limit=self.limit,
                    value=value,
                    on_wait=lambda: self._in_use(value),
                )
                self._members[value] = member
            else:
                self._members.move_to_end(value)
            member.touched = time.monotonic()
        return member

    def _in_use(self, value: str) -> None:
        """A request of ``value`` waits: its partition is looked at until found idle."""
        with self._lock:
            member = self._members.get(value)
            if member is not None:
                self._active[value] = member

    def _value(self, target: Target) -> str | None:
        for label in target.label or ():
            if label.startswith(self._label):
                return label[len(self._label) :]
        return None

    def members(self) -> list[Permits]:
        with self._lock:
            return list(self._members.values())

    def active(self) -> list[Permits]:
        """The partitions in use: a request waited for each since it was last found idle,
        and it was not idle now (one found idle is left out until a request waits again)."""
        with self._lock:
            for value in [v for v, m in self._active.items() if m.idle()]:
                del self._active[value]
            return list(self._active.values())

    def prune(self, idle: float = IDLE) -> list[Permits]:
        """Forget the partitions unused for ``idle`` seconds that hold nothing; those
        forgotten. Only the oldest are looked at: one in use counts as used now."""
        now = time.monotonic()
        gone = []
        with self._lock:
            while self._members:
                value, member = next(iter(self._members.items()))
                if member.touched >= now - idle:
                    break
                if value in self._active or not member.idle():
                    member.touched = now
                    self._members.move_to_end(value)
                    continue
                gone.append(self._members.pop(value))
        return gone
