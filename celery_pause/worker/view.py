"""What one worker knows about its pause: a picture the probes, metrics and warnings read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from ..model.ramp import Ramp
from ..model.scope import Scope, Target
from ..model.state import BREAKER_PREFIX, Hold


@dataclass
class GateCounters:
    """What the gate did, for metrics."""

    held: int = 0
    released: int = 0
    returned: int = 0


@dataclass(frozen=True)
class InFlight:
    """A reserved request the gate does not hold: it may be running."""

    id: str
    name: str
    target: Target | None
    """Where it stands; ``None`` when the reserved requests could not be read (then it
    stands for every request, in every scope)."""

    def within(self, scope: Scope) -> bool:
        """Whether it is in ``scope`` (not empty)."""
        return bool(scope) and (self.target is None or scope.covers(self.target))


@dataclass(frozen=True)
class GateFigures:
    """What the gate holds and did, at one moment."""

    scope: Scope
    """What the gate holds to."""
    held: int
    waiting: int
    """Requests waiting for their ramp or limit."""
    oldest: float | None
    """``time.monotonic()`` since which the oldest request the gate keeps (held, or waiting
    for its ramp or limit) is kept: ``pause_max_hold`` returns it to the broker."""
    held_by_task: dict[str, int]
    counters: GateCounters


@dataclass(frozen=True)
class WorkerView:
    """A consistent picture of one worker's pause, taken at store time ``now`` (as estimated)."""

    hostname: str
    now: float
    connected: bool
    applied: bool
    generation: int
    scope: Scope
    consumed: tuple[str, ...]
    holds: tuple[Hold, ...]
    scheduled: tuple[Hold, ...]
    """Holds that start later, as the worker last read them (windows' next occurrences too)."""
    since: float | None
    held: int
    counters: GateCounters
    held_by_task: dict[str, int]
    transitions: dict[str, int]
    breakers: dict[str, bool]
    store_ok: bool
    loop_idle: float
    busy: bool
    pool: str = ""
    """The worker's execution pool."""
    pool_problem: str = ""
    """Why the pause cannot be guaranteed on that pool; empty when it can."""
    ramps: tuple[Ramp, ...] = ()
    """The ramped resumes in force on this worker."""
    ramping: int = 0
    """Requests waiting for a ramp's rate."""

    @property
    def paused_queues(self) -> tuple[str, ...]:
        """The queues this worker consumes and holds every task of now."""
        return tuple(
            q for q in self.consumed if self.scope.covers(Target(queue=q, worker=self.hostname))
        )

    @property
    def paused(self) -> bool:
        """Whether the worker holds some task of a queue it consumes."""
        if not self.consumed:
            return bool(self.scope)
        return any(self.scope.touches(Target(queue=q, worker=self.hostname)) for q in self.consumed)

    @property
    def fully_paused(self) -> bool:
        """Whether this worker starts no task at all."""
        if not self.consumed:
            return self.scope.covers(Target(worker=self.hostname)) and self.scope.everything
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
            if h.scope.for_worker(self.hostname)
            and (not self.consumed or any(h.scope.touches(Target(queue=q)) for q in self.consumed))
        )


class Observed(Protocol):
    """A worker's monitor, as the HTTP endpoint sees it."""

    def view(self) -> WorkerView:
        """What the worker's pause looks like now."""

    def liveness(self) -> tuple[bool, str]:
        """Whether the worker is alive (paused or not), and why not."""


def breakers_in(holds: tuple[Hold, ...]) -> set[str]:
    """Names of the circuit breakers that own any of ``holds``."""
    return {h.source[len(BREAKER_PREFIX) :] for h in holds if h.source.startswith(BREAKER_PREFIX)}


def _unique(values: Any) -> str:
    seen: list[str] = []
    for value in values:
        if value and value not in seen:
            seen.append(value)
    return "; ".join(seen)
