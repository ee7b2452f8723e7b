"""Feeding a limit's parked tasks back, a turn each (a thread per worker, one feeder per limit).

The workers park every task a fair limit covers in the queue of its label value
(:meth:`~.parking.Parking.takes_turn`). For each fair limit in force, the worker holding its
lease (``feed:<hold>``) keeps the queue the tasks came from stocked with up to :data:`READY`
of them: it counts that queue, asks the store's turns record which values go next
(:func:`~celery_pause.model.fair.turns`, one atomic update per round) and moves one task
of each, oldest first, back to where it came from, marked as fed for its turn. The workers
then start them as they come, under the limit's rate and concurrency if it has them, so the
order in which tasks start follows the turns, within a prefetch window.

A plain limit (not fair) whose tasks waited past ``pause_max_held`` in a worker has them parked
in one turns queue (:mod:`.holding`); the worker that holds its lease feeds them back the same
way, oldest first, while the workers report fewer than :data:`READY` tasks waiting for limits
between them (they wait in the prefetch window, which they widen so the rest of their queue
flows: the reports keep the feeder from filling every worker again).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from dataclasses import replace
from typing import Any

from celery import Celery
from kombu.connection import Connection
from kombu.messaging import Producer

from ..api.depths import waiting
from ..errors import InvalidInput, StoreError
from ..model.content import text_of
from ..model.fair import FAIR_REGISTRY, fair_queues, turns, turns_key
from ..model.parking import PARKED_HEADER, Marker
from ..model.state import Hold
from ..stores import Store
from .claims import hand_claim
from .figures import GateCounters
from .moving import BatchMove, moves_in_batches
from .parking import copy_connection, parked_queue, publish_copy

logger = logging.getLogger(__name__)

READY = 32
"""Fed tasks kept waiting in the queue they came from (more while the workers take them)."""
LEASE = 10.0
"""Seconds a worker holds the lease of the limit it feeds (renewed every third of that)."""
BUSY = 0.01
"""Seconds between two rounds while tasks were fed."""
IDLE = 0.25
"""Seconds between two rounds while nothing was fed (a new value's first task waits that)."""
COUNT_EVERY = 1.0
"""Seconds between two counts of every value's queue, and reads of which queues there are."""


def send_back(
    store: Store, life: float, producer: Producer, message: Any, marker: Marker, *, turn: bool
) -> None:
    """Publish ``message`` (parked with ``marker``) back where it came from as a new copy,
    then hand it the claim the parked copy holds; ``turn``: marked as fed for its turn. The
    claim is handed only once the copy is safe: a failure before leaves it with the parked
    copy, moved again later (a copy that finds another holding the claim is dropped when it
    comes to start)."""
    fresh = replace(marker, copy=uuid.uuid4().hex, turn=turn, owned=False, sent=False)
    publish_copy(producer, message, fresh, marker.exchange, marker.routing_key)
    if marker.claimed:
        task_id = text_of((message.headers or {}).get("id"))
        if hand_claim(store, task_id, marker.copy, fresh.copy, life) is None:
            logger.info("celery-pause: task %s: a twin moved, to be dropped at its start", task_id)


def parked_marker(app: Celery, message: Any, hold: str) -> Marker:
    """The marker of a parked ``message``; for one without (not ours, or damaged), a marker
    that sends it to the app's default queue: it is not lost."""
    marker = Marker.from_header((message.headers or {}).get(PARKED_HEADER))
    if marker is None:
        default = app.conf.task_default_queue
        marker = Marker(uuid.uuid4().hex, hold, "", default)
        logger.warning("celery-pause: a parked message without its origin: sent to %s", default)
    return marker


class Feeding(threading.Thread):
    """Feeds the tasks of the fair limits in force back, in turns."""

    def __init__(
        self,
        app: Celery,
        store: Store,
        *,
        hostname: str,
        life: float,
        counters: GateCounters,
        holds: Callable[[], Iterable[Hold]],
        named: Callable[[], Collection[str]] = frozenset,
        report_ttl: float = 10.0,
    ) -> None:
        super().__init__(name="celery-pause-feeding", daemon=True)
        self.app = app
        self.store = store
        self.hostname = hostname
        self.life = life
        self.counters = counters
        self._holds = holds
        self._named = named
        """The limits with turns queues: each fair one, and plain ones that parked overflow."""
        self.report_ttl = report_ttl
        self._crowded = False
        """Whether the workers hold :data:`READY` or more tasks waiting for limits between
        them, as they last reported (a plain limit is fed only while they do not)."""
        self._leased: dict[str, float] = {}
        """Each limit this worker feeds, and ``time.monotonic()`` its lease was renewed."""
        self._queues: dict[str, dict[str, str]] = {}
        self._backlog: dict[str, dict[str, int]] = {}
        self._origins: dict[str, set[str]] = {}
        """The queues (routing keys) each limit's tasks came from, as their markers say."""
        self._counted = float("-inf")
        self._conn: Connection | None = None
        self._mover: BatchMove | None = None
        self._wake = threading.Event()
        self._stopped = threading.Event()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()

    def run(self) -> None:
        while not self._stopped.is_set():
            fed = 0
            try:
                fed = self.tick()
            except (StoreError, InvalidInput) as exc:
                logger.warning("celery-pause: cannot feed fair turns yet: %s", exc)
                self._reset()
            except Exception as exc:  # the broker failed: try again at the next round
                logger.warning("celery-pause: cannot feed fair turns yet: %r", exc)
                self._reset()
            self._wake.wait(BUSY if fed else IDLE)
            self._wake.clear()
        self._reset()

    def tick(self) -> int:
        """One round: feed each limit with turns queues (each fair one, and each plain one
        that parked its overflow) this worker holds the lease of; how many fed."""
        named = self._named()
        fed = [
            h for h in self._holds() if h.limit and not h.pauses and (h.limit.fair or h.id in named)
        ]
        for gone in set(self._leased) - {h.id for h in fed}:
            del self._leased[gone]
            self.store.release_lease(f"feed:{gone}", self.hostname)
        fed = [hold for hold in fed if self._lease(hold.id)]
        if not fed:
            return 0
        if time.monotonic() - self._counted >= COUNT_EVERY:
            self._count(fed)
        return sum(self._feed(hold) for hold in fed)

    def _lease(self, hold: str) -> bool:
        """Whether this worker feeds ``hold`` (its lease taken or renewed when due)."""
        renewed = self._leased.get(hold)
        if renewed is not None and time.monotonic() - renewed < LEASE / 3:
            return True
        if not self.store.acquire_lease(f"feed:{hold}", self.hostname, LEASE):
            self._leased.pop(hold, None)
            return False
        self._leased[hold] = time.monotonic()
        return True

    def _count(self, holds: list[Hold]) -> None:
        """Read which value queues there are, and count each."""
        record = self.store.read_record(FAIR_REGISTRY)
        if any(hold.limit and not hold.limit.fair for hold in holds):
            live = self.store.live_reports(self.report_ttl, self.store.now())
            self._crowded = sum(report.waiting for report in live) >= READY
        conn = self._connection()
        for hold in holds:
            queues = fair_queues(record, hold.id)
            self._queues[hold.id] = queues
            self._backlog[hold.id] = {v: waiting(conn, q) or 0 for v, q in queues.items()}
        self._counted = time.monotonic()

    def _feed(self, hold: Hold) -> int:
        """Stock the queues ``hold``'s tasks came from up to :data:`READY`, in turns."""
        backlog = self._backlog.get(hold.id, {})
        if not any(backlog.values()) or (self._crowded and hold.limit and not hold.limit.fair):
            return 0
        conn = self._connection()
        origins = self._origins.setdefault(hold.id, set())
        if moves_in_batches(conn):
            stocked = self._batch(conn).depth(origins)
        else:
            stocked = sum(waiting(conn, queue) or 0 for queue in origins)
        room = READY - stocked
        if room <= 0:
            return 0
        assert hold.limit is not None
        weights = hold.limit.weights
        order = self.store.update_record(
            turns_key(hold.id), lambda current, now: turns(current, backlog, weights, room)
        ).result
        fed = Counter(self._move(conn, hold.id, order, origins))
        for value, wanted in Counter(order).items():
            backlog[value] = backlog[value] - fed[value] if fed[value] == wanted else 0
        self.counters.fed += fed.total()
        return fed.total()

    def _move(self, conn: Connection, hold: str, order: list[str], origins: set[str]) -> list[str]:
        """Move the oldest task of each value in ``order`` back for its turn, in that order;
        the value of each moved (in one batch on Redis, one at a time elsewhere)."""
        queues = self._queues[hold]
        if moves_in_batches(conn):
            by_queue = {queue: value for value, queue in queues.items()}
            mover = self._batch(conn)
            dropped = mover.dropped
            moved = mover.move([queues[v] for v in order], hold=hold, turn=True)
            self.counters.dropped += mover.dropped - dropped
            origins.update(marker.routing_key for _, marker in moved)
            return [by_queue[queue] for queue, _ in moved]
        producer = Producer(conn.default_channel)  # type: ignore[no-untyped-call]
        return [v for v in order if self._feed_one(conn, producer, hold, v, origins)]

    def _feed_one(
        self, conn: Connection, producer: Producer, hold: str, value: str, origins: set[str]
    ) -> bool:
        """Move the oldest task of ``value``'s queue back for its turn; whether there was one."""
        queue = self._queues[hold][value]
        message = parked_queue(queue)(conn.default_channel).get(no_ack=False)  # type: ignore[no-untyped-call]
        if message is None:
            return False
        marker = parked_marker(self.app, message, hold)
        origins.add(marker.routing_key)
        send_back(self.store, self.life, producer, message, marker, turn=True)
        message.ack()
        return True

    def _connection(self) -> Connection:
        if self._conn is None:
            self._conn = copy_connection(self.app)
        return self._conn

    def _batch(self, conn: Connection) -> BatchMove:
        if self._mover is None:
            default = self.app.conf.task_default_queue
            self._mover = BatchMove(conn, self.store, self.life, default)
        return self._mover

    def _reset(self) -> None:
        conn, self._conn, self._mover = self._conn, None, None
        self._counted = float("-inf")
        if conn is not None:
            try:
                conn.release()  # type: ignore[no-untyped-call]
            except Exception as exc:
                logger.debug("celery-pause: closing the feeding connection: %r", exc)
