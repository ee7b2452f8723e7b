"""The worker's link to the store: a background thread that reads and reports.

Store I/O never runs on the consumer's event loop. The thread reads the state (with the
parking record, for the thread that brings parked tasks back)
every ``pause_poll_interval`` seconds (or at once when told by the
``pause_refresh`` broadcast or by the store's notifications, :meth:`StoreSync.listen`)
and again exactly when a hold starts or ends (a
scheduled pause, a maintenance window's occurrence, an auto-resume), adds the
app's maintenance windows to what it read, hands changes to the loop, and
publishes the worker's report: on change, right after a hold started or ended,
while tasks in a paused scope are still running, and as a heartbeat.

Each read renews the worker's lease (``pause_lease``): once that long has passed
since the start of the last read that worked, the worker fences itself and holds
every task until a read works again, so a worker cut off from the store, frozen or
stuck on a half-open connection cannot go on starting what a pause it never read
covers.

A read that shows the store forgot the state last read (:mod:`.recall`) is not
applied: the worker writes that state back and applies it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

from ..errors import StoreError
from ..logs import ThrottledLog
from ..model.parking import REGISTRY
from ..model.windows import with_windows
from ..settings import PauseConfig
from ..stores import Snapshot, Store
from ..stores.primitives import Record
from .recall import Recall
from .snapshot import WorkerSnapshot

logger = logging.getLogger(__name__)

DRAIN_CHECK = 0.02
"""Seconds between local checks of running tasks while a pause drains."""
COUNTS_EVERY = 2.0
"""Fewest seconds between two reports that only change how many tasks are held or wait."""


class Followed(Protocol):
    """The worker's consumer loop, as its store thread hands it work."""

    def deliver(self, snapshot: Snapshot) -> None:
        """Apply the state read (with the windows in force)."""

    def fence(self) -> None:
        """The lease ran out: hold every task until a read works again."""

    def return_expired(self) -> None:
        """Have the requests held longer than ``pause_max_hold`` returned to the broker."""


class Pictured(Protocol):
    """The worker's state, as its store thread reads and marks it."""

    def snapshot(self) -> WorkerSnapshot:
        """What the worker has applied and read, and what its gate holds, now."""

    def store_failed(self) -> None:
        """A read or a report failed: the worker keeps the last known state."""


