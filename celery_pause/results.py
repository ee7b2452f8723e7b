"""What the Python API returns: a recorded pause, a resume, and the cluster's status."""

from __future__ import annotations

from dataclasses import dataclass

from .report import WorkerReport
from .scope import Scope
from .state import Hold, PauseState


@dataclass(frozen=True)
class PauseResult:
    """A recorded pause, and the workers that confirmed it when waited for."""

    hold: Hold
    generation: int
    replaced: tuple[Hold, ...]
    workers: tuple[WorkerReport, ...] = ()
    warnings: tuple[str, ...] = ()
    """Names in the scope that match no known task or live worker (recorded all the same)."""


@dataclass(frozen=True)
class ResumeResult:
    """The holds removed, and those that still pause some of the queues asked for."""

    removed: tuple[Hold, ...]
    remaining: tuple[Hold, ...]
    generation: int


@dataclass(frozen=True)
class ClusterStatus:
    """Holds, the paused scope, and every live worker's report."""

    state: PauseState
    now: float
    paused: Scope
    workers: tuple[WorkerReport, ...]
    store: str

    @property
    def holds(self) -> tuple[Hold, ...]:
        return self.state.live_holds(self.now)
