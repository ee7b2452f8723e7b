"""The one owner of what a worker has applied and read of the pause state.

The store thread (:mod:`.sync`) records each read here, the consumer loop
(:mod:`.apply`) what it applied; both under one lock, so a reader never sees half
of an update. Everyone else reads a frozen :class:`~.snapshot.WorkerSnapshot`:
the ``inspect pause_state`` answer, the probes' view and the worker's report all
derive from it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from celery.worker import state as worker_state
from celery.worker.consumer import Consumer

from ..model.scope import NOTHING, Scope
from ..model.state import Hold, PauseState
from .gate import Gate
from .pools import PoolSupport
from .snapshot import UNREAD, Applied, Delivered, WorkerSnapshot


class StoreClock:
    """The store's clock, as this worker estimates it from its last read."""

    def __init__(self) -> None:
        self._offset = time.time() - time.monotonic()
        """Store time minus ``time.monotonic()``, as of the last read (until the first, this
        host's clock)."""

    def now(self) -> float:
        """Store time now."""
        return time.monotonic() + self._offset

    def read_at(self, store_now: float) -> None:
        """A read said the store's time is ``store_now``."""
        self._offset = store_now - time.monotonic()


class WorkerState:
    """What one worker has applied and read, under one lock; its gate's figures on demand."""

    def __init__(
        self,
        *,
        hostname: str,
        pool: PoolSupport,
        gate: Gate,
        clock: StoreClock,
        listening: Callable[[], tuple[str, ...]] = tuple,
        lease: float | None = 0.0,
    ) -> None:
        """Nothing applied or read yet.

        Parameters:
            hostname: The worker's name.
            pool: How the gate holds tasks on the worker's pool.
            gate: The worker's gate (read for the snapshot only).
            clock: The store's clock, set at every read.
            listening: The queues the consumer consumes now (read for the snapshot only).
            lease: ``pause_lease`` in force (said in its reports, for waits to count it).
        """
        self.hostname = hostname
        self.pool = pool
        self.clock = clock
        self._gate = gate
        self._listening = listening
        self.lease = lease
        self._lock = threading.Lock()
        self._applied: Applied | None = None
        self._newest: Delivered | None = None
        self._holds: tuple[Hold, ...] = ()
        self._scheduled: tuple[Hold, ...] = ()
        self._as_of = 0.0
        self._breakers: tuple[str, ...] = ()
        self._consumed: tuple[str, ...] = ()
        self._store_ok = True
        self._last: tuple[PauseState, float] | None = None
        """The last state read, and the store time of that read."""
        self._announced: dict[str, tuple[Scope, float]] = {}
        """Per announced hold id, its scope here and ``time.monotonic()`` it is held until."""

    # -- read by the consumer loop ----------------------------------------------------------
    @property
    def applied(self) -> Applied | None:
        """What the consumer loop applied; ``None`` before the first."""
        return self._applied

    @property
    def holds(self) -> tuple[Hold, ...]:
        """The active holds, as last read."""
        return self._holds

    @property
    def consumed(self) -> tuple[str, ...]:
        """The queues the worker consumes (empty before it started)."""
        return self._consumed

    # -- from the store thread --------------------------------------------------------------
    def starts_with(self, state: PauseState, now: float) -> Applied:
        """The first read, at store time ``now``: what the worker starts under."""
        with self._lock:
            self._read(state, now)
            self._holds = state.active_holds(now)
            self._as_of = now
            return self._applies(state, now)

    def _applies(self, state: PauseState, now: float) -> Applied:
        """What this worker applies of ``state`` at store time ``now`` (under the lock): the
        announcements it does not show yet held too, until they lapse."""
        here = self.hostname
        limits = tuple(hold for hold in state.limits(now) if hold.scope.for_worker(here))
        written = {hold.id for hold in state.holds}
        moment = time.monotonic()
        self._announced = {
            hold: (scope, until)
            for hold, (scope, until) in self._announced.items()
            if hold not in written and moment < until
        }
        announced = NOTHING
        for scope, _ in self._announced.values():
            announced = announced | scope
        return Applied(state.generation, state.paused(now).for_worker(here), limits, announced)

    def announce(self, hold: str, scope: Scope, seconds: float) -> Delivered | None:
        """A pause of ``scope`` is being written as hold ``hold``: hold that scope until a read
        shows the hold or ``seconds`` pass (0: the write failed, stop holding it); what it
        changes, or ``None``."""
        with self._lock:
            if seconds > 0:
                until = time.monotonic() + seconds
                self._announced[hold] = (scope.for_worker(self.hostname), until)
            else:
                self._announced.pop(hold, None)
            if self._last is None or self._heading_to() == UNREAD:
                return None  # nothing read yet, or fenced: every task is held already
            newest = self._applies(*self._last)
            if self._heading_to() == newest:
                return None
            self._newest = Delivered(newest, self._last[1])
            return self._newest

    def deliver(self, state: PauseState, now: float) -> Delivered | None:
        """A read at store time ``now``: what it changes, or ``None`` if it changes nothing
        this worker applies.

        On green pools the change counts as enforced at once: the store greenlet sets
        the gate itself.
        """
        with self._lock:
            newest = self._applies(state, now)
            self._read(state, now)
            if self._heading_to() == newest:
                if self._applied == newest:
                    self._as_of = now
                return None
            self._holds = state.active_holds(now)
            self._newest = Delivered(newest, now)
            if self.pool.greenlets:
                self._as_of = now
            return self._newest

    def fence(self) -> Delivered | None:
        """The lease ran out: every task held from now on, until a read works; ``None`` if
        the worker holds every task for that reason already."""
        with self._lock:
            if self._heading_to() == UNREAD:
                return None
            self._newest = Delivered(UNREAD, self._as_of)
            self._store_ok = False
            return self._newest

    def _heading_to(self) -> Applied | None:
        """The newest state delivered (applied or not), else what was applied."""
        return self._newest.applied if self._newest is not None else self._applied

    def store_failed(self) -> None:
        """A read or a report failed: the worker keeps the last known state."""
        with self._lock:
            self._store_ok = False

    def _read(self, state: PauseState, now: float) -> None:
        """Keep what every read brings: the state, the clock, the scheduled holds."""
        self._last = (state, now)
        self.clock.read_at(now)
        self._scheduled = state.scheduled_holds(now)
        self._store_ok = True

    # -- from the consumer loop -------------------------------------------------------------
    def consumes(self, queues: Iterable[str]) -> None:
        """The worker consumes ``queues`` (at its first start)."""
        with self._lock:
            self._consumed = tuple(queues)

    def unapplied(self) -> Delivered | None:
        """The newest state delivered, if the loop has not applied it yet."""
        with self._lock:
            newest = self._newest
            return newest if newest is not None and newest.applied != self._applied else None

    def restart_point(self) -> Applied:
        """After a reconnect: the newest state read, which the loop may not have applied."""
        with self._lock:
            if self._newest is not None:
                return self._newest.applied
            return self._applied or Applied(-1, self._gate.scope)

    def mark_applied(self, applied: Applied, *, as_of: float | None = None) -> None:
        """The loop applied ``applied``, the pause as read at store time ``as_of``."""
        with self._lock:
            self._applied = applied
            if as_of is not None:
                self._as_of = as_of

    def serve_breakers(self, names: Iterable[str]) -> None:
        """This worker runs the agents of the breakers ``names``."""
        with self._lock:
            self._breakers = tuple(names)

    # -- from any thread --------------------------------------------------------------------
    def snapshot(self, *, tasks: bool = True) -> WorkerSnapshot:
        """What the worker has applied and read, and what its gate holds, now.

        ``tasks``: also list the requests that may be running (only while something is
        paused; ``False`` skips it for readers that never ask).
        """
        with self._lock:
            applied, newest = self._applied, self._newest
            enforced = newest.applied if self.pool.greenlets and newest is not None else applied
            holds, scheduled = self._holds, self._scheduled
            as_of, breakers, consumed = self._as_of, self._breakers, self._consumed
            store_ok = self._store_ok
        paused = any(a is not None and a.scope for a in (applied, enforced))
        return WorkerSnapshot(
            hostname=self.hostname,
            pool=self.pool,
            applied=applied,
            enforced=enforced,
            holds=holds,
            scheduled=scheduled,
            as_of=as_of,
            breakers=breakers,
            consumed=consumed,
            listening=self._listening(),
            store_ok=store_ok,
            gate=self._gate.figures(),
            in_flight=self._gate.in_flight() if tasks and paused else (),
            store_now=self.clock.now(),
            active=len(worker_state.active_requests),
            reserved=len(worker_state.reserved_requests),
            lease=self.lease,
        )


def listening(c: Consumer) -> tuple[str, ...]:
    """The queues ``c`` consumes now (read off the loop: a change meanwhile reads as none)."""
    consumer = c.task_consumer
    try:
        return tuple(q.name for q in consumer.queues) if consumer is not None else ()
    except RuntimeError:  # the loop changed them while this read
        return ()