class StoreSync(threading.Thread):
    """Keeps one worker in step with the store."""

    def __init__(
        self,
        *,
        store: Store,
        config: PauseConfig,
        worker: Followed,
        state: Pictured,
        renew: Callable[[float], None],
        pace: Callable[[], float | None],
        parking: Callable[[Record | StoreError | None, float], None] = lambda record, at: None,
    ) -> None:
        """A store thread for ``worker``, not started yet.

        Parameters:
            store: The pause store.
            config: The app's pause settings.
            worker: The worker's consumer loop, which applies what is read.
            state: The worker's state: what it reports.
            renew: The gate's lease: a read worked, and what it read holds until
                ``time.monotonic()`` reaches the time given.
            pace: The limits' store work: earns the permits the waiting requests need and
                has what they allow started; seconds until it is worth calling again
                (``None``: when something changes).
            parking: Handed the parking record (:data:`~celery_pause.model.parking.REGISTRY`)
                read with each state, in the same round trip where the store can (its
                error if it cannot be read: the state read works all the same), and the
                ``time.monotonic()`` the read started.
        """
        super().__init__(name="celery-pause-sync", daemon=True)
        self.store = store
        self.config = config
        self.worker = worker
        self.state = state
        self._renew_gate = renew
        self._pace = pace
        self._parking = parking
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._read_requested = True
        self._read_by = float("inf")
        """``time.monotonic()`` of a read asked for ahead (:meth:`read_at`)."""
        self._published: tuple[Any, ...] | None = None
        """What the last report said that a new one must say at once when it changes."""
        self._reported_running = False
        """Whether the last report named tasks running in scope."""
        self._next_heartbeat = 0.0
        self._published_counts = (0, 0)
        """How many tasks were held and waiting, as the last report said."""
        self._counts_pending = False
        """Whether those counts changed since, and a report will say so at :attr:`_counts_due`."""
        self._counts_due = 0.0
        self._errors = ThrottledLog(logger)
        self._failing = False
        """Whether the last store operation failed (for the log line when it works again)."""
        self.next_change: float | None = None
        """Store time of the next start or end of a hold, read again exactly then."""
        self._change_local = 0.0
        self._lease_end = float("inf")
        """``time.monotonic()`` when the worker fences itself unless a read works first."""
        self.recall = Recall(store=store, config=config, hostname=lambda: state.snapshot().hostname)
        self._unlisten: Callable[[], None] | None = None

    # -- called from other threads ------------------------------------------------
    def refresh(self) -> None:
        """Read the store now (the push path)."""
        self._read_requested = True
        self._wake.set()

    def read_at(self, moment: float) -> None:
        """Read the store again once ``time.monotonic()`` reaches ``moment`` (at the latest)."""
        self._read_by = min(self._read_by, moment)
        self._wake.set()

    def publish_now(self) -> None:
        """The loop applied a change: publish the report at once."""
        if not self._wake.is_set():  # set already: the thread wakes for this too
            self._wake.set()

    def listen(self) -> bool:
        """Have the store's notifications (``pause_store_notify``) call :meth:`refresh`;
        whether the store has them (else only the poll and the broadcast read early)."""
        if self.config.store_notify and self._unlisten is None:
            self._unlisten = self.store.listen(self.refresh)
        return self._unlisten is not None

    def stop(self) -> None:
        if self._unlisten is not None:
            self._unlisten()
        self._stopping.set()
        self._wake.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout=5)

    # -- called before the thread starts --------------------------------------------
    def read_once(self) -> Snapshot | None:
        """Register as starting, then read the state; ``None`` if the store is unreachable."""
        try:
            self.store.put_worker(
                self.state.snapshot().report(seen=self.store.now(), starting=True)
            )
            return self._fetch()
        except StoreError as exc:
            self._log_store_error(exc)
            return None

    # -- the thread -----------------------------------------------------------------
    def run(self) -> None:
        next_read = 0.0
        while not self._stopping.is_set():
            try:
                next_read = min(next_read, self._read_by)
                if self._read_requested or time.monotonic() >= next_read:
                    self._read_requested = False
                    if self._read_by <= time.monotonic():
                        self._read_by = float("inf")
                    self._read()
                    next_read = time.monotonic() + self._read_interval()
                if time.monotonic() >= self._lease_end:
                    self._lease_end = float("inf")
                    self.worker.fence()
                snapshot = self.state.snapshot()
                self._publish(snapshot)
                self._maybe_return_expired(snapshot)
                timeout = self._timeout(snapshot, next_read)
                paced = self._pace()
                if paced is not None:
                    timeout = min(timeout, paced)
            except Exception:
                # A bug must not end the thread: the worker would stop following the store.
                logger.exception("celery-pause: the store thread failed; retrying")
                next_read = time.monotonic() + self.config.poll_interval
                timeout = self.config.poll_interval
            self._wake.wait(max(0.0, timeout))
            self._wake.clear()

    def _in_force(self, snapshot: Snapshot) -> Snapshot:
        """The snapshot with the maintenance windows' current and next occurrences."""
        state = with_windows(snapshot.state, self.config.windows, snapshot.now)
        return Snapshot(state, snapshot.now)

    def _fetch(self) -> Snapshot:
        """Read the state (written back first if the store forgot it), with the windows in
        force, and the parking record; renew the lease from the start of the read."""
        started = time.monotonic()
        read, parking = self.store.read_with_record(REGISTRY)
        snapshot = self._in_force(self.recall.check(read))
        self._renew(started)
        self._parking(parking, started)
        return snapshot

    def _read(self) -> None:
        try:
            snapshot = self._fetch()
        except StoreError as exc:
            self._log_store_error(exc)
            return
        if self._failing:
            logger.warning("celery-pause: store %s is reachable again", self.store.display_url)
        self._failing = False
        crossed = self.next_change is not None and snapshot.now >= self.next_change
        self.next_change = snapshot.state.next_change(snapshot.now)
        self._change_local = time.monotonic() + (
            self.next_change - snapshot.now if self.next_change is not None else 0
        )
        self.worker.deliver(snapshot)
        if crossed:
            self._published = None  # a hold started or ended: say so at once

    def _renew(self, started: float) -> None:
        """A read that started at ``started`` worked: renew the lease from then."""
        if self.config.lease is not None:
            self._lease_end = started + self.config.lease
            self._renew_gate(self._lease_end)

    def _read_interval(self) -> float:
        interval = self.config.poll_interval
        if self.next_change is not None:
            interval = min(interval, max(self._change_local - time.monotonic(), 0.0) + 0.001)
        return interval

    def _timeout(self, snapshot: WorkerSnapshot, next_read: float) -> float:
        now = time.monotonic()
        timeout = min(next_read, self._next_heartbeat, self._lease_end) - now
        enforced = snapshot.enforced
        # Also while the last report still names running tasks: they may have ended
        # while it was being written, and the next report must say so at once.
        reported_running = self._reported_running
        if enforced is not None and (reported_running or snapshot.running(enforced.scope)):
            timeout = min(timeout, DRAIN_CHECK)
        oldest = snapshot.gate.oldest
        if oldest is not None:
            timeout = min(timeout, max(oldest + self.config.max_hold - now, DRAIN_CHECK))
        if self._counts_pending:
            timeout = min(timeout, max(self._counts_due - now, DRAIN_CHECK))
        return timeout

    def _publish(self, snapshot: WorkerSnapshot) -> None:
        enforced = snapshot.enforced
        if enforced is None:
            return
        report = snapshot.report(seen=0.0)
        key = (enforced.scope, *report.urgent())
        now = time.monotonic()
        self._counts_pending = report.counts() != self._published_counts
        if (
            key == self._published
            and now < self._next_heartbeat
            and (not self._counts_pending or now < self._counts_due)
        ):
            return
        try:
            self.store.put_worker(replace(report, seen=self.store.now()))
        except StoreError as exc:
            self._log_store_error(exc)
            return
        self._published = key
        self._published_counts = report.counts()
        self._counts_pending = False
        self._counts_due = now + COUNTS_EVERY
        self._reported_running = bool(report.running)
        self._next_heartbeat = now + self.config.worker_ttl / 3

    def _maybe_return_expired(self, snapshot: WorkerSnapshot) -> None:
        oldest = snapshot.gate.oldest
        if oldest is not None and oldest + self.config.max_hold <= time.monotonic():
            self.worker.return_expired()

    def _log_store_error(self, exc: StoreError) -> None:
        self._failing = True
        self.state.store_failed()
        self._errors.error("celery-pause: %s; keeping the last known pause state, retrying", exc)
