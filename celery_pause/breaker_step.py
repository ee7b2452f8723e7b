"""The worker side of the circuit breakers: one probe (or trial) for the whole cluster.

:class:`BreakerStep` runs a thread in every worker that uses a breaker. Once an
open breaker's reset timeout has passed, every such worker tries to take the
breaker's *probe lease* (a lock with expiry in the store); the one that gets it
starts a half-open period. With a ``probe`` callable it runs it; without one it
picks up to ``half_open_trials`` tasks of the breaker from its paused queues
(one it already holds, or one fetched with ``basic_get``), records them as the
period's trials, and lets exactly those past its gate. A crashed prober stops
renewing its lease: once the lease expires another worker starts a new period.

The thread also repairs what an interrupted writer left behind: it puts back the
hold of an open breaker whose tripper died before placing it, closes a breaker
whose hold an operator removed (``resume --force``), and removes the hold of a
breaker that closed.
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
from typing import Any

from celery import Celery, bootsteps
from celery.worker.consumer import Consumer
from celery.worker.request import Request
from kombu.message import Message

from .breaker import CircuitBreaker, breakers_of, describe, queue_of
from .breaker_state import CLOSED, HALF_OPEN, OPEN, BreakerRecord
from .errors import StoreError
from .stores import Store, store_for

logger = logging.getLogger(__name__)

ACTIVE_TICK = 0.25
"""Seconds between checks while a breaker is half-open or due to probe."""
TRIAL_SCAN = 10
"""Messages looked at per queue for a task of the breaker when fetching a trial."""
ERROR_LOG_EVERY = 30.0
PLACE_GRACE = 30.0
"""Seconds after opening within which a missing, never-placed hold is put in place."""


@dataclass
class Candidate:
    """A task picked on the consumer loop to be a trial: held in the gate, or fetched."""

    breaker: str
    period: int
    task_id: str
    message: Message | None = None


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


class BreakerStep(bootsteps.StartStopStep):
    """Runs the half-open periods of the app's breakers and lets trial tasks through."""

    label = "celery-pause-breaker"
    requires = ("celery_pause.bootstep:PauseStep",)

    def __init__(self, c: Consumer, **kwargs: Any) -> None:
        super().__init__(c, **kwargs)
        pause_step = getattr(c, "celery_pause", None)
        self.breakers = breakers_of(c.app) if pause_step is not None else {}
        self.enabled = bool(self.breakers)
        if pause_step is None or not self.enabled:
            return
        self.admission = TrialAdmission(c, pause_step)
        pause_step.gate.admit = self.admission.admits
        self.agent = BreakerAgent(
            app=c.app,
            hostname=c.hostname,
            breakers=list(self.breakers.values()),
            admission=self.admission,
            poll=pause_step.config.poll_interval,
        )

    def start(self, c: Consumer) -> None:
        self.admission.consumer = c
        if not self.agent.is_alive():
            self.agent.start()

    def stop(self, c: Consumer) -> None:
        pass  # fetched but undispatched trials go back with the channel

    def shutdown(self, c: Consumer) -> None:
        self.agent.stop()


class TrialAdmission:
    """On the consumer loop: picks trial tasks and lets exactly those past the gate."""

    def __init__(self, c: Consumer, pause_step: Any) -> None:
        self.consumer = c
        self.pause_step = pause_step
        self.admitted: set[str] = set()

    def admits(self, request: Request) -> bool:
        """The gate's hook: a trial passes although its queue is paused."""
        return request.id in self.admitted

    def pick(self, breaker: CircuitBreaker, period: int, deliver: Any) -> None:
        """Find one task of ``breaker`` to try (loop thread); hand it to ``deliver``."""
        try:
            candidate = self._held(breaker, period) or self._fetch(breaker, period)
        except Exception as exc:
            logger.error("celery-pause: circuit %s: cannot fetch a trial: %r", breaker.name, exc)
            candidate = None
        deliver(breaker.name, candidate)

    def admit(self, candidate: Candidate) -> None:
        """Let ``candidate`` through the gate (loop thread)."""
        self.admitted.add(candidate.task_id)
        if candidate.message is None:
            self.pause_step.gate.release()
            return
        c = self.consumer
        handler = getattr(c.task_consumer, "on_message", None) or c.create_task_handler()
        handler(candidate.message)

    def give_back(self, candidate: Candidate) -> None:
        """Return a fetched candidate that did not become a trial (loop thread)."""
        if candidate.message is not None:
            self._requeue([candidate.message])

    def forget(self, task_ids: list[str]) -> None:
        """The period is over: its trials no longer pass (loop thread)."""
        self.admitted.difference_update(task_ids)

    def _held(self, breaker: CircuitBreaker, period: int) -> Candidate | None:
        app = self.consumer.app
        for request, _ in self.pause_step.gate.held:
            if request.id in self.admitted or not _uses(request.task, breaker):
                continue
            if breaker.scope.covers(queue_of(app, request)):
                return Candidate(breaker.name, period, request.id)
        return None

    def _fetch(self, breaker: CircuitBreaker, period: int) -> Candidate | None:
        c = self.consumer
        if c.task_consumer is None:
            return None
        app: Celery = c.app
        channel = c.task_consumer.channel
        accept = app.conf.accept_content
        for name in self.pause_step.consumed or ():
            if not breaker.scope.covers(name) or name not in app.amqp.queues:
                continue
            bound = app.amqp.queues[name].bind(channel)
            others: list[Message] = []
            try:
                for _ in range(TRIAL_SCAN):
                    message = bound.get(no_ack=False, accept=accept)
                    if message is None:
                        break
                    headers = message.headers or {}
                    task = app.tasks.get(headers.get("task", ""))
                    if headers.get("id") and _uses(task, breaker):
                        return Candidate(breaker.name, period, str(headers["id"]), message)
                    others.append(message)
            finally:
                self._requeue(others)
        return None

    def _requeue(self, messages: list[Message]) -> None:
        for message in messages:
            try:
                message.reject(requeue=True)  # type: ignore[no-untyped-call]
            except Exception as exc:
                logger.warning("celery-pause: could not return a message to its queue: %r", exc)


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
        self._error_logged_at = float("-inf")

    @property
    def store(self) -> Store:
        return store_for(self.app)

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout=5)
        for name in list(self.periods):
            with suppress(StoreError):  # else it expires
                self.store.release_lease(f"breaker:{name}", self.owner)

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
            if hold.source == breaker.source and (
                record.state == CLOSED or hold.id != record.hold_id
            ):
                breaker.drop_hold(self.app, store, hold.id)
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
        consumed = self.admission.pause_step.consumed or ()
        return any(breaker.scope.covers(name) for name in consumed)

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
                store, lambda rec, now: rec.succeed(mine.number, key, 1, now)
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
        now = time.monotonic()
        if now - self._error_logged_at >= ERROR_LOG_EVERY:
            self._error_logged_at = now
            logger.error("celery-pause: breaker: %s; retrying", exc)


def _uses(task: Any, breaker: CircuitBreaker) -> bool:
    used = getattr(task, "breaker", None)
    return isinstance(used, CircuitBreaker) and used.name == breaker.name
