"""The consumer bootstep that applies the pause state, and owns what is applied.

It wraps the consumer's task handler in the :class:`~.gate.Gate` (and, on the
threads, gevent and eventlet pools, the pool's start of each task: see
:mod:`.pools`), cancels and re-adds the consumers of paused queues, and hands
held requests on at resume.
The store thread (:mod:`.sync`) reads and reports; every change it reads is
applied here, on the consumer loop (on gevent and eventlet, where that thread is
a greenlet, it also opens the gate and hands held tasks on itself).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from typing import Any

from celery import bootsteps
from celery.worker.consumer import Consumer
from celery.worker.consumer.tasks import Tasks

from .. import (
    control,  # noqa: F401  (registers the pause_refresh command)
    signals,
)
from ..model.ramp import Ramp, Share, phase_of
from ..model.scope import EVERYTHING, NOTHING, Scope, Target
from ..model.state import Hold, PauseState
from ..routing import QueueResolver
from ..settings import config_for
from ..stores import Snapshot, store_for
from .gate import Gate
from .pools import PoolSupport, StartCheck, shorten_synloop_wait, support_for
from .sync import StoreSync
from .view import GateCounters

logger = logging.getLogger(__name__)


Applied = tuple[int, Scope]
"""A generation of the pause state and the scope it pauses."""


class ApplyStep(bootsteps.StartStopStep):
    """Holds every task of a paused scope before it reaches the pool."""

    label = "celery-pause-apply"
    # A class, not a name: Celery resolves names only for the steps it was given.
    requires = (Tasks,)

    def __init__(self, c: Consumer, **kwargs: Any) -> None:
        super().__init__(c, **kwargs)
        self.pool: PoolSupport = support_for(c)
        self.config = config_for(c.app)
        self.store = store_for(c.app)
        self.consumer = c
        self.consumed: list[str] | None = None
        self.gate = Gate(
            c.on_task_request,
            QueueResolver(c.app),
            hostname=c.hostname,
            qos=lambda: getattr(self.consumer, "qos", None),
            start_check=self.pool.start_check,
            greenlets=self.pool.greenlets,
        )
        c.on_task_request = self.gate
        if self.pool.start_check:
            StartCheck(c.pool, self.gate)
        if self.pool.problem:
            logger.error("celery-pause: %s", self.pool.problem)
        c.celery_pause = self
        self.applied: Applied | None = None
        """The generation and scope this worker applies; ``None`` before the first."""
        self.holds: tuple[Hold, ...] = ()
        """The active holds, as last read."""
        self.scheduled: tuple[Hold, ...] = ()
        """The holds that start later (with the windows' next occurrences), as last read."""
        self.as_of = 0.0
        """Store time of the newest read whose scope is applied (see ``WorkerReport.as_of``)."""
        self.latest: tuple[Applied, float] | None = None
        self.ramps: tuple[Ramp, ...] = ()
        """The ramped resumes in force on this worker, as last read."""
        self._clock_offset = 0.0
        """Store time minus ``time.monotonic()``, as of the last read."""
        self.gate.clock = lambda: time.monotonic() + self._clock_offset
        self.breakers: tuple[str, ...] = ()
        """Circuit breakers whose agent runs on this worker (set by the breaker step)."""
        self.sync = StoreSync(
            store=self.store,
            config=self.config,
            hostname=c.hostname,
            pool=self.pool,
            gate=self.gate,
            applied=self._enforced,
            as_of=lambda: self.as_of,
            breakers=lambda: self.breakers,
            deliver=self._deliver,
            return_expired=self._schedule_return,
            pump=self._schedule_pump,
        )
        self.gate.on_wait = self.sync.publish_now  # wakes it to time the next start
        self._return_scheduled = False
        self._pump_scheduled = False

    # -- what other parts of the worker ask ------------------------------------------------
    def refresh(self) -> None:
        """Re-read the state from the store now (the ``pause_refresh`` command)."""
        self.sync.refresh()

    def serve_breakers(self, names: list[str]) -> None:
        """Report that this worker runs the agents of the breakers ``names``."""
        self.breakers = tuple(names)
        self.sync.publish_now()

    def describe(self) -> dict[str, Any]:
        """What this worker applies, holds and runs in scope (``inspect pause_state``)."""
        generation, scope = self.applied or (-1, NOTHING)
        hostname = self.consumer.hostname
        return {
            "generation": generation,
            "scope": scope.to_json(),
            "holds": [h.to_json() for h in self.holds if h.scope.for_worker(hostname)],
            "scheduled": [h.to_json() for h in self.scheduled if h.scope.for_worker(hostname)],
            "held": self.gate.held_by_task(),
            "running": [
                {"id": task_id, "name": name} for task_id, name in self.gate.running_tasks(scope)
            ],
        }

    @property
    def store_ok(self) -> bool:
        """Whether the last read of the store worked."""
        return self.sync.store_ok

    @property
    def counters(self) -> GateCounters:
        """A copy of what the gate did so far."""
        return replace(self.gate.counters)

    def start(self, c: Consumer) -> None:
        self.consumer = c
        shorten_synloop_wait(c, self.pool, self.config.green_loop_wait)
        if self.consumed is None:
            self.consumed = list(c.app.amqp.queues.consume_from)
            generation, scope = self._initial_state()
        else:
            # After a reconnect: the newest state read, which the loop may not have applied.
            newest = self.latest[0] if self.latest is not None else None
            generation, scope = newest or self.applied or (-1, self.gate.scope)
        # Before the first consume (and again after a reconnect): nothing runs
        # yet, so the consumers can be set to match the gate safely.
        self.apply(generation, scope)
        if not self.sync.is_alive():
            self.sync.start()
        else:
            self.sync.refresh()

    def _initial_state(self) -> tuple[int, Scope]:
        """The state to start under; every queue held if the store cannot be read."""
        snapshot = self.sync.read_once()
        if snapshot is None:
            logger.error(
                "celery-pause: cannot read the pause state from %s; "
                "holding every queue until it can",
                self.store.display_url,
            )
            return -1, EVERYTHING
        self._read(snapshot.state, snapshot.now)
        self.holds = snapshot.state.active_holds(snapshot.now)
        self.as_of = snapshot.now
        paused = snapshot.state.paused(snapshot.now).for_worker(self.consumer.hostname)
        return snapshot.state.generation, paused

    def stop(self, c: Consumer) -> None:
        # Connection lost or worker stopping: hand held messages back while we can;
        # on a dead channel the broker redelivers them anyway.
        returned = self.gate.return_all()
        if returned:
            logger.info("celery-pause: returned %d held task(s) to the broker", returned)

    def shutdown(self, c: Consumer) -> None:
        self.stop(c)
        self.sync.stop()
        try:
            self.store.remove_worker(c.hostname)
        except Exception as exc:
            logger.warning("celery-pause: could not deregister %s: %s", c.hostname, exc)

    # -- state changes ----------------------------------------------------------------
    def _deliver(self, snapshot: Snapshot) -> None:
        """From the sync thread: close the gate at once, apply the rest on the loop.

        On green pools (the sync thread a greenlet) it also opens the gate, hands held
        tasks on at once in a greenlet of their own, and lets the report confirm the
        change: the ``synloop`` would only get to it after its current wait for the broker.
        """
        state, now = snapshot.state, snapshot.now
        paused = state.paused(now).for_worker(self.consumer.hostname)
        latest = (state.generation, paused)
        self._read(state, now)
        if self.applied == latest:
            self.as_of = now
            return
        self.holds = state.active_holds(now)
        self.latest = (latest, now)
        if self.pool.greenlets:
            # Greenlets switch only where they block, and nothing between the gate's
            # check and its hold blocks: the gate opens here as safely as on the loop,
            # and the report can say so before the loop matches the consumers.
            self.gate.scope = paused
            self.as_of = now
            self._share_ramps()
            if self.gate.held:
                release = threading.Thread(target=self._release, name="celery-pause-release")
                release.daemon = True
                release.start()
        elif latest[1]:
            self.gate.scope = self.gate.scope | latest[1]
        self.consumer.call_soon(self._apply_latest)

    def _enforced(self) -> Applied | None:
        """What the gate holds to, for the report: on green pools the newest state read
        (the store greenlet sets the gate itself), elsewhere what the loop applied."""
        if self.pool.greenlets and self.latest is not None:
            return self.latest[0]
        return self.applied

    def _read(self, state: PauseState, now: float) -> None:
        """Keep what every read brings: the clock, the scheduled holds and the ramps."""
        self._clock_offset = now - time.monotonic()
        self.scheduled = state.scheduled_holds(now)
        hostname = self.consumer.hostname
        self.ramps = tuple(r for r in state.live_ramps(now) if r.scope.for_worker(hostname))

    def _share_ramps(self) -> None:
        """Give the gate this worker's share of each ramp read (kept across reads)."""
        shares = {share.ramp.id: share for share in self.gate.ramps}
        phase = phase_of(self.consumer.hostname)
        self.gate.ramps = tuple(shares.get(r.id) or Share(r, phase) for r in self.ramps)

    def _release(self) -> None:
        """In a greenlet of its own: hand on the held tasks the gate lets through now.

        It may wait for free slots in the pool, as the consumer would; the loop's
        ``apply`` releases again whatever is left.
        """
        try:
            self.gate.release(off_loop=True)
        except Exception as exc:
            logger.error("celery-pause: handing held tasks on failed (%r); the loop retries", exc)

    def _apply_latest(self) -> None:
        # Apply the newest state delivered, not the one this callback was queued for:
        # callbacks queued by earlier reads must not reopen what a later read closed.
        if self.latest is not None and self.latest[0] != self.applied:
            latest, as_of = self.latest
            self.apply(*latest, as_of=as_of)

    def apply(self, generation: int, scope: Scope, *, as_of: float | None = None) -> None:
        """On the consumer loop: match consumers, gate and held tasks to ``scope``, the
        pause as read at store time ``as_of``."""
        c = self.consumer
        previous = self.applied[1] if self.applied else NOTHING
        self.gate.scope = scope
        self._share_ramps()
        if c.task_consumer is not None:
            # A queue listed but not consumed yet (in start(), before the loop's first
            # consume): cancel it if paused, so that first consume fetches nothing to
            # hold; otherwise leave it to that consume. Consuming from here would let
            # deliveries reach the consumer before the loop has set its callback.
            listed = {queue.name for queue in c.task_consumer.queues}
            for name in self.consumed or ():
                if scope.covers(Target(queue=name, worker=c.hostname)):
                    if name in listed:
                        c.cancel_task_queue(name)
                elif name not in listed:
                    c.add_task_queue(name)
        semaphore = getattr(c.controller, "semaphore", None)
        if semaphore is not None:
            self.gate.take_waiters(semaphore)
        drained = self.gate.return_drained()
        if drained:
            logger.info("celery-pause: returned %d task(s) of drained queues", drained)
        self.gate.release()
        self.gate.pump()
        self.applied = (generation, scope)
        if as_of is not None:
            self.as_of = as_of
        self.sync.publish_now()
        if scope != previous:
            self._announce(generation, scope, previous)

    def _announce(self, generation: int, scope: Scope, previous: Scope) -> None:
        by = "; ".join(hold.describe() for hold in self.holds) or "no hold"
        if scope:
            logger.warning(
                "celery-pause: generation %d: paused %s (%s)", generation, scope.describe(), by
            )
        else:
            logger.warning("celery-pause: generation %d: resumed all queues", generation)
        signal = signals.worker_paused if scope else signals.worker_resumed
        for receiver, result in signal.send_robust(
            sender=self.consumer,
            generation=generation,
            scope=scope,
            previous=previous,
            holds=self.holds,
        ):
            if isinstance(result, Exception):
                logger.error("celery-pause: %r failed on %s: %r", receiver, signal.name, result)

    def _schedule_return(self) -> None:
        """From the sync thread: return expired held tasks on the loop, once."""
        if not self._return_scheduled:
            self._return_scheduled = True
            self.consumer.call_soon(self._return_expired)

    def _schedule_pump(self) -> None:
        """From the sync thread: start the tasks the ramps allow by now, on the loop, once."""
        if not self._pump_scheduled:
            self._pump_scheduled = True
            self.consumer.call_soon(self._pump)

    def _pump(self) -> None:
        self._pump_scheduled = False
        self.gate.pump()

    def _return_expired(self) -> None:
        self._return_scheduled = False
        returned = self.gate.return_expired(self.config.max_hold)
        if returned:
            logger.info(
                "celery-pause: returned %d task(s) held over %gs to the broker",
                returned,
                self.config.max_hold,
            )
