"""Bringing parked messages back once their hold is lifted (a thread per worker).

Every few seconds, and when woken by a change of the state, the thread looks at the store's
parking record (:data:`~celery_pause.model.parking.REGISTRY`), as the store thread last read
it with the state (:meth:`Unparking.noted`; read here if that read is older than two poll
intervals, or began before this thread last changed the record); for each hold there that is no
longer in force it takes the hold's lease (one worker moves a queue, so the order holds)
and moves the queue's messages, oldest first, back to the exchange and routing key each
came from: publish (confirmed on AMQP), then acknowledge the parked copy. A queue found
empty :data:`~celery_pause.model.parking.GRACE` seconds after its hold was lifted is
deleted and forgotten.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from celery import Celery
from kombu.connection import Connection
from kombu.messaging import Producer

from ..api.depths import waiting
from ..errors import InvalidInput, StoreError
from ..model.fair import FAIR_REGISTRY, fair_forgotten, fair_holds, fair_lifted, fair_queues
from ..model.outcome import Outcome
from ..model.parking import (
    CLAIMS,
    GRACE,
    REGISTRY,
    forgotten,
    lifted,
    max_held_for,
    parked_at,
    parked_values,
    parking_queue,
    parking_queues,
)
from ..model.state import Hold
from ..settings import PauseConfig
from ..stores import Store
from ..stores.primitives import Record, lease_holder, lease_key
from .feeding import Feeding, parked_marker, send_back
from .figures import GateCounters
from .moving import BatchMove, moves_in_batches
from .parking import Parking, copy_connection, parked_queue

logger = logging.getLogger(__name__)

LEASE = 30.0
"""Seconds a worker holds the lease of a queue it moves (renewed every :data:`BATCH`)."""
BATCH = 500
"""Messages moved between two renewals of the lease."""
STEP = 100
"""Messages moved back in one round trip on Redis."""
TURNS_EVERY = 30.0
"""Seconds between two reads of the record of turns queues while only plain limits are in
force."""
SWEEP_EVERY = 3600.0
"""Seconds between two sweeps of the expired claims."""
SWEEP = "sweep-claims"


class Unparking(threading.Thread):
    """Brings the parked messages of lifted holds back."""

    def __init__(
        self,
        app: Celery,
        store: Store,
        *,
        hostname: str,
        interval: float,
        parking: Parking,
        prefix: str,
        holds: Callable[[], Iterable[Hold]],
        report_ttl: float = 10.0,
    ) -> None:
        super().__init__(name="celery-pause-unparking", daemon=True)
        self.app = app
        self.store = store
        self.hostname = hostname
        self.interval = interval
        self.parking = parking
        self.counters = parking.counters
        self.prefix = prefix
        self._holds = holds
        self._seen: set[str] = set()
        self._fair_named = True
        """Whether the store's last record of fair queues named any (read again only then, or
        while a fair limit is in force: a cluster without one pays no read for it)."""
        self._turns: frozenset[str] = frozenset()
        """The limits the store's record names turns queues of (as last read)."""
        self._turns_due = 0.0
        self._next_sweep = time.monotonic() + SWEEP_EVERY
        self._registry: tuple[float, Record | None] | None = None
        """The parking record as the store thread read it with the state, and when that read
        began (``time.monotonic()``)."""
        self._changed = float("-inf")
        """``time.monotonic()`` this thread last changed the parking record."""
        self._known: dict[str, dict[str, None]] = {}
        """The label values' queues of each pause, as the records read here named them."""
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self.feeding = Feeding(
            app,
            store,
            hostname=hostname,
            life=parking.life,
            counters=self.counters,
            holds=holds,
            named=lambda: self._turns | parking.turns_named,
            report_ttl=report_ttl,
        )
        """The thread that feeds limits' parked tasks back in turns (started with this)."""

    def noted(self, record: Record | StoreError | None, started: float) -> None:
        """The store thread read the parking record (with the state) in a read that began at
        ``started`` (``time.monotonic()``): use it until the next (one it could not read is
        read here again at the next look, which says why)."""
        if isinstance(record, StoreError):
            self._registry = None
            return
        self._registry = (started, record)
        self._note(record)

    def wake(self) -> None:
        """Look again now (the state changed)."""
        self._wake.set()
        self.feeding.wake()

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()
        self.feeding.stop()

    def run(self) -> None:
        while not self._stopped.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            if self._stopped.is_set():
                return
            try:
                self.tick()
                if time.monotonic() >= self._next_sweep:
                    self._next_sweep = time.monotonic() + SWEEP_EVERY
                    self.sweep()
            except (StoreError, InvalidInput) as exc:
                logger.warning("celery-pause: cannot bring parked tasks back yet: %s", exc)
            except Exception as exc:  # the broker failed: try again at the next tick
                logger.warning("celery-pause: cannot bring parked tasks back yet: %r", exc)

    def tick(self) -> int:
        """Bring back the queues of every lifted hold this worker can take; how many moved.

        The lifted holds are those the store's records name, and those this worker saw in
        force (which finds the queues of a store that lost its records).
        """
        record = self._registry_now()
        named = parking_queues(record)
        for hold in named:  # remembered: a store that loses its record forgets them
            self._known.setdefault(hold, {}).update(
                dict.fromkeys(parked_values(record, hold).values())
            )
        holds = tuple(self._holds())
        fair = self.store.read_record(FAIR_REGISTRY) if self._reads_turns(holds) else None
        self._turns = frozenset(fair_holds(fair))  # not read: the last read named none
        self._fair_named = bool(self._turns)
        self._seen.update(hold.id for hold in holds if hold.pauses)
        if not (named or self._seen or fair_holds(fair)):
            return 0
        snapshot = self.store.read()
        active = snapshot.state.active_holds(snapshot.now)
        moved = self._bring_back_fair(fair, {hold.id for hold in active}, snapshot.now)
        live = {hold.id for hold in active if hold.pauses}
        lifted = {hold: parking_queue(self.prefix, hold) for hold in self._seen - live}
        lifted.update({hold: queue for hold, queue in named.items() if hold not in live})
        self._seen &= live
        for hold, queue in lifted.items():
            queues = self.queues_of(record, hold, queue)
            if hold not in named and self._empty(*queues):
                continue  # a pause seen here that parked nothing
            lease = f"unpark:{hold}"
            if not self.store.acquire_lease(lease, self.hostname, LEASE):
                continue
            try:
                moved += self._bring_back(queues, lease)
                self._retire(hold, queues, snapshot.now)
            finally:
                self.store.release_lease(lease, self.hostname)
        kept = set(named) | live
        self._known = {hold: queues for hold, queues in self._known.items() if hold in kept}
        return moved

    def queues_of(self, record: Record | None, hold: str, queue: str) -> list[str]:
        """The parking queues of ``hold``: its own (``queue``), then those of its label values
        that the store's ``record`` names, that the records read before named, or that this
        worker named (a store may have lost its record)."""
        values = [
            *parked_values(record, hold).values(),
            *self._known.get(hold, ()),
            *self.parking.registry.values_of(hold),
        ]
        return list(dict.fromkeys([queue, *values]))

    def _registry_now(self) -> Record | None:
        """The parking record as the store thread last read it, or read now if that read is
        older than two poll intervals (the store thread failed or is late) or began before
        this thread last changed the record (it would name a queue deleted since)."""
        read, now = self._registry, time.monotonic()
        if read is not None and read[0] > self._changed and now - read[0] < 2 * self.interval:
            return read[1]
        record = self.store.read_record(REGISTRY)
        self.noted(record, now)
        return record

    def _reads_turns(self, holds: tuple[Hold, ...]) -> bool:
        """Whether to read the record of turns queues now: while a fair limit is in force or
        the record named any; every :data:`TURNS_EVERY` seconds while any limit is (another
        worker may have parked its overflow)."""
        if any(hold.limit is not None and hold.limit.fair for hold in holds) or self._fair_named:
            return True
        if not any(hold.limit is not None for hold in holds):
            return False
        due, now = self._turns_due, time.monotonic()
        if now >= due:
            self._turns_due = now + TURNS_EVERY
        return now >= due

    def _bring_back_fair(self, record: Record | None, live: set[str], now: float) -> int:
        """Bring back the value queues of every fair limit lifted; delete them once empty
        :data:`GRACE` seconds after."""
        moved = 0
        for hold in fair_holds(record):
            if hold in live or not self.store.acquire_lease(f"unpark:{hold}", self.hostname, LEASE):
                continue
            queues = list(fair_queues(record, hold).values())
            try:
                moved += self._bring_back(queues, f"unpark:{hold}")
                since = self.store.update_record(FAIR_REGISTRY, fair_lifted(hold)).result
                if now - since >= GRACE and self._empty(*queues):
                    with copy_connection(self.app) as conn:
                        for queue in queues:
                            parked_queue(queue)(conn.channel()).delete(if_empty=True)  # type: ignore[no-untyped-call]
                    self.store.update_record(FAIR_REGISTRY, fair_forgotten(hold))
                    logger.info("celery-pause: the turns queues of limit %s deleted", hold)
            finally:
                self.store.release_lease(f"unpark:{hold}", self.hostname)
        return moved

    def start(self) -> None:
        """Have the store's record read once (before the worker consumes), then follow it."""
        try:
            self._registry_now()
        except (StoreError, InvalidInput) as exc:  # unknown: redelivered messages still claim
            logger.warning("celery-pause: cannot read the parking queues yet: %s", exc)
        super().start()
        self.feeding.start()

    def _note(self, record: Record | None) -> None:
        """Tell the parking whether anything was parked within a claim's life."""
        at = parked_at(record)
        self.parking.recent = at is not None and time.time() - at < self.parking.life

    def sweep(self) -> int:
        """Delete the claims that expired (one worker at a time); how many."""
        if not self.store.acquire_lease(SWEEP, self.hostname, LEASE):
            return 0
        swept = 0
        for key in self.store.record_keys(lease_key(CLAIMS)):
            swept += self.store.update_record(key, _expired).result
        return swept

    def _empty(self, *queues: str) -> bool:
        """Whether every one of ``queues`` is empty (one connection for all)."""
        with copy_connection(self.app) as conn:
            return all(waiting(conn, queue) == 0 for queue in queues)

    def _bring_back(self, queues: Iterable[str], lease: str) -> int:
        """Bring ``queues`` back one after the other (one connection for all); how many."""
        moved = 0
        with copy_connection(self.app) as conn:
            for queue in queues:
                if waiting(conn, queue) == 0:
                    continue
                if moves_in_batches(conn):
                    done = self._bring_back_batches(conn, queue, lease)
                else:
                    done = self._bring_back_each(conn, queue, lease)
                if done:
                    logger.info("celery-pause: brought %d parked task(s) back from %s", done, queue)
                moved += done
        return moved

    def _bring_back_batches(self, conn: Connection, queue: str, lease: str) -> int:
        """Move ``queue`` back :data:`STEP` messages a round trip (Redis)."""
        mover = BatchMove(conn, self.store, self.parking.life, self.app.conf.task_default_queue)
        moved = 0
        while not self._stopped.is_set():
            done = len(mover.move([queue] * STEP, hold="", turn=False))
            dropped, mover.dropped = mover.dropped, 0
            self.counters.dropped += dropped
            if not (done or dropped):
                break
            moved += done
            self.counters.brought_back += done
            if moved % BATCH < STEP and not self.store.acquire_lease(lease, self.hostname, LEASE):
                break  # another worker took the queue over
        return moved

    def _bring_back_each(self, conn: Connection, queue: str, lease: str) -> int:
        """Move ``queue`` back a message at a time (a fetch, a publish, an acknowledgement)."""
        moved = 0
        source = parked_queue(queue)(conn.channel())  # type: ignore[no-untyped-call]
        producer = Producer(conn.channel())  # type: ignore[no-untyped-call]
        while not self._stopped.is_set():
            message = source.get(no_ack=False)  # type: ignore[no-untyped-call]
            if message is None:
                break
            self._send_back(producer, message)
            message.ack()
            moved += 1
            self.counters.brought_back += 1
            if moved % BATCH == 0 and not self.store.acquire_lease(lease, self.hostname, LEASE):
                break  # another worker took the queue over
        return moved

    def _send_back(self, producer: Producer, message: Any) -> None:
        marker = parked_marker(self.app, message, "")
        send_back(self.store, self.parking.life, producer, message, marker, turn=False)

    def _retire(self, hold: str, queues: list[str], now: float) -> None:
        """Delete ``queues`` (the hold's own first) and their record once all are empty and
        their hold was lifted long ago."""
        since = self.store.update_record(REGISTRY, lifted(hold, queues[0])).result
        self._changed = time.monotonic()
        if now - since < GRACE:
            return
        with copy_connection(self.app) as conn:
            if any(waiting(conn, queue) != 0 for queue in queues):
                return
            for queue in queues:
                parked_queue(queue)(conn.channel()).delete(if_empty=True)  # type: ignore[no-untyped-call]
        self.store.update_record(REGISTRY, forgotten(hold))
        self.parking.registry.forget(hold)
        self._changed = time.monotonic()
        logger.info("celery-pause: parking queue(s) %s deleted: hold lifted", ", ".join(queues))


def _expired(current: Record | None, now: float) -> Outcome[Record, int]:
    """Delete a claim that expired (1), keep one in force (0)."""
    if current is None or lease_holder(current, now) is not None:
        return Outcome(None, 0)
    return Outcome({}, 1)


def parking_for(
    c: Any,
    store: Store,
    config: PauseConfig,
    counters: GateCounters,
    holds: Callable[[], Iterable[Hold]],
) -> tuple[Parking, Unparking]:
    """The parking of the worker of consumer ``c``, and its thread that brings tasks back
    (both count into ``counters``, the gate's; ``holds``: the holds in force, as read)."""
    parking = Parking(
        c.app,
        store,
        prefix=config.key_prefix,
        life=config.claim_life,
        max_held=config.max_held or max_held_for(c.initial_prefetch_count or 0),
    )
    parking.counters = counters
    unparking = Unparking(
        c.app,
        store,
        hostname=c.hostname,
        interval=config.poll_interval,
        parking=parking,
        prefix=config.key_prefix,
        holds=holds,
        report_ttl=config.worker_ttl,
    )
    return parking, unparking
