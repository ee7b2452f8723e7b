"""One worker's part in every breaker, on its own thread: probe when due, repair the state.

Once an open breaker's reset timeout has passed, every worker that can serve it
tries to take the breaker's *probe lease* (a lock with expiry in the store); the
one that gets it starts a half-open period. With a ``probe`` callable it runs it;
without one it has the :class:`~.admission.TrialAdmission` pick up to
``half_open_trials`` tasks and records them as the period's trials. A crashed
prober stops renewing its lease: once the lease expires another worker starts a
new period.

The agent also repairs what an interrupted writer left behind: it puts back the
hold of an open breaker whose tripper died before placing it, closes a breaker
whose hold an operator removed (``resume --force``), and removes the hold of a
breaker that closed (starting the ramp it closed with, if its closer did not).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
import uuid
from contextlib import suppress
from dataclasses import dataclass, field

from celery import Celery

from ..errors import StoreError
from ..logs import ThrottledLog
from ..stores import Store, store_for
from .admission import Candidate, TrialAdmission
from .circuit import CircuitBreaker, describe
from .record import CLOSED, HALF_OPEN, OPEN, BreakerRecord

logger = logging.getLogger(__name__)

ACTIVE_TICK = 0.25
"""Seconds between checks while a breaker is half-open or due to probe."""
PLACE_GRACE = 30.0
"""Seconds after opening within which a missing, never-placed hold is put in place."""


@dataclass
class Period:
    """A half-open period this worker runs (it holds the probe lease)."""

    number: int
    renew_at: float
    fetching: bool = False
    next_fetch: float = 0.0
    admitted: list[str] = field(default_factory=list)
    first_trial_at: float | None = None
    probe: threading.Thread | None = None
    probe_started: float = 0.0
    probe_result: tuple[bool, str] | None = None


class BreakerAgent(threading.Thread):
    """One worker's part in every breaker: probe when due, and repair the state."""

    def __init__(
        self,
        *,
        app: Celery,
        hostname: str,
        breakers: list[CircuitBreaker],
        admission: TrialAdmission,
        poll: float,
    ) -> None:
        super().__init__(name="celery-pause-breaker", daemon=True)
        self.app = app
        self.hostname = hostname
        self.breakers = breakers
        self.admission = admission
        self.poll = poll
        self.owner = f"{hostname}/{os.getpid()}/{uuid.uuid4().hex[:6]}"
        self.periods: dict[str, Period] = {}
        self._found: queue.SimpleQueue[tuple[str, Candidate | None]] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._errors = ThrottledLog(logger)

    @property
    def store(self) -> Store:
        return store_for(self.app)

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout=5)
        for breaker in self.breakers:
            if breaker.name in self.periods:
                with suppress(StoreError):  # else it expires
                    self.store.release_lease(breaker.key, self.owner)

    def run(self) -> None:
        while not self._stopping.is_set():
            self._take_found()
            timeout = self.poll
            for breaker in self.breakers:
                try:
                    timeout = min(timeout, self.tick(breaker))
                except StoreError as exc:
                    self._log_store_error(exc)
                except Exception:
                    logger.exception("celery-pause: circuit %s: agent error", breaker.name)
            self._wake.wait(max(0.01, timeout))
            self._wake.clear()

    # -- one breaker ----------------------------------------------------------------------
    def tick(self, breaker: CircuitBreaker) -> float:
        """Bring this worker's part in ``breaker`` up to date; seconds until the next look."""
        store = self.store
        record = self.reconcile(breaker)
        mine = self.periods.get(breaker.name)
        if mine is not None and not self._still_mine(record, mine):
            self.end_period(breaker, mine)
            mine = None
        now = store.now()
        if record.state == OPEN:
            due = (record.next_probe_at or now) - now
            if due > 0:
                return due
            if self.can_serve(breaker):
                self.begin(breaker)
            return ACTIVE_TICK
        if record.state == HALF_OPEN:
            if mine is not None:
                return self.drive(breaker, mine, record)
            if self.can_serve(breaker) and store.lease_owner(breaker.key) is None:
                self.begin(breaker)  # its prober is gone: a new period
            return ACTIVE_TICK
        return self.poll

    def reconcile(self, breaker: CircuitBreaker) -> BreakerRecord:
        """The record, once holds that do not match it are repaired: a stale hold of this
        breaker removed, a hold its tripper did not live to place put in place, and the
        breaker closed if an operator removed its hold (``resume --force``)."""
        store = self.store
        # Pause state first, record second: a hold present in that earlier read whose
        # id the record no longer names belongs to a period that is over.
        before = store.read()
        record = breaker.read(store)
        for hold in before.state.holds:
            if (
                hold.source == breaker.source
                and not hold.ramp
                and (record.state == CLOSED or hold.id != record.hold_id)
            ):
                closed = record if record.state == CLOSED else None
                breaker.drop_hold(self.app, store, hold.id, closed=closed)
        hold_id = record.hold_id
        if record.state == CLOSED or hold_id is None:
            return record
        if record.hold_placed:
            return breaker.check_forced_resume(store, record)[0]
        after = store.read()
        if any(hold.id == hold_id for hold in after.state.live_holds(after.now)):
            return breaker.change(store, lambda rec, now: rec.placed(hold_id))[0]
        if after.now - (record.opened_at or after.now) < PLACE_GRACE:
            breaker.place_hold(self.app, store, record, paused_by=self.hostname)
            return breaker.read(store)
        # Never placed, and long ago: whatever removed it meant the queues to flow.
        return breaker.forced_close(store, record)

    def can_serve(self, breaker: CircuitBreaker) -> bool:
        """Whether this worker can run a half-open period: it has a probe to run, or
        consumes one of the breaker's queues."""
        if breaker.probe is not None:
            return True
        consumed = self.admission.consumed()
        return any(breaker.guards(name) for name in consumed)

    def begin(self, breaker: CircuitBreaker) -> bool:
        """Take the probe lease and start a half-open period; whether this worker did."""
        store = self.store
        if not store.acquire_lease(breaker.key, self.owner, breaker.lease_ttl):
            return False
        record, changed = breaker.change(
            store, lambda rec, now: rec.begin_half_open(now, self.owner)
        )
        if not changed:
            store.release_lease(breaker.key, self.owner)
            return False
        mine = Period(number=record.period, renew_at=time.monotonic() + breaker.lease_ttl / 3)
        self.periods[breaker.name] = mine
        how = (
            "running the probe"
            if breaker.probe is not None
            else f"letting {breaker.half_open_trials} trial task(s) through"
        )
        logger.warning(
            "celery-pause: circuit %s half-open (period %d) on %s: %s",
            breaker.name,
            record.period,
            self.hostname,
            how,
        )
        if breaker.probe is not None:
            self._start_probe(breaker, mine)
        return True

    def drive(self, breaker: CircuitBreaker, mine: Period, record: BreakerRecord) -> float:
        """Run this worker's half-open period one step further."""
        store = self.store
        if time.monotonic() >= mine.renew_at:
            if not store.acquire_lease(breaker.key, self.owner, breaker.lease_ttl):
                logger.warning("celery-pause: circuit %s: probe lease lost", breaker.name)
                self.end_period(breaker, mine)
                return ACTIVE_TICK
            mine.renew_at = time.monotonic() + breaker.lease_ttl / 3
        if breaker.probe is not None:
            self._drive_probe(breaker, mine)
        else:
            self._drive_trials(breaker, mine, record)
        return ACTIVE_TICK

    def end_period(self, breaker: CircuitBreaker, mine: Period) -> None:
        """Stop running ``mine``: release the lease and stop letting its trials through."""
        self.periods.pop(breaker.name, None)
        try:
            self.store.release_lease(breaker.key, self.owner)
        except StoreError as exc:
            self._log_store_error(exc)
        if mine.admitted:
            self.admission.consumer.call_soon(self.admission.forget, list(mine.admitted))

    def _still_mine(self, record: BreakerRecord, mine: Period) -> bool:
        return (
            record.state == HALF_OPEN
            and record.period == mine.number
            and record.prober == self.owner
        )

    # -- probe callable -------------------------------------------------------------------
    def _start_probe(self, breaker: CircuitBreaker, mine: Period) -> None:
        def run() -> None:
            result = (True, "")
            for _ in range(breaker.success_threshold):
                try:
                    if breaker.probe is not None and breaker.probe() is False:
                        result = (False, "probe returned False")
                        break
                except Exception as exc:
                    result = (False, describe(exc))
                    break
            mine.probe_result = result
            self._wake.set()

        mine.probe_started = time.monotonic()
        mine.probe = threading.Thread(target=run, name=f"celery-pause-probe-{breaker.name}")
        mine.probe.daemon = True
        mine.probe.start()

    def _drive_probe(self, breaker: CircuitBreaker, mine: Period) -> None:
        result = mine.probe_result
        if result is None:
            limit = breaker.probe_timeout * breaker.success_threshold
            if time.monotonic() - mine.probe_started < limit:
                return
            result = (False, f"probe did not finish within {limit:g}s")
        ok, error = result
        store = self.store
        if ok:
            key = f"probe:{mine.number}"
            record, changed = breaker.change(
                store, lambda rec, now: rec.succeed(mine.number, key, 1, now, breaker.ramp)
            )
            if changed and record.state == CLOSED:
                logger.warning("celery-pause: circuit %s: probe passed", breaker.name)
                breaker.after_close(self.app, store, record)
        else:
            record, changed = breaker.change(
                store, lambda rec, now: rec.fail(mine.number, now, error, breaker.policy)
            )
            if changed:
                logger.warning(
                    "celery-pause: circuit %s: probe failed (%s); open again, next probe in %gs",
                    breaker.name,
                    error,
                    record.reset_timeout or breaker.reset_timeout,
                )
        self.end_period(breaker, mine)

    # -- trial tasks ----------------------------------------------------------------------
    def _drive_trials(self, breaker: CircuitBreaker, mine: Period, record: BreakerRecord) -> None:
        now = time.monotonic()
        if mine.first_trial_at is not None and now - mine.first_trial_at > breaker.trial_timeout:
            error = f"trial did not finish within {breaker.trial_timeout:g}s"
            _, changed = breaker.change(
                self.store, lambda rec, t: rec.fail(mine.number, t, error, breaker.policy)
            )
            if changed:
                logger.warning("celery-pause: circuit %s: %s; open again", breaker.name, error)
            self.end_period(breaker, mine)
            return
        wanted = breaker.half_open_trials - len(record.trials)
        if wanted > 0 and not mine.fetching and now >= mine.next_fetch:
            mine.fetching = True
            self.admission.consumer.call_soon(
                self.admission.pick, breaker, mine.number, self._deliver
            )

    def _deliver(self, name: str, candidate: Candidate | None) -> None:
        """From the loop: the candidate picked for breaker ``name`` (or none)."""
        self._found.put((name, candidate))
        self._wake.set()

    def _take_found(self) -> None:
        while True:
            try:
                name, candidate = self._found.get_nowait()
            except queue.Empty:
                return
            mine = self.periods.get(name)
            breaker = next((b for b in self.breakers if b.name == name), None)
            if mine is not None:
                mine.fetching = False
            if candidate is None:
                if mine is not None:
                    mine.next_fetch = time.monotonic() + min(self.poll, 1.0)
                continue
            if mine is None or breaker is None or candidate.period != mine.number:
                self.admission.consumer.call_soon(self.admission.give_back, candidate)
                continue
            try:
                added = self._add_trial(breaker, candidate)
            except StoreError as exc:
                self._log_store_error(exc)
                added = False
            if not added:
                self.admission.consumer.call_soon(self.admission.give_back, candidate)
                continue
            mine.admitted.append(candidate.task_id)
            if mine.first_trial_at is None:
                mine.first_trial_at = time.monotonic()
            logger.warning(
                "celery-pause: circuit %s: task %s is the trial of period %d",
                name,
                candidate.task_id,
                candidate.period,
            )
            self.admission.consumer.call_soon(self.admission.admit, candidate)

    def _add_trial(self, breaker: CircuitBreaker, candidate: Candidate) -> bool:
        limit = breaker.half_open_trials

        def add(rec: BreakerRecord, now: float) -> BreakerRecord | None:
            return rec.add_trial(candidate.period, self.owner, candidate.task_id, limit)

        return breaker.change(self.store, add)[1]

    def _log_store_error(self, exc: StoreError) -> None:
        self._errors.error("celery-pause: breaker: %s; retrying", exc)
