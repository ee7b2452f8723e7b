"""A frozen picture of one worker's pause, and the three answers derived from it.

:class:`~.state.WorkerState` takes it; :meth:`WorkerSnapshot.describe` is the
``inspect pause_state`` answer, :meth:`WorkerSnapshot.report` the report the store
thread publishes, :meth:`WorkerSnapshot.view` what the probes and metrics serve.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..model.report import APPLIED, STARTING, WorkerReport
from ..model.scope import EVERYTHING, NOTHING, Scope, Target
from ..model.state import Hold
from .figures import GateFigures, InFlight
from .pools import PoolSupport


@dataclass(frozen=True)
class Applied:
    """A generation of the pause state, the scope it pauses on this worker, and the
    limits in force on it."""

    generation: int
    scope: Scope
    limits: tuple[Hold, ...] = ()
    announced: Scope = NOTHING
    """What pauses announced but not read yet hold too (:func:`~celery_pause.control.announce`)."""

    @property
    def holding(self) -> Scope:
        """What the gate holds: the scope paused and the scope announced."""
        return self.scope | self.announced if self.announced else self.scope


NOT_APPLIED = Applied(-1, NOTHING)
"""What a worker that has applied no state yet answers."""
UNREAD = Applied(-1, EVERYTHING)
"""What a worker applies while it cannot read the store (at start, or once its lease ran
out): every task held."""


@dataclass(frozen=True)
class Delivered:
    """The newest state read that changes what the worker applies."""

    applied: Applied
    as_of: float
    """Store time of that read."""


@dataclass(frozen=True)
class WorkerSnapshot:
    """What one worker has applied and read, and what its gate holds, at one moment."""

    hostname: str
    pool: PoolSupport
    applied: Applied | None
    """What the consumer loop applied; ``None`` before the first."""
    enforced: Applied | None
    """What the gate holds to: on green pools the newest state read (the store greenlet
    sets the gate itself), elsewhere what the loop applied."""
    holds: tuple[Hold, ...]
    """The active holds, as last read."""
    scheduled: tuple[Hold, ...]
    """The holds that start later (with the windows' next occurrences), as last read."""
    as_of: float
    """Store time of the newest read whose scope is applied (see ``WorkerReport.as_of``)."""
    breakers: tuple[str, ...]
    """Circuit breakers whose agent runs on this worker."""
    consumed: tuple[str, ...]
    """The queues the worker consumes (empty before it started)."""
    listening: tuple[str, ...]
    """The queues its consumer consumes now: those it consumes less the ones it stopped for a
    hold, plus any an operator added since (``celery control add_consumer``)."""
    store_ok: bool
    """Whether the last read of the store worked."""
    gate: GateFigures
    in_flight: tuple[InFlight, ...]
    """Reserved requests the gate does not hold (taken only while something is paused)."""
    store_now: float
    """The store's clock when it was taken, as this worker estimates it."""
    active: int = 0
    """Tasks running, in a paused scope or not (Celery's active requests)."""
    reserved: int = 0
    """Tasks received and not finished: running, waiting for a slot, or held."""
    lease: float | None = 0.0
    """The worker's ``pause_lease`` in force (``None``: it never fences)."""

    def running(self, scope: Scope | None) -> tuple[InFlight, ...]:
        """The requests of ``scope`` that may be running."""
        if not scope:
            return ()
        return tuple(task for task in self.in_flight if task.within(scope))

    def describe(self) -> dict[str, Any]:
        """What this worker applies, holds and runs in scope (``inspect pause_state``)."""
        applied = self.applied or NOT_APPLIED
        mine = self.hostname
        return {
            "generation": applied.generation,
            "scope": applied.scope.to_json(),
            "announced": applied.announced.to_json(),
            "holds": [h.to_json() for h in self.holds if h.scope.for_worker(mine)],
            "scheduled": [h.to_json() for h in self.scheduled if h.scope.for_worker(mine)],
            "held": dict(self.gate.held_by_task),
            "running": [{"id": t.id, "name": t.name} for t in self.running(applied.scope)],
            "limits": [h.to_json() for h in applied.limits],
            "waiting": self.gate.waiting,
        }

    def report(self, *, seen: float, starting: bool = False) -> WorkerReport:
        """The report the store thread publishes: as ``starting`` (before the first read)
        or as applying :attr:`enforced`, written at store time ``seen``."""
        enforced = None if starting else self.enforced
        tasks = self.running(enforced.scope) if enforced is not None else ()
        queues = None if enforced is None else enforced.scope.names()
        return WorkerReport(
            hostname=self.hostname,
            pid=os.getpid(),
            status=STARTING if enforced is None else APPLIED,
            generation=-1 if enforced is None else enforced.generation,
            paused=None if queues is None else tuple(queues),
            running=tuple(t.id for t in tasks),
            running_names=tuple(t.name for t in tasks),
            held=self.gate.held,
            active=self.active,
            reserved=self.reserved,
            waiting=self.gate.waiting,
            seen=seen,
            breakers=self.breakers,
            pool=self.pool.name,
            pool_problem=self.pool.problem,
            as_of=self.as_of,
            readded=self.readded(enforced.scope if enforced is not None else None),
            lease=self.lease,
        )

    def readded(self, scope: Scope | None) -> tuple[str, ...]:
        """Queues ``scope`` holds whole that the consumer consumes all the same: an operator
        added a consumer while paused, so their messages are fetched to wait in the gate."""
        if not scope:
            return ()
        return tuple(
            q for q in self.listening if scope.covers(Target(queue=q, worker=self.hostname))
        )
