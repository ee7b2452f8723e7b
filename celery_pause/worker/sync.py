"""The worker's link to the store: a background thread that reads and reports.

Store I/O never runs on the consumer's event loop. The thread reads the state
every ``pause_poll_interval`` seconds (or at once when told by the
``pause_refresh`` broadcast) and again exactly when a hold starts or ends (a
scheduled pause, a maintenance window's occurrence, an auto-resume), adds the
app's maintenance windows to what it read, hands changes to the loop, and
publishes the worker's report: on change, right after a hold started or ended,
while tasks in a paused scope are still running, and as a heartbeat.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from ..errors import StoreError
from ..logs import ThrottledLog
from ..model.report import APPLIED, STARTING, WorkerReport
from ..model.scope import Scope
from ..model.windows import with_windows
from ..settings import PauseConfig
from ..stores import Snapshot, Store
from .gate import Gate
from .pools import PoolSupport

logger = logging.getLogger(__name__)

DRAIN_CHECK = 0.02
"""Seconds between local checks of running tasks while a pause drains."""
RAMP_TICK = 0.005
"""Fewest seconds between two hand-overs of ramped tasks to the consumer loop."""


class StoreSync(threading.Thread):
    """Keeps one worker in step with the store."""

    def __init__(
        self,
        *,
        store: Store,
        config: PauseConfig,
        hostname: str,
        pool: PoolSupport,
        gate: Gate,
        applied: Callable[[], tuple[int, Scope] | None],
        as_of: Callable[[], float],
        breakers: Callable[[], tuple[str, ...]],
        deliver: Callable[[Snapshot], None],
        return_expired: Callable[[], None],
        pump: Callable[[], None],
    ) -> None:
        super().__init__(name="celery-pause-sync", daemon=True)
        self.store = store
        self.config = config
        self.hostname = hostname
        self.pool = pool
        self.gate = gate
        self._applied = applied
        self._as_of = as_of
        self._breakers = breakers
        self._deliver = deliver
        self._return_expired = return_expired
        self._pump = pump
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._read_requested = True
        self._published: tuple[object, ...] | None = None
        self._next_heartbeat = 0.0
        self._errors = ThrottledLog(logger)
        self.store_ok = True
        self.next_change: float | None = None
        """Store time of the next start or end of a hold, read again exactly then."""
        self._change_local = 0.0

    # -- called from other threads ------------------------------------------------
    def refresh(self) -> None:
        """Read the store now (the push path)."""
        self._read_requested = True
        self._wake.set()

    def publish_now(self) -> None:
        """The loop applied a change: publish the report at once."""
        self._wake.set()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout=5)

    # -- called before the thread starts --------------------------------------------
    def read_once(self) -> Snapshot | None:
        """Register as starting, then read the state; ``None`` if the store is unreachable."""
        try:
            self.store.put_worker(self._report(STARTING, -1, None, ()))
            return self._in_force(self.store.read())
        except StoreError as exc:
            self._log_store_error(exc)
            return None

    # -- the thread -----------------------------------------------------------------
    def run(self) -> None:
        next_read = 0.0
        while not self._stopping.is_set():
            try:
                if self._read_requested or time.monotonic() >= next_read:
                    self._read_requested = False
                    self._read()
                    next_read = time.monotonic() + self._read_interval()
                self._publish()
                self._maybe_return_expired()
                self._maybe_pump()
                timeout = self._timeout(next_read)
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

    def _read(self) -> None:
        try:
            snapshot = self._in_force(self.store.read())
        except StoreError as exc:
            self._log_store_error(exc)
            return
        if not self.store_ok:
            logger.warning("celery-pause: store %s is reachable again", self.store.display_url)
        self.store_ok = True
        crossed = self.next_change is not None and snapshot.now >= self.next_change
        self.next_change = snapshot.state.next_change(snapshot.now)
        self._change_local = time.monotonic() + (
            self.next_change - snapshot.now if self.next_change is not None else 0
        )
        self._deliver(snapshot)
        if crossed:
            self._published = None  # a hold started or ended: say so at once

    def _read_interval(self) -> float:
        interval = self.config.poll_interval
        if self.next_change is not None:
            interval = min(interval, max(self._change_local - time.monotonic(), 0.0) + 0.001)
        return interval

    def _timeout(self, next_read: float) -> float:
        now = time.monotonic()
        timeout = min(next_read, self._next_heartbeat) - now
        applied = self._applied()
        # Also while the last report still names running tasks: they may have ended
        # while it was being written, and the next report must say so at once.
        reported_running = self._published is not None and bool(self._published[2])
        if applied is not None and (reported_running or self.gate.running(applied[1])):
            timeout = min(timeout, DRAIN_CHECK)
        ramp_start = self.gate.next_ramp_start()
        if ramp_start is not None:
            timeout = min(timeout, max(ramp_start - self.gate.clock(), RAMP_TICK))
        held = self.gate.held  # the loop replaces the list, pool threads add to it
        if held:
            oldest = held[0][1]
            timeout = min(timeout, max(oldest + self.config.max_hold - now, DRAIN_CHECK))
        return timeout

    def _publish(self) -> None:
        applied = self._applied()
        if applied is None:
            return
        generation, scope = applied
        tasks = self.gate.running_tasks(scope)
        running = tuple(task_id for task_id, _ in tasks)
        key = (
            generation,
            scope,
            running,
            len(self.gate.held),
            len(self.gate.waiting),
            self._breakers(),
        )
        if key == self._published and time.monotonic() < self._next_heartbeat:
            return
        names = tuple(name for _, name in tasks)
        try:
            self.store.put_worker(self._report(APPLIED, generation, scope.names(), running, names))
        except StoreError as exc:
            self._log_store_error(exc)
            return
        self._published = key
        self._next_heartbeat = time.monotonic() + self.config.worker_ttl / 3

    def _maybe_return_expired(self) -> None:
        held = self.gate.held
        if held and held[0][1] + self.config.max_hold <= time.monotonic():
            self._return_expired()

    def _maybe_pump(self) -> None:
        ramp_start = self.gate.next_ramp_start()
        if ramp_start is not None and ramp_start <= self.gate.clock():
            self._pump()

    def _report(
        self,
        status: str,
        generation: int,
        paused: list[str] | None,
        running: tuple[str, ...],
        names: tuple[str, ...] = (),
    ) -> WorkerReport:
        return WorkerReport(
            hostname=self.hostname,
            pid=os.getpid(),
            status=status,
            generation=generation,
            paused=paused,
            running=running,
            held=len(self.gate.held),
            ramping=len(self.gate.waiting),
            seen=self.store.now(),
            running_names=names,
            breakers=self._breakers(),
            pool=self.pool.name,
            pool_problem=self.pool.problem,
            as_of=self._as_of(),
        )

    def _log_store_error(self, exc: StoreError) -> None:
        self.store_ok = False
        self._errors.error("celery-pause: %s; keeping the last known pause state, retrying", exc)
