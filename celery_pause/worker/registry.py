"""Naming parking queues in the store: which queue a parked task goes to, recorded where every
worker (and ``pause status``) finds it."""

from __future__ import annotations

import time

from ..model.fair import FAIR_REGISTRY, OTHERS, fair_queue, fair_value, value_named
from ..model.parking import (
    REGISTRY,
    RecordChange,
    named,
    parking_queue,
    value_parked,
    value_queue,
)
from ..model.scope import Target, label_names
from ..model.state import Hold
from ..stores import Store

REGISTER_EVERY = 30.0
"""Seconds between two writes of a parking queue's record while tasks are parked there."""


class Registry:
    """Names parking queues in the store (again every :data:`REGISTER_EVERY` seconds while
    tasks are parked there: a store that lost a record gets it back)."""

    def __init__(self, store: Store, prefix: str = "") -> None:
        self.store = store
        self.prefix = prefix
        self._named: dict[str, float] = {}
        self._values: dict[str, str] = {}
        self._pause_values: dict[str, dict[str, None]] = {}
        """The label values' queues each pause parked in here (in the order first named)."""

    def queue_for(self, hold: Hold, target: Target) -> str:
        """The queue a task at ``target`` is parked in under ``hold``, named in the store:
        a fair limit's queue of its label value; a pause's queue of its value of the label
        the pause names (its own queue if it names none, or the task has none)."""
        if hold.limit is not None and hold.limit.fair is not None:
            return self.name_value(hold.id, fair_value(target.label, hold.limit.fair))
        queue = parking_queue(self.prefix, hold.id)
        label = min(label_names(hold.scope), default=None)
        value = OTHERS if label is None else fair_value(target.label, label)
        if value == OTHERS:
            self.name(hold.id, queue)
            return queue
        own = value_queue(self.prefix, hold.id, value)
        given = self._named_once(REGISTRY, own, value_parked(hold.id, queue, value, own))
        self._pause_values.setdefault(hold.id, {})[given] = None
        return given

    def values_of(self, hold: str) -> list[str]:
        """The label values' queues the pause ``hold`` parked in here."""
        return list(self._pause_values.get(hold, ()))

    def forget(self, hold: str) -> None:
        """Forget the queues of ``hold`` (deleted)."""
        self._pause_values.pop(hold, None)

    def name(self, hold: str, queue: str) -> None:
        """Record ``queue`` as ``hold``'s parking queue, unless done within the interval."""
        if time.monotonic() - self._named.get(queue, -REGISTER_EVERY) < REGISTER_EVERY:
            return
        self.store.update_record(REGISTRY, named(hold, queue))
        self._named[queue] = time.monotonic()

    def name_value(self, hold: str, value: str) -> str:
        """The queue of ``value`` of the fair limit ``hold``, recorded in the store unless
        done within the interval (past :data:`~..model.fair.MAX_VALUES` values, the queue
        the rest share)."""
        queue = fair_queue(self.prefix, hold, value)
        return self._named_once(FAIR_REGISTRY, queue, value_named(hold, value, queue))

    def _named_once(self, record: str, queue: str, change: RecordChange[str]) -> str:
        """The queue ``change`` of ``record`` gives for ``queue`` (applied unless it was
        within the interval)."""
        if time.monotonic() - self._named.get(queue, -REGISTER_EVERY) < REGISTER_EVERY:
            return self._values.get(queue, queue)
        given = self.store.update_record(record, change).result
        self._named[queue] = time.monotonic()
        self._values[queue] = given
        return given
