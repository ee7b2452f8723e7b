"""The in-worker gate: the one place a task request passes on its way to the pool.

It wraps the consumer's ``on_task_request``, which every path to the pool goes
through: freshly received messages, ETA tasks falling due, rate-limited tasks.
While a request is in the paused scope the gate holds it (unacknowledged) instead
of passing it on; held requests go on to the pool on resume, or back to the broker
once held for ``max_hold`` seconds. Each held message widens the channel's prefetch
window by one, as Celery does for the ETA tasks it keeps, so held tasks never stop
the rest of their queue. A request of a queue the worker is drained from (a
worker-scoped hold) goes back to the broker at once, for other workers to run.

On pools that start tasks in the worker process (threads, gevent, eventlet) the
pool asks the gate once more at the moment it would start a task
(:meth:`Gate.starts`, from a pool thread or greenlet); ``held`` and ``scope``
change under one lock, so a task either starts before a pause closes the gate
(and is reported running) or is held. (On gevent and eventlet, where greenlets
switch only where they block, an open gate's check takes no lock.)

While a ramped resume runs (:mod:`celery_pause.model.ramp`), a request of its scope waits in
the gate until the worker's share of the ramp's rate lets it start (:meth:`Gate.pump`);
waiting requests do not widen the prefetch window, so a worker fetches no more than
its window while the ramp holds it back.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from bisect import insort
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from celery.worker import state as worker_state
from celery.worker.request import Request

from ..model.ramp import Share
from ..model.scope import NOTHING, Scope, Target
from .view import GateCounters

logger = logging.getLogger(__name__)

QueueOf = Callable[[Request], str]


class Gate:
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
    ) -> None:
        self._handler = handler
        self._queue_of = queue_of
        self.hostname = hostname
        self._qos = qos
        """The consumer's current prefetch controller (kombu ``QoS``), or ``None``."""
        self._lock = threading.Lock()
        self._scope: Scope = NOTHING
        self.held: list[tuple[Request, float]] = []
        self.counters = GateCounters()
        self.admit: Callable[[Request], bool] | None = None
        """Hook: requests it returns true for pass although their queue is paused
        (a circuit breaker's trial tasks)."""
        self.start_check = start_check
        """Whether the pool asks :meth:`starts` before each task: then only the
        requests it let start count as running."""
        self.greenlets = greenlets
        """Whether every thread of the worker is a greenlet (see ``PoolSupport.greenlets``)."""
        self._started: weakref.WeakSet[Request] = weakref.WeakSet()
        self.ramps: tuple[Share, ...] = ()
        """This worker's shares of the ramped resumes in force (set on the consumer loop)."""
        self.waiting: list[tuple[Request, float]] = []
        """Requests let through by the pause, waiting for their ramp, in arrival order."""
        self.clock: Callable[[], float] = time.time
        """The store's clock, as this worker estimates it."""
        self.on_wait: Callable[[], None] = lambda: None
        """Called when a request starts waiting for its ramp and none waited before."""

    @property
    def scope(self) -> Scope:
        """What the gate holds."""
        return self._scope

    @scope.setter
    def scope(self, scope: Scope) -> None:
        with self._lock:
            self._scope = scope

    def __call__(self, request: Request) -> Any:
        # On the consumer loop, where alone a scope opens (on green pools also the store
        # greenlet, but greenlets switch only where they block): no lock needed to decide.
        if not (self._scope.rules or self.ramps):  # every task passes this way: keep it short
            return self._handler(request)
        if self.blocks(request):
            if self.drains(request):
                self._return([request])
                return None
            with self._lock:
                self._hold(request)
            return None
        if self._waits(request, time.monotonic()):
            return None
        return self._handler(request)

    def _waits(self, request: Request, since: float) -> bool:
        """Whether ``request`` must wait for its ramp (it then waits in the gate)."""
        if not self.ramps or (not self.waiting and self._ramp_allows(request)):
            return False
        self.waiting.append((request, since))
        if len(self.waiting) == 1:
            self.on_wait()
        return True

    def _ramp_allows(self, request: Request) -> bool:
        """Whether every ramp covering ``request`` lets one more task start now."""
        target, now = self.target(request), self.clock()
        shares = [s for s in self.ramps if s.ramp.scope.covers(target)]
        return all([share.take(now) for share in shares])

    def pump(self) -> int:
        """On the consumer loop: start the waiting requests their ramps allow now, in
        arrival order; hold those a pause has closed the gate on since."""
        now = self.clock()
        self.ramps = tuple(share for share in self.ramps if share.ramp.live(now))
        waiting, self.waiting = self.waiting, []
        starting, drained = [], []
        with self._lock:
            for request, since in waiting:
                if self.blocks(request):
                    if self.drains(request):
                        drained.append(request)
                    else:
                        self._hold(request, since)
                elif self._ramp_allows(request):
                    starting.append(request)
                else:
                    self.waiting.append((request, since))
        self._return(drained)
        for request in starting:
            self._handler(request)
        self.counters.released += len(starting)
        return len(starting)

    def next_ramp_start(self) -> float | None:
        """Store time the next waiting request may start, if any waits."""
        if not self.waiting:
            return None
        return min((share.next_start() for share in self.ramps), default=self.clock())

    def _hold(self, request: Request, since: float | None = None) -> None:
        """Hold ``request`` (under the lock) in arrival order; ``since`` when held before."""
        if since is None:
            since = time.monotonic()
            self.counters.held += 1
        insort(self.held, (request, since), key=_since)
        qos = self._qos()
        if qos is not None:
            qos.increment_eventually()

    def _unhold(self, count: int) -> None:
        """``count`` held requests left the gate: narrow the prefetch window again."""
        qos = self._qos()
        if qos is not None and count:
            qos.decrement_eventually(count)

    def starts(self, request: Request, *, was_reserved: bool = True) -> bool:
        """In the pool, just before ``request`` would start: whether it may start now.

        No when its scope is paused (the gate holds it from now on), or when the
        worker dropped it after its broker connection was lost (the broker
        delivers it again). Neither runs it nor acknowledges its message.
        """
        if was_reserved and request not in worker_state.reserved_requests:
            logger.info(
                "celery-pause: task %s is from a lost connection: left to the broker", request.id
            )
            return False
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

    def target(self, request: Request) -> Target:
        """Where ``request`` stands in every dimension of a scope."""
        return Target(queue=self._queue_of(request), task=request.name, worker=self.hostname)

    def blocks(self, request: Request) -> bool:
        scope = self._scope
        if not (scope and scope.covers(self.target(request))):
            return False
        return self.admit is None or not self.admit(request)

    def drains(self, request: Request) -> bool:
        """Whether this worker is taken off the request's queue by a worker-scoped hold."""
        return self._scope.drains(self._queue_of(request), self.hostname)

    def return_drained(self) -> int:
        """Return to the broker every held request of a queue this worker is drained from."""
        with self._lock:
            drained = [req for req, _ in self.held if self.drains(req)]
            if drained:
                self.held = [(req, since) for req, since in self.held if not self.drains(req)]
                self._unhold(len(drained))
        self._return(drained)
        return len(drained)

    def held_by_task(self) -> dict[str, int]:
        """How many requests the gate holds, per task name."""
        return dict(Counter(req.name for req, _ in list(self.held)))

    def take_waiters(self, semaphore: Any) -> int:
        """Move requests of paused queues waiting for a pool slot into the gate.

        The semaphore is kombu's ``LaxBoundedSemaphore``: its waiters are
        ``(callback, args, kwargs)`` entries in a deque that must be edited in place.
        """
        waiting = getattr(semaphore, "_waiting", None)
        if not waiting:
            return 0
        keep = []
        taken = 0
        with self._lock:
            for entry in list(waiting):
                _, args, _ = entry
                request = args[0] if args else None
                if isinstance(request, Request) and self.blocks(request):
                    self._hold(request)
                    taken += 1
                else:
                    keep.append(entry)
        if taken:
            waiting.clear()
            waiting.extend(keep)
        return taken

    def release(self, *, off_loop: bool = False) -> int:
        """Pass on, in arrival order, every held request whose queue is no longer paused.

        ``off_loop``: called in another greenlet than the consumer's (green pools), where
        the worker may drop a request meanwhile (its broker connection was lost while
        this waited for a pool slot): such a request is left to the broker, which
        delivers it again.
        """
        with self._lock:
            ready = [(req, since) for req, since in self.held if not self.blocks(req)]
            if not ready:
                return 0
            self.held = [(req, since) for req, since in self.held if self.blocks(req)]
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
                self._handler(request)
                passed += 1
        self.counters.released += passed
        return passed

    def return_expired(self, max_hold: float) -> int:
        """Return to the broker every request held longer than ``max_hold`` seconds."""
        deadline = time.monotonic() - max_hold
        with self._lock:
            expired = [req for req, since in self.held if since <= deadline]
            if expired:
                self.held = [(req, since) for req, since in self.held if since > deadline]
                self._unhold(len(expired))
            waited = [req for req, since in self.waiting if since <= deadline]
            if waited:
                self.waiting = [(req, since) for req, since in self.waiting if since > deadline]
        self._return(expired + waited)
        return len(expired) + len(waited)

    def return_all(self) -> int:
        """Return every held request to the broker (warm shutdown)."""
        with self._lock:
            requests = [req for req, _ in self.held]
            self.held = []
            self._unhold(len(requests))
            requests += [req for req, _ in self.waiting]
            self.waiting = []
        self._return(requests)
        return len(requests)

    def _return(self, requests: Iterable[Request]) -> None:
        for request in requests:
            # Straight to the channel rather than ``request.reject``, which defers to
            # the event loop: at warm shutdown the loop no longer runs.
            if not request.acknowledged:
                try:
                    request.message.reject(requeue=True)
                except Exception as exc:  # channel gone: the broker redelivers unacked messages
                    logger.debug("celery-pause: task %s left to the broker: %r", request.id, exc)
                request.acknowledged = True
            worker_state.task_ready(request)
            self.counters.returned += 1

    def running(self, scope: Scope) -> list[str]:
        """Ids of reserved requests in ``scope`` that the gate does not hold."""
        return [task_id for task_id, _ in self.running_tasks(scope)]

    def running_tasks(self, scope: Scope) -> list[tuple[str, str]]:
        """``(id, task name)`` of requests in ``scope`` that may be running.

        Every reserved request the gate does not hold; with the start check, only
        those the pool was let start: the others will ask before they start.
        """
        if not scope:
            return []
        held = {id(req) for req, _ in list(self.held) + list(self.waiting)}
        for _ in range(5):
            try:
                reserved = tuple(worker_state.reserved_requests)
                break
            except RuntimeError:  # the loop thread changed the set while we copied it
                continue
        else:
            return [("<unknown>", "<unknown>")]
        return sorted(
            (req.id, req.name)
            for req in reserved
            if id(req) not in held
            and (not self.start_check or req in self._started)
            and scope.covers(self.target(req))
        )


def _since(entry: tuple[Request, float]) -> float:
    return entry[1]
