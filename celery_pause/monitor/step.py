"""What one worker knows about its pause, for probes, metrics, events and warnings.

:class:`MonitorStep` comes along with :class:`~celery_pause.PauseStep`. It
reads the apply step's :class:`~celery_pause.worker.state.WorkerState`
(``c.pause_state``), listens to the :mod:`~celery_pause.signals` the apply step sends, turns each
change into a Celery event (``worker-paused`` / ``worker-resumed``, and
``worker-limited`` when the limits it applies change), counts
transitions, and warns at a bounded rate while a pause lasts longer than
``pause_warn_after``. Its :class:`~.view.WorkerView` is what the
HTTP endpoint serves (``c.pause_monitor``).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from celery import bootsteps
from celery.worker import state as worker_state
from celery.worker.consumer import Consumer
from celery.worker.consumer.events import Events

from .. import signals
from ..model.formatting import format_duration, format_time
from ..model.scope import Scope
from ..model.state import Hold
from ..settings import PauseConfig, config_for
from ..worker.apply import ApplyStep
from ..worker.snapshot import WorkerSnapshot
from ..worker.state import WorkerState
from .view import WorkerView, breakers_in

logger = logging.getLogger(__name__)

TICK = 1.0
"""Seconds between checks on the consumer loop (liveness, long-pause warnings)."""
PAUSED_EVENT = "worker-paused"
RESUMED_EVENT = "worker-resumed"
LIMITED_EVENT = "worker-limited"


@dataclass(eq=False)
class Monitor:
    """Follows one worker's pause: fed by the pause signals and a timer on the loop."""

    consumer: Consumer
    config: PauseConfig
    state: WorkerState
    connected: bool = False
    stopped: bool = False
    transitions: dict[str, int] = field(default_factory=lambda: {"pause": 0, "resume": 0})
    paused_at: float | None = None
    last_tick: float = field(default_factory=time.monotonic)
    warned_at: float | None = None
    breakers_seen: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        signals.worker_paused.connect(self.on_change, weak=False)
        signals.worker_resumed.connect(self.on_change, weak=False)
        signals.worker_limited.connect(self.on_limits, weak=False)

    def close(self) -> None:
        signals.worker_paused.disconnect(self.on_change)
        signals.worker_resumed.disconnect(self.on_change)
        signals.worker_limited.disconnect(self.on_limits)

    # -- on the consumer loop -----------------------------------------------------------
    def on_change(
        self,
        sender: Any = None,
        *,
        generation: int,
        scope: Scope,
        previous: Scope,
        holds: tuple[Hold, ...],
        **kwargs: Any,
    ) -> None:
        """A pause signal: count it, remember when, send the Celery event."""
        if sender is not self.consumer:
            return
        paused = bool(scope)
        with self._lock:
            self.transitions["pause" if paused else "resume"] += 1
            if paused and not previous:
                self.paused_at = self.state.clock.now()
            elif not paused:
                self.paused_at = None
                self.warned_at = None
            self.breakers_seen.update(breakers_in(holds))
        self.send_event(
            PAUSED_EVENT if paused else RESUMED_EVENT,
            pause_generation=generation,
            paused_queues=scope.names() if paused else [],
            previous_paused_queues=previous.names() if previous else [],
            pause_holds=[hold.to_json() for hold in holds],
        )

    def on_limits(
        self,
        sender: Any = None,
        *,
        generation: int,
        limits: tuple[Hold, ...],
        previous: tuple[Hold, ...],
        **kwargs: Any,
    ) -> None:
        """A limit signal: send the Celery event."""
        if sender is not self.consumer:
            return
        self.send_event(
            LIMITED_EVENT,
            pause_generation=generation,
            pause_limits=[hold.to_json() for hold in limits],
            previous_pause_limits=[hold.to_json() for hold in previous],
        )

    def send_event(self, type_: str, **fields: Any) -> None:
        """Send a custom Celery event, if this worker sends events."""
        dispatcher = getattr(self.consumer, "event_dispatcher", None)
        if dispatcher is None or not dispatcher.enabled:
            return
        try:
            dispatcher.send(type_, **fields)
        except Exception as exc:
            logger.warning("celery-pause: could not send the %s event: %r", type_, exc)

    def tick(self) -> None:
        """Every second on the loop: prove it runs, and warn about a long pause."""
        self.last_tick = time.monotonic()
        warn_after = self.config.warn_after
        if warn_after is None:
            return
        snapshot = self.state.snapshot(tasks=False)
        if not snapshot.gate.scope:
            return  # nothing is held: nothing to warn about
        view = self._view(snapshot)
        if not view.paused or view.paused_seconds < warn_after:
            return
        if self.warned_at is not None and self.last_tick - self.warned_at < self.config.warn_every:
            return
        self.warned_at = self.last_tick
        reason, by = view.hold_summary()
        logger.warning(
            "celery-pause: %s paused for %s (since %s, by %s, reason: %s); "
            "resume when it is over: celery -A %s resume",
            ", ".join(view.paused_queues) or view.scope.describe(),
            format_duration(view.paused_seconds),
            format_time(view.since or view.now),
            by or "unknown",
            reason or "none given",
            self.consumer.app.main or "proj",
        )

    # -- from any thread ----------------------------------------------------------------
    def view(self) -> WorkerView:
        """What the worker's pause looks like now."""
        return self._view(self.state.snapshot(tasks=False))

    def _view(self, snapshot: WorkerSnapshot) -> WorkerView:
        with self._lock:
            transitions = dict(self.transitions)
            paused_at = self.paused_at
            seen = set(self.breakers_seen)
        return WorkerView.of(
            snapshot,
            now=self.state.clock.now(),
            connected=self.connected and not self.stopped,
            transitions=transitions,
            breakers_seen=seen,
            paused_at=paused_at,
            loop_idle=time.monotonic() - self.last_tick,
            busy=bool(worker_state.active_requests),
        )

    def liveness(self) -> tuple[bool, str]:
        """Whether the worker is alive (paused or not), and why not."""
        if self.stopped:
            return False, "the worker is shutting down"
        idle = time.monotonic() - self.last_tick
        stalled = self.connected and idle > self.config.health_stall_after
        if stalled and not worker_state.active_requests:
            return False, f"the consumer loop has not run for {idle:.0f}s"
        return True, ""


class MonitorStep(bootsteps.StartStopStep):
    """Events and long-pause warnings for the apply step; the picture the probes serve."""

    label = "celery-pause-monitor"
    # Classes, not names: Celery resolves names only for the steps it was given.
    # It reads c.event_dispatcher (Events) and c.pause_state (ApplyStep).
    requires = (Events, ApplyStep)

    def __init__(self, c: Consumer, **kwargs: Any) -> None:
        super().__init__(c, **kwargs)
        self.config = config_for(c.app)
        self.monitor = Monitor(consumer=c, config=self.config, state=c.pause_state)
        c.pause_monitor = self.monitor
        self._tick: Any = None

    def start(self, c: Consumer) -> None:
        self.monitor.connected = True
        self.monitor.tick()
        self._tick = c.timer.call_repeatedly(TICK, self.monitor.tick)

    def stop(self, c: Consumer) -> None:
        self.monitor.connected = False
        if self._tick is not None:
            c.timer.cancel(self._tick)
            self._tick = None

    def shutdown(self, c: Consumer) -> None:
        self.stop(c)
        self.monitor.stopped = True
        self.monitor.close()
