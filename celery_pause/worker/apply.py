"""The consumer bootstep that applies the pause state, and owns what is applied.

It wraps the consumer's task handler in the :class:`~.gate.Gate` (and, on the
threads, gevent and eventlet pools, the pool's start of each task: see
:mod:`.pools`), cancels and re-adds the consumers of paused queues, and hands
held requests on at resume.
The store thread (:mod:`.sync`) reads and reports; every change it reads is
recorded in the :class:`~.state.WorkerState` and applied here, on the consumer
loop (on gevent and eventlet, where that thread is a greenlet, it also opens the
gate and hands held tasks on itself). The step puts on the consumer what other
steps read: ``c.pause_state`` (the state), ``c.pause_gate`` (the gate) and
``c.pause_sync`` (the store thread).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from celery import bootsteps
from celery.utils.dispatch import Signal
from celery.worker.consumer import Consumer
from celery.worker.consumer.tasks import Tasks

from .. import signals
from ..errors import ConfigurationError, WorkerRefused
from ..limits.keeper import LimitKeeper
from ..model.scope import EVERYTHING, NOTHING, Scope, Target
from ..model.state import Hold
from ..routing import QueueResolver
from ..settings import config_for
from ..stores import Snapshot, store_for
from .gate import Gate
from .pools import (
    EndNotice,
    PoolSupport,
    SlotCheck,
    StartCheck,
    shorten_synloop_wait,
    support_for,
    take_waiters,
)
from .snapshot import UNREAD, Applied, Delivered
from .state import StoreClock, WorkerState, listening
from .sync import StoreSync
from .unparking import parking_for

logger = logging.getLogger(__name__)


class ApplyStep(bootsteps.StartStopStep):
    """Holds every task of a paused scope before it reaches the pool."""

    label = "celery-pause-apply"
    # A class, not a name: Celery resolves names only for the steps it was given.
    requires = (Tasks,)

    def __init__(self, c: Consumer, **kwargs: Any) -> None:
        super().__init__(c, **kwargs)
        self.pool: PoolSupport = support_for(c)
        try:
            self.config = config_for(c.app)
            self.store = store_for(c.app)
        except ConfigurationError as exc:
            raise WorkerRefused(f"celery-pause: {exc}") from None
        if self.config.store_url.partition("://")[0] == "memory":
            logger.warning(
                "celery-pause: %s is memory://: the pause state lives in this worker alone; "
                "no CLI, admin API or other worker can pause it",
                self.config.store_setting,
            )
        self.consumer = c
        self._started = False
        clock = StoreClock()
        self.gate = Gate(
            c.on_task_request,
            QueueResolver(c.app),
            hostname=c.hostname,
            qos=lambda: getattr(self.consumer, "qos", None),
            start_check=self.pool.start_check,
            greenlets=self.pool.greenlets,
            clock=clock.now,
            on_wait=self._wake,  # wakes the store thread to time the next start
            on_lapse=self.fence,  # the lease ran out before the store thread saw it
            backlog=max(4, c.initial_prefetch_count or 0),
            on_backlog=lambda: self.consumer.call_soon(self._match_consumers),
            labels=self.config.labels,
        )
        c.on_task_request = self.gate
        EndNotice(c.pool, self.gate.pacing.ended, lambda: self.gate.pacing.active)
        if self.pool.start_check:
            StartCheck(c.pool, self.gate)
        elif getattr(c.controller, "semaphore", None) is not None:
            SlotCheck(c.controller, self.gate)
        if self.pool.problem:
            logger.error("celery-pause: %s", self.pool.problem)
        self.state = WorkerState(
            hostname=c.hostname,
            pool=self.pool,
            gate=self.gate,
            clock=clock,
            listening=lambda: listening(c),
            lease=self.config.lease,
        )
        self.parking, self.unparking = parking_for(
            c, self.store, self.config, self.gate.counters, lambda: self.state.holds
        )
        self.gate.park_with(self.parking)
        self.limits = LimitKeeper(
            store=self.store,
            hostname=c.hostname,
            clock=clock.now,
            ttl=self.config.worker_ttl,
            pump=self.pump,
            pool_size=getattr(c.controller, "concurrency", None) or 1,
        )
        pacing = self.gate.pacing
        self.sync = StoreSync(
            store=self.store,
            config=self.config,
            worker=self,
            state=self.state,
            renew=self.gate.renew,
            pace=lambda: self.limits.pace(pacing.all_permits(), pacing.take_retired()),
            parking=self.unparking.noted,
        )
        c.pause_state = self.state
        c.pause_gate = self.gate
        c.pause_sync = self.sync
        c.pause_announced = self.announced
        self._return_scheduled = False
        self._pump_scheduled = False

    def start(self, c: Consumer) -> None:
        self.consumer = c
        shorten_synloop_wait(c, self.pool, self.config.green_loop_wait)
        if not self._started:
            self._started = True
            self.state.consumes(c.app.amqp.queues.consume_from)
            applied = self._initial_state()
        else:
            applied = self.state.restart_point()
        # Before the first consume (and again after a reconnect): nothing runs
        # yet, so the consumers can be set to match the gate safely.
        self.apply(applied)
        if not self.sync.is_alive():
            self._say_how_pushed(c, self.sync.listen())
            self.sync.start()
            self.unparking.start()
        else:
            self.sync.refresh()

    def _say_how_pushed(self, c: Consumer, notified: bool) -> None:
        """Once at start, when Celery's broadcast cannot reach this worker (remote control
        off, or a broker without fanout: SQS), how fast a pause arrives instead."""
        if c.app.conf.worker_enable_remote_control and c.conninfo.supports_exchange_type("fanout"):
            return
        logger.log(
            logging.INFO if notified else logging.WARNING,
            "celery-pause: remote control is off (or the broker has no broadcast): pauses "
            "arrive by polling the store every %g s%s",
            self.config.poll_interval,
            " or by the store's notifications" if notified else "",
        )

    def _initial_state(self) -> Applied:
        """The state to start under; every queue held if the store cannot be read."""
        snapshot = self.sync.read_once()
        if snapshot is None:
            logger.error(
                "celery-pause: cannot read the pause state from %s; "
                "holding every queue until it can",
                self.store.display_url,
            )
            return UNREAD
        applied = self.state.starts_with(snapshot.state, snapshot.now)
        paused = applied.scope.describe() if applied.scope else "nothing"
        logger.info(
            "celery-pause: active; store %s, generation %d, paused: %s",
            self.store.display_url,
            applied.generation,
            paused,
        )
        for warning in self.store.warnings():
            logger.warning("celery-pause: store %s: %s", self.store.display_url, warning)
        return applied

    def stop(self, c: Consumer) -> None:
        # Connection lost or worker stopping: hand held messages back while we can;
        # on a dead channel the broker redelivers them anyway.
        returned = self.gate.return_all()
        if returned:
            logger.info("celery-pause: returned %d held task(s) to the broker", returned)

    def shutdown(self, c: Consumer) -> None:
        self.stop(c)
        self.sync.stop()
        self.unparking.stop()
        self.parking.close()
        pacing = self.gate.pacing
        self.limits.give_back_all([*pacing.all_permits(), *pacing.take_retired()])
        try:
            self.store.remove_worker(c.hostname)
        except Exception as exc:
            logger.warning("celery-pause: could not deregister %s: %s", c.hostname, exc)

    # -- the consumer loop, as the store thread hands it work (``sync.Followed``) ---------
    def deliver(self, snapshot: Snapshot) -> None:
        """From the sync thread: close the gate at once, apply the rest on the loop.

        On green pools (the sync thread a greenlet) it also opens the gate, hands held
        tasks on at once in a greenlet of their own, and lets the report confirm the
        change: the ``synloop`` would only get to it after its current wait for the broker.
        """
        delivered = self.state.deliver(snapshot.state, snapshot.now)
        if delivered is not None:
            self._deliver(delivered)

    def announced(self, hold: str, scope: Scope, seconds: float) -> None:
        """From the ``pause_announce`` command: hold ``scope``, a pause being written as the
        hold ``hold``, until a read shows it or ``seconds`` pass (0: no longer)."""
        delivered = self.state.announce(hold, scope, seconds)
        if seconds:
            self.sync.read_at(time.monotonic() + seconds)  # to let it lapse then
        if delivered is not None:
            self._deliver(delivered)

    def _deliver(self, delivered: Delivered) -> None:
        scope = delivered.applied.holding
        if self.pool.greenlets:
            # Greenlets switch only where they block, and nothing between the gate's
            # check and its hold blocks: the gate opens here as safely as on the loop,
            # and the report can say so before the loop matches the consumers.
            self.gate.hold_to(scope, delivered.applied.limits)
            if self.gate.held_requests():
                release = threading.Thread(target=self._release, name="celery-pause-release")
                release.daemon = True
                release.start()
        elif scope:
            self.gate.close(scope)
        self.consumer.call_soon(self._apply_latest)

    def fence(self) -> None:
        """From any thread: the lease ran out; hold every task until a read works."""
        fenced = self.state.fence()
        if fenced is None:
            return
        self.gate.close(EVERYTHING)
        logger.error(
            "celery-pause: no read of %s has worked for %gs (pause_lease): holding every "
            "task until one does",
            self.store.display_url,
            self.config.lease,
        )
        self.consumer.call_soon(self._apply_latest)

    def return_expired(self) -> None:
        """From the sync thread: return expired held tasks on the loop, once."""
        if not self._return_scheduled:
            self._return_scheduled = True
            self.consumer.call_soon(self._return_expired)

    def pump(self) -> None:
        """From the sync thread: start the tasks the ramps and limits allow now, on the loop,
        once; on green pools at once, in a greenlet of its own (their loop runs handed-over
        work only every ``pause_green_loop_wait``: past a start time's lateness), as
        :meth:`deliver` hands held tasks on."""
        if self._pump_scheduled:
            return
        self._pump_scheduled = True
        if self.pool.greenlets:
            pump = threading.Thread(target=self._pump, name="celery-pause-pump", daemon=True)
            pump.start()
        else:
            self.consumer.call_soon(self._pump)

    def _wake(self) -> None:
        self.sync.publish_now()

    # -- state changes ----------------------------------------------------------------
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
        delivered = self.state.unapplied()
        if delivered is not None:
            self.apply(delivered.applied, as_of=delivered.as_of)

    def apply(self, applied: Applied, *, as_of: float | None = None) -> None:
        """On the consumer loop: match consumers, gate and held tasks to ``applied``, the
        pause as read at store time ``as_of``."""
        c = self.consumer
        scope = applied.scope
        last = self.state.applied
        previous = last.scope if last else NOTHING
        self.gate.hold_to(applied.holding, applied.limits)
        self.parking.under(self.state.holds)
        self.unparking.wake()
        self._match_consumers(applied.holding)
        semaphore = getattr(c.controller, "semaphore", None)
        if semaphore is not None:
            take_waiters(self.gate, semaphore)
        drained = self.gate.return_drained()
        if drained:
            logger.info("celery-pause: returned %d task(s) of drained queues", drained)
        self.gate.release()
        self.gate.pump()
        before = _throttles(self.state.applied)
        self.state.mark_applied(applied, as_of=as_of)
        self.sync.publish_now()
        if scope != previous:
            self._tell(applied, previous)
        if applied.announced and applied.announced != (last.announced if last else NOTHING):
            logger.info(
                "celery-pause: holding %s: a pause being written", applied.announced.describe()
            )
        throttles = _throttles(applied)
        if throttles != before:
            limits = "; ".join(hold.describe() for hold in throttles) or "none"
            logger.warning("celery-pause: generation %d: limits: %s", applied.generation, limits)
            self._send(
                signals.worker_limited,
                generation=applied.generation,
                limits=throttles,
                previous=before,
            )

    def _match_consumers(self, scope: Scope | None = None) -> None:
        """On the consumer loop: consume every queue but those paused here (``scope``,
        else what the gate holds) and those a limit keeps a backlog of in the gate."""
        c = self.consumer
        if c.task_consumer is None:
            return
        scope = self.gate.scope if scope is None else scope
        backed_up = self.gate.pacing.backed_up
        # A queue listed but not consumed yet (in start(), before the loop's first consume):
        # cancel it if paused, so that first consume fetches nothing to hold; otherwise leave
        # it to that consume (from here, deliveries could beat the loop's callback).
        listed = {queue.name for queue in c.task_consumer.queues}
        for name in self.state.consumed:
            if name in backed_up or scope.covers(Target(queue=name, worker=c.hostname)):
                if name in listed:
                    c.cancel_task_queue(name)
            elif name not in listed:
                c.add_task_queue(name)

    def _tell(self, applied: Applied, previous: Scope) -> None:
        generation, scope, holds = applied.generation, applied.scope, self.state.holds
        by = "; ".join(hold.describe() for hold in holds) or "no hold"
        if scope:
            logger.warning(
                "celery-pause: generation %d: paused %s (%s)", generation, scope.describe(), by
            )
        else:
            logger.warning("celery-pause: generation %d: resumed all queues", generation)
        signal = signals.worker_paused if scope else signals.worker_resumed
        self._send(signal, generation=generation, scope=scope, previous=previous, holds=holds)

    def _send(self, signal: Signal, **fields: Any) -> None:
        """Send ``signal`` from this worker; a receiver that fails is logged, never raised."""
        for receiver, result in signal.send_robust(sender=self.consumer, **fields):
            if isinstance(result, Exception):
                logger.error("celery-pause: %r failed on %s: %r", receiver, signal.name, result)

    def _pump(self) -> None:
        self._pump_scheduled = False
        self.gate.pump()

    def _return_expired(self) -> None:
        self._return_scheduled = False
        returned = self.gate.return_expired(self.config.max_hold)
        if returned:
            logger.info(
                "celery-pause: moved %d task(s) held over %gs to the broker (parked or returned)",
                returned,
                self.config.max_hold,
            )


def _throttles(applied: Applied | None) -> tuple[Hold, ...]:
    """The limits ``applied`` paces but ramps (a ramp is told as the resume it is)."""
    return tuple(hold for hold in applied.limits if not hold.ramp) if applied else ()
