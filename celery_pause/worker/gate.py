"""The in-worker gate: the one place a task request passes on its way to the pool.

It wraps the consumer's ``on_task_request``, which every path to the pool goes through
(fresh messages, ETA tasks falling due, rate-limited tasks). A request in the paused scope,
or any once the worker's lease ran out (:meth:`Gate.renew`), is held unacknowledged; each
held message widens the prefetch window by one, as Celery does for ETA tasks, so the rest
of its queue flows. Past ``pause_max_held`` held requests the newest are parked on the
broker (:mod:`.parking`); held ones go on to the pool on resume, or are parked (else given
back) once held ``max_hold`` seconds. A request of a queue the worker is drained from (a
worker-scoped hold) goes back to the broker at once.

On pools that start tasks in the worker process (threads, gevent, eventlet) the pool asks
:meth:`Gate.starts` again as it would start a task; scope and held requests change under
one lock, so a task starts before a pause closes the gate (and is reported running) or is
held. Under a limit or ramp (:mod:`~celery_pause.limits.pacing`) a request of its scope
waits in the gate until a permit lets it start (:meth:`Gate.pump`).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from celery.worker import state as worker_state
from celery.worker.request import Request

from ..limits.pacing import Pacing
from ..model.content import text_of
from ..model.scope import EVERYTHING, NOTHING, Scope, label_names
from ..model.state import Hold
from .figures import GateCounters, GateFigures, InFlight, in_flight
from .holding import Holding
from .parking import Parking
from .reading import TargetReader

logger = logging.getLogger(__name__)

QueueOf = Callable[[Request], str]
Admits = Callable[[Request], bool]
"""A policy that lets a request of a paused scope pass (a circuit breaker's trials)."""


class Gate(Holding):
    """Holds requests from paused queues; lets every other request through untouched."""

    def __init__(
        self,
        handler: Callable[[Request], Any],
        queue_of: QueueOf,
        *,
        hostname: str = "",
        qos: Callable[[], Any] = lambda: None,
        start_check: bool = False,
        greenlets: bool = False,
        clock: Callable[[], float] = time.time,
        on_wait: Callable[[], None] = lambda: None,
        on_lapse: Callable[[], None] = lambda: None,
        backlog: int = 16,
        on_backlog: Callable[[], None] = lambda: None,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        """Wrap ``handler``, the consumer's task handler.

        Parameters:
            handler: The consumer's task handler the gate wraps.
            queue_of: The queue a request came from.
            hostname: The worker's name (for worker-scoped holds).
            qos: The consumer's current prefetch controller (kombu ``QoS``), or ``None``.
            start_check: Whether the pool asks :meth:`starts` before each task.
            greenlets: Whether the worker's threads are greenlets (``PoolSupport.greenlets``).
            clock: The store's clock, as this worker estimates it.
            on_wait: Called when a request starts waiting for its ramp and none waited before.
            on_lapse: Called when a request finds the lease (:meth:`renew`) ran out.
            backlog: Requests of a queue a limit covers whole that may wait (``Pacing``).
            on_backlog: Called when the queues to stop consuming for that change.
            labels: ``pause_labels``: each label name and the keyword argument it is read from.
        """
        self._handler = handler
        self._queue_of = queue_of
        self.hostname = hostname
        self.target = TargetReader(queue_of=queue_of, hostname=hostname, labels=labels or {})
        """Where a request stands in every dimension of a scope (never raises)."""
        self._qos = qos
        self._lock = threading.Lock()
        self._scope: Scope = NOTHING
        self._held: list[tuple[Request, float]] = []
        self.counters = GateCounters()
        self._admits: Admits | None = None
        self.start_check = start_check
        self.greenlets = greenlets
        self._started: weakref.WeakSet[Request] = weakref.WeakSet()
        self.pacing = Pacing(
            clock=clock,
            qos=qos,
            on_wait=on_wait,
            target=self.target,
            backlog=backlog,
            on_backlog=on_backlog,
            cost=self.target.cost,
        )
        """Requests let through by the pause that wait for their ramp or limit."""
        self.clock = clock
        self._on_lapse = on_lapse
        self._lease_end = float("inf")
        self.parking: Parking | None = None
        self.max_held = 0
        self._park_after = 0.0

    @property
    def scope(self) -> Scope:
        """What the gate holds."""
        return self._scope

    def hold_to(self, scope: Scope, limits: Iterable[Hold] = ()) -> None:
        """Hold exactly ``scope`` from now on, and pace the starts of ``limits`` (ramps
        too; on the consumer loop, on green pools also the store greenlet)."""
        limits = tuple(limits)
        paced = [hold.scope for hold in limits]
        per = {n for h in limits if h.limit for n in (h.limit.per, h.limit.fair) if n}
        with self._lock:
            self._scope = scope
            listed = set().union(*map(label_names, [scope, *paced]))
            self.target.names = tuple(sorted(listed | per))
        self.pacing.pace(limits)

    def close(self, scope: Scope) -> None:
        """Also hold ``scope`` from now on (from any thread: only the loop opens the gate)."""
        with self._lock:
            self._scope = self._scope | scope
            self.target.names = tuple(sorted(set(self.target.names) | label_names(scope)))

    def park_with(self, parking: Parking) -> None:
        """Park held requests past ``parking.max_held`` with ``parking`` (:mod:`.parking`)."""
        self.parking = parking if parking.enabled else None
        self.max_held = parking.max_held

    def renew(self, until: float) -> None:
        """What the worker read holds until ``time.monotonic()`` reaches ``until``, then all."""
        self._lease_end = until

    def _lapsed(self) -> None:
        """The lease ran out: hold everything from now on, and have the worker fence."""
        self._lease_end = float("inf")
        self.close(EVERYTHING)
        self._on_lapse()

    def admit_with(self, admits: Admits) -> None:
        """Let requests ``admits`` returns true for pass although their scope is paused."""
        self._admits = admits

    def __call__(self, request: Request) -> Any:
        # On the consumer loop, where alone a scope opens (on green pools also the store
        # greenlet, but greenlets switch only where they block): no lock needed to decide.
        if time.monotonic() >= self._lease_end:
            self._lapsed()
        if not (self._scope.rules or self.pacing.active):  # every task passes: keep it short
            return self._start(request)
        try:
            passes = self._admit(request)
        except Exception as exc:  # a defect must not stop the worker (Celery would, raised here)
            self.target.warn(request, "could not decide on it (%r): it goes on to the pool", exc)
            kept = [req for req, _ in [*self._held, *self.pacing.waiting]]
            passes = not any(req is request for req in kept)  # held or waiting: not twice
        return self._start(request) if passes else None

    def _start(self, request: Request) -> Any:
        """Hand ``request`` to the pool, once a moved copy claimed its task id."""
        try:
            if self.parking is not None and not self.parking.claims(request):
                return None
        except Exception as exc:  # the store failed: nothing known, hold it; asked again later
            self.target.warn(request, "cannot claim its task id (%r): held", exc)
            with self._lock:
                self._hold(request)
            return None
        return self._handler(request)

    def _admit(self, request: Request) -> bool:
        """Hold ``request``, return it (drained) or have it wait for its pace; whether it
        goes on to the pool now."""
        if self.blocks(request):
            if self.drains(request):
                self._return([request])
            else:
                with self._lock:
                    self._hold(request)
                if len(self._held) > self.max_held:
                    self._park_overflow()
            return False
        if self.parking is not None and self.parking.takes_turn(request, self.target):
            return False
        if not self._waits(request, time.monotonic()):
            return True
        if len(self.pacing.waiting) > self.max_held:
            self._park_overflow()
        return False

    def _waits(self, request: Request, since: float) -> bool:
        """Whether ``request`` must wait for its ramp or limit (it then waits in the gate)."""
        return self.pacing.active and self.pacing.waits(request, self.target(request), since)

    def pump(self) -> int:
        """On the consumer loop: start the waiting requests their ramps and limits allow
        now, in arrival order; hold those a pause has closed the gate on since."""
        with self._lock:
            starting, blocked = self.pacing.due(self.blocks)
            drained = [request for request, _ in blocked if self.drains(request)]
            for request, since in blocked:
                if not self.drains(request):
                    self._hold(request, since)
        self._return(drained)
        for request in starting:
            self._start(request)
        self.counters.released += len(starting)
        return len(starting)

    def starts(self, request: Request, *, was_reserved: bool = True) -> bool:
        """In the pool, just before ``request`` would start: whether it may start now. No
        when its scope is paused (held from now on), or when the worker dropped it after its
        broker connection was lost (the broker delivers it again)."""
        if was_reserved and request not in worker_state.reserved_requests:
            logger.info(
                "celery-pause: task %s is from a lost connection: left to the broker", request.id
            )
            return False
        if time.monotonic() >= self._lease_end:
            self._lapsed()
        if self.greenlets and not self._scope.rules:
            # Nothing is paused, and greenlets switch only where they block: no lock needed.
            self._started.add(request)
            return True
        with self._lock:
            if self._scope.rules and self.blocks(request):
                self._hold(request)
                return False
            self._started.add(request)
            return True

    def blocks(self, request: Request) -> bool:
        scope = self._scope
        if not (scope.rules and scope.covers(self.target(request))):
            return False
        if self._admits is None:
            return True
        try:
            return not self._admits(request)
        except Exception:  # a message the policy cannot read is not admitted: it is held
            return True

    def drains(self, request: Request) -> bool:
        """Whether this worker is taken off the request's queue by a worker-scoped hold."""
        return self._scope.drains(self._queue_of(request), self.hostname)

    def return_drained(self) -> int:
        """Return to the broker every held request of a queue this worker is drained from."""
        with self._lock:
            drained = [req for req, _ in self._held if self.drains(req)]
            if drained:
                self._held = [(req, since) for req, since in self._held if not self.drains(req)]
                self._unhold(len(drained))
        self._return(drained)
        return len(drained)

    def figures(self) -> GateFigures:
        """What the gate holds and did (how many held, since when, by task; how many
        wait for a ramp), taken at once."""
        with self._lock:
            held = list(self._held)
            waiting = list(self.pacing.waiting)
            scope = self._scope
        kept = [since for _, since in held[:1] + waiting]
        return GateFigures(
            scope=scope,
            held=len(held),
            waiting=len(waiting),
            oldest=min(kept, default=None),
            held_by_task=dict(Counter(text_of(req.name) for req, _ in held)),
            counters=replace(self.counters),
            adapted={p.id: (p.current, p.cut) for p in self.pacing.permits if p.limit.adaptive},
        )

    def take(self, request: Any) -> bool:
        """Hold ``request`` (given a pool slot, or waiting for one) if held now; whether it did."""
        if time.monotonic() >= self._lease_end:
            self._lapsed()
        if not (self._scope.rules and isinstance(request, Request)):
            return False
        with self._lock:
            if not self.blocks(request):
                return False
            self._hold(request)
            return True

    def release(self, *, off_loop: bool = False) -> int:
        """Pass on, in arrival order, every held request whose queue is no longer paused.

        ``off_loop``: in another greenlet than the consumer's (green pools), where the worker
        may drop a request meanwhile (its connection was lost): that one is left to the broker.
        """
        with self._lock:
            ready = [(req, since) for req, since in self._held if not self.blocks(req)]
            if not ready:
                return 0
            self._held = [(req, since) for req, since in self._held if self.blocks(req)]
            self._unhold(len(ready))
        passed = 0
        for request, since in ready:
            # Handing one on can block (a full green pool waits for a free slot):
            # a pause may have closed the gate again meanwhile.
            with self._lock:
                if self.blocks(request):
                    self._hold(request, since)
                    continue
            if off_loop and request not in worker_state.reserved_requests:
                continue
            if not self._waits(request, since):  # started later by pump(), counted there
                self._start(request)
                passed += 1
        self.counters.released += passed
        return passed

    def in_flight(self) -> tuple[InFlight, ...]:
        """The requests that may be running, by id: every reserved request the gate does not
        hold; with the start check, only those the pool was let start."""
        held = [req for req, _ in list(self._held) + list(self.pacing.waiting)]
        return in_flight(held, self.target, self._started if self.start_check else None)
