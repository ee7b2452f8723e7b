"""The in-worker gate: the one place a task request passes on its way to the pool.

It wraps the consumer's ``on_task_request``, which every path to the pool goes
through: freshly received messages, ETA tasks falling due, rate-limited tasks.
While a request is in the paused scope the gate holds it (unacknowledged) instead
of passing it on; held requests go on to the pool on resume, or back to the broker
once held for ``max_hold`` seconds. Each held message widens the channel's prefetch
window by one, as Celery does for the ETA tasks it keeps, so held tasks never stop
the rest of their queue. A request of a queue the worker is drained from (a
worker-scoped hold) goes back to the broker at once, for other workers to run.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from celery.worker import state as worker_state
from celery.worker.request import Request

from ..scope import NOTHING, Scope
from ..view import GateCounters

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
    ) -> None:
        self._handler = handler
        self._queue_of = queue_of
        self.hostname = hostname
        self._qos = qos
        """The consumer's current prefetch controller (kombu ``QoS``), or ``None``."""
        self.scope: Scope = NOTHING
        self.held: list[tuple[Request, float]] = []
        self.counters = GateCounters()
        self.admit: Callable[[Request], bool] | None = None
        """Hook: requests it returns true for pass although their queue is paused
        (a circuit breaker's trial tasks)."""

    def __call__(self, request: Request) -> Any:
        if self.blocks(request):
            if self.drains(request):
                self._return([request])
            else:
                self._hold(request)
            return None
        return self._handler(request)

    def _hold(self, request: Request) -> None:
        self.held.append((request, time.monotonic()))
        self.counters.held += 1
        qos = self._qos()
        if qos is not None:
            qos.increment_eventually()

    def _unhold(self, count: int) -> None:
        qos = self._qos()
        if qos is not None and count:
            qos.decrement_eventually(count)

    def blocks(self, request: Request) -> bool:
        if not (
            self.scope and self.scope.covers(self._queue_of(request), request.name, self.hostname)
        ):
            return False
        return self.admit is None or not self.admit(request)

    def drains(self, request: Request) -> bool:
        """Whether this worker is taken off the request's queue by a worker-scoped hold."""
        return self.scope.drains(self._queue_of(request), self.hostname)

    def return_drained(self) -> int:
        """Return to the broker every held request of a queue this worker is drained from."""
        drained = [req for req, _ in self.held if self.drains(req)]
        if drained:
            self.held = [(req, since) for req, since in self.held if not self.drains(req)]
            self._unhold(len(drained))
            self._return(drained)
        return len(drained)

    def held_by_task(self) -> dict[str, int]:
        """How many requests the gate holds, per task name."""
        return dict(Counter(req.name for req, _ in self.held))

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

    def release(self) -> int:
        """Pass on, in arrival order, every held request whose queue is no longer paused."""
        ready = [(req, since) for req, since in self.held if not self.blocks(req)]
        if not ready:
            return 0
        self.held = [(req, since) for req, since in self.held if self.blocks(req)]
        self._unhold(len(ready))
        for request, _ in ready:
            self._handler(request)
        self.counters.released += len(ready)
        return len(ready)

    def return_expired(self, max_hold: float) -> int:
        """Return to the broker every request held longer than ``max_hold`` seconds."""
        deadline = time.monotonic() - max_hold
        expired = [req for req, since in self.held if since <= deadline]
        if expired:
            self.held = [(req, since) for req, since in self.held if since > deadline]
            self._unhold(len(expired))
            self._return(expired)
        return len(expired)

    def return_all(self) -> int:
        """Return every held request to the broker (warm shutdown)."""
        requests = [req for req, _ in self.held]
        self.held = []
        self._unhold(len(requests))
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
        """``(id, task name)`` of reserved requests in ``scope`` that the gate does not hold."""
        if not scope:
            return []
        held = {id(req) for req, _ in self.held}
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
            if id(req) not in held and scope.covers(self._queue_of(req), req.name, self.hostname)
        )
