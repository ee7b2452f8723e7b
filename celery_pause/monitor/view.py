"""What one worker knows about its pause: the picture the probes, metrics and warnings read,
taken from the worker's :class:`~celery_pause.worker.snapshot.WorkerSnapshot`."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Protocol

from ..model.scope import Scope, Target
from ..model.state import BREAKER_PREFIX, Hold
from ..worker.snapshot import NOT_APPLIED, WorkerSnapshot


@dataclass(frozen=True)
class WorkerView:
    """A consistent picture of one worker's pause, taken at store time ``now`` (as estimated):
    its :attr:`snapshot`, and what the monitor adds."""

    snapshot: WorkerSnapshot
    now: float
    connected: bool
    """Whether the consumer is connected to the broker."""
    transitions: dict[str, int]
    """Changes applied so far, to ``pause`` and to ``resume``."""
    breakers: dict[str, bool]
    """Every breaker whose hold this worker applied once: whether its hold is live."""
    loop_idle: float
    """Seconds since the consumer loop last ran the monitor's timer."""
    busy: bool
    """Whether a task runs."""
    since: float | None = None
    """When the worker paused, while it does."""

    @classmethod
    def of(
        cls,
        snapshot: WorkerSnapshot,
        *,
        now: float,
        connected: bool,
        transitions: dict[str, int],
        breakers_seen: set[str],
        paused_at: float | None,
        loop_idle: float,
        busy: bool,
    ) -> WorkerView:
        """What the probes serve: ``snapshot``, with what the monitor adds.

        Parameters:
            now: The store time it is taken at (as the worker estimates it).
            breakers_seen: Every breaker whose hold this worker applied once.
            paused_at: When the worker paused, if no live hold says when.
        """
        live = breakers_in(tuple(h for h in snapshot.holds if h.live(now)))
        view = cls(
            snapshot=snapshot,
            now=now,
            connected=connected,
            transitions=dict(transitions),
            breakers={n: n in live for n in sorted(breakers_seen | live)},
            loop_idle=loop_idle,
            busy=busy,
        )
        if not view.paused:
            return view
        starts = [h.began for h in view.relevant_holds() if h.began]
        return replace(view, since=min(starts) if starts else paused_at)

    @property
    def hostname(self) -> str:
        return self.snapshot.hostname

    @property
    def applied(self) -> bool:
        """Whether the consumer loop applied a state yet."""
        return self.snapshot.applied is not None

    @property
    def generation(self) -> int:
        return (self.snapshot.applied or NOT_APPLIED).generation

    @property
    def scope(self) -> Scope:
        """What the worker applied."""
        return (self.snapshot.applied or NOT_APPLIED).scope

    @property
    def consumed(self) -> tuple[str, ...]:
        """The queues the worker consumes (empty before it started)."""
        return self.snapshot.consumed

    @property
    def holds(self) -> tuple[Hold, ...]:
        """The live holds, but ramps."""
        return tuple(h for h in self.snapshot.holds if h.live(self.now) and not h.ramp)

    @property
    def ramps(self) -> tuple[Hold, ...]:
        """The ramped resumes in force on this worker."""
        live = (h for h in self.snapshot.holds if h.live(self.now) and h.ramp)
        return tuple(h for h in live if h.scope.for_worker(self.hostname))

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
    """Names of the circuit breakers that own any of ``holds`` (their ramps not counted)."""
    return {
        h.source[len(BREAKER_PREFIX) :]
        for h in holds
        if h.source.startswith(BREAKER_PREFIX) and not h.ramp
    }


def _unique(values: Any) -> str:
    seen: list[str] = []
    for value in values:
        if value and value not in seen:
            seen.append(value)
    return "; ".join(seen)
