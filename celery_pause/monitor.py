"""What one worker knows about its pause, for probes, metrics, events and warnings.

:class:`MonitorStep` is a consumer bootstep that :class:`~celery_pause.PauseStep`
requires, so adding the pause step brings it along. It listens to the
:mod:`~celery_pause.signals` the pause step sends, turns each change into a
Celery event (``worker-paused`` / ``worker-resumed``), counts transitions, warns
at a bounded rate while a pause lasts longer than ``pause_warn_after``, and
serves ``/healthz``, ``/readyz`` and ``/metrics`` when ``pause_http_port`` is set.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from celery import bootsteps
from celery.worker import state as worker_state
from celery.worker.consumer import Consumer
from celery.worker.consumer.events import Events

from . import signals
from .conf import PauseConfig, config_for
from .gate import GateCounters
from .state import BREAKER_PREFIX, NOTHING, Hold, Scope, format_time

if TYPE_CHECKING:
    from .bootstep import PauseStep
    from .webserver import Server

logger = logging.getLogger(__name__)

TICK = 1.0
"""Seconds between checks on the consumer loop (liveness, long-pause warnings)."""
PAUSED_EVENT = "worker-paused"
RESUMED_EVENT = "worker-resumed"


@dataclass(frozen=True)
class WorkerView:
    """A consistent picture of one worker's pause, taken at ``now`` (local clock)."""

    hostname: str
    now: float
    connected: bool
    applied: bool
    generation: int
    scope: Scope
    consumed: tuple[str, ...]
    holds: tuple[Hold, ...]
    since: float | None
    held: int
    counters: GateCounters
    transitions: dict[str, int]
    breakers: dict[str, bool]
    store_ok: bool
    loop_idle: float
    busy: bool

    @property
    def paused_queues(self) -> tuple[str, ...]:
        """The queues this worker consumes and holds now."""
        return tuple(q for q in self.consumed if self.scope.covers(q))

    @property
    def paused(self) -> bool:
        """Whether any queue this worker consumes is paused."""
        return bool(self.paused_queues) or (not self.consumed and bool(self.scope))

    @property
    def fully_paused(self) -> bool:
        """Whether this worker starts no task at all."""
        if not self.consumed:
            return self.scope.everything
        return len(self.paused_queues) == len(self.consumed)

    @property
    def paused_seconds(self) -> float:
        return max(0.0, self.now - self.since) if self.paused and self.since else 0.0

    def hold_summary(self) -> tuple[str, str]:
        """``(reason, paused_by)`` of the holds that pause this worker, joined."""
        holds = self.relevant_holds()
        reasons = _unique(h.reason for h in holds) or (
            "the pause state could not be read; holding every queue" if self.paused else ""
        )
        return reasons, _unique(h.paused_by for h in holds)

    def relevant_holds(self) -> tuple[Hold, ...]:
        """The live holds that cover a queue this worker consumes."""
        return tuple(
            h
            for h in self.holds
            if not self.consumed or any(h.scope.covers(q) for q in self.consumed)
        )


@dataclass(eq=False)
class Monitor:
    """Follows one worker's pause: fed by the pause signals and a timer on the loop."""

    consumer: Consumer
    config: PauseConfig
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

    @property
    def step(self) -> PauseStep | None:
        return getattr(self.consumer, "celery_pause", None)

    def close(self) -> None:
        signals.worker_paused.disconnect(self.on_change)
        signals.worker_resumed.disconnect(self.on_change)

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
                self.paused_at = time.time()
            elif not paused:
                self.paused_at = None
                self.warned_at = None
            self.breakers_seen.update(_breakers(holds))
        self.send_event(
            PAUSED_EVENT if paused else RESUMED_EVENT,
            pause_generation=generation,
            paused_queues=scope.names() if paused else [],
            previous_paused_queues=previous.names() if previous else [],
            pause_holds=[hold.to_json() for hold in holds],
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
        step = self.step
        if warn_after is None or step is None or not step.gate.scope:
            return  # nothing is held: nothing to warn about
        view = self.view()
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
        now = time.time()
        step = self.step
        applied = step.sync.applied if step is not None else None
        generation, scope = applied if applied is not None else (-1, NOTHING)
        holds = tuple(h for h in step.holds if h.live(now)) if step is not None else ()
        consumed = tuple(step.consumed or ()) if step is not None else ()
        with self._lock:
            transitions = dict(self.transitions)
            paused_at = self.paused_at
            seen = set(self.breakers_seen)
        open_breakers = _breakers(holds)
        view = WorkerView(
            hostname=self.consumer.hostname,
            now=now,
            connected=self.connected and not self.stopped,
            applied=applied is not None,
            generation=generation,
            scope=scope,
            consumed=consumed,
            holds=holds,
            since=None,
            held=len(step.gate.held) if step is not None else 0,
            counters=replace(step.gate.counters) if step is not None else GateCounters(),
            transitions=transitions,
            breakers={name: name in open_breakers for name in sorted(seen | open_breakers)},
            store_ok=step.sync.store_ok if step is not None else False,
            loop_idle=time.monotonic() - self.last_tick,
            busy=bool(worker_state.active_requests),
        )
        starts = [h.paused_at for h in view.relevant_holds() if h.paused_at]
        since = min(starts) if starts else paused_at
        return replace(view, since=since if view.paused else None)

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
    """Events, metrics, probes and long-pause warnings for the pause step."""

    label = "celery-pause-monitor"
    # A class, not a name: Celery resolves names only for the steps it was given.
    requires = (Events,)

    def __init__(self, c: Consumer, **kwargs: Any) -> None:
        super().__init__(c, **kwargs)
        self.config = config_for(c.app)
        self.monitor = Monitor(consumer=c, config=self.config)
        c.celery_pause_monitor = self.monitor
        self.server: Server | None = None
        self._serving_tried = False
        self._tick: Any = None

    def start(self, c: Consumer) -> None:
        self.monitor.connected = True
        self.monitor.tick()
        self._tick = c.timer.call_repeatedly(TICK, self.monitor.tick)
        if self.config.http_port is not None and not self._serving_tried:
            self._serving_tried = True
            from .probe import serve_probes

            self.server = serve_probes(self.monitor, self.config.http_host, self.config.http_port)

    def stop(self, c: Consumer) -> None:
        self.monitor.connected = False
        if self._tick is not None:
            c.timer.cancel(self._tick)
            self._tick = None

    def shutdown(self, c: Consumer) -> None:
        self.stop(c)
        self.monitor.stopped = True
        self.monitor.close()
        if self.server is not None:
            self.server.close()
            self.server = None


def format_duration(seconds: float) -> str:
    """``45s``, ``12m 05s``, ``3h 02m``, ``2d 04h``."""
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def _breakers(holds: tuple[Hold, ...]) -> set[str]:
    return {h.source[len(BREAKER_PREFIX) :] for h in holds if h.source.startswith(BREAKER_PREFIX)}


def _unique(values: Any) -> str:
    seen: list[str] = []
    for value in values:
        if value and value not in seen:
            seen.append(value)
    return "; ".join(seen)
