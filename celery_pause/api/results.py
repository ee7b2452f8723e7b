"""What the Python API returns: a recorded pause, a resume, and the cluster's status."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..model.limit import Limit
from ..model.report import WorkerReport, unconfirmed
from ..model.scope import Scope, Target
from ..model.state import Hold, PauseState
from ..model.usage import Usage


@dataclass(frozen=True)
class PauseResult:
    """A recorded pause, and the workers that confirmed it when waited for."""

    hold: Hold
    generation: int
    replaced: tuple[Hold, ...]
    workers: tuple[WorkerReport, ...] = ()
    """With ``wait=True``: the workers that confirmed, and those counted as :attr:`lost`."""
    warnings: tuple[str, ...] = ()
    """Names in the scope that match no known task or live worker (recorded all the same)."""

    @property
    def lost(self) -> tuple[WorkerReport, ...]:
        """With ``wait=True``: the workers that stopped reporting before they confirmed, and
        that the wait counted once they surely fenced themselves (silent for over
        ``pause_worker_ttl + pause_lease``, the wait a lease old). They can start nothing,
        so nothing in the scope starts anywhere; but a lost worker may be cut off rather
        than dead, and then still runs the tasks it started before it fenced: at least
        those of its last report (``running`` for a pause it had applied, else ``active``
        counts them). Empty when every worker confirmed, and always without a wait."""
        return unconfirmed(self.workers, self.generation, self.hold.start_at)


@dataclass(frozen=True)
class ThrottleResult(PauseResult):
    """A recorded limit (what :func:`~celery_pause.throttle` returns), and the workers that
    applied it when waited for."""

    @property
    def limit(self) -> Limit:
        """The limit recorded: ``rate`` in tasks per second, ``concurrency``, ``per``."""
        if self.hold.limit is None:
            raise TypeError(f"hold {self.hold.id} pauses: it records no limit")
        return self.hold.limit


@dataclass(frozen=True)
class ResumeResult:
    """The holds removed, and those that still pause some of the queues asked for."""

    removed: tuple[Hold, ...]
    remaining: tuple[Hold, ...]
    generation: int
    cancelled: tuple[Hold, ...] = ()
    """Scheduled holds (or window occurrences) cancelled before they started."""
    scheduled: tuple[Hold, ...] = ()
    """Holds in the scope asked for that are still scheduled to start later."""
    now: float = 0.0
    """Store time of the resume."""
    ramps: tuple[Hold, ...] = ()
    """The holds of the ramped resume recorded (limits whose rate rises), when asked for."""


@dataclass(frozen=True)
class ClusterStatus:
    """Holds, the paused scope, and every live worker's report.

    ``state`` includes the maintenance windows' current and next occurrences.
    """

    state: PauseState
    now: float
    paused: Scope
    workers: tuple[WorkerReport, ...]
    store: str
    queues: tuple[str, ...] = ()
    """The app's own queues (``task_queues``, or its default queue)."""

    @property
    def fully_paused(self) -> bool:
        """Whether every task of every queue is paused on every worker: of every queue, or of
        each of the app's own (the app's only queue paused everywhere is a full pause)."""
        paused = self.paused
        if paused.everything:
            return True
        return bool(self.queues) and all(paused.covers(Target(queue=q)) for q in self.queues)

    store_warnings: tuple[str, ...] = ()
    """What may make the store lose the state (a Redis eviction policy), and the records that
    could not be read (what they would show is left out)."""
    usage: Mapping[str, Usage] = field(default_factory=dict)
    """How much of each active limit is used, by hold id."""

    @property
    def holds(self) -> tuple[Hold, ...]:
        """The holds in force now: those that pause and those that limit (but ramps)."""
        return tuple(hold for hold in self.state.active_holds(self.now) if not hold.ramp)

    @property
    def limits(self) -> tuple[Hold, ...]:
        """The holds that limit now (but ramps)."""
        return tuple(hold for hold in self.holds if not hold.pauses)

    @property
    def ramps(self) -> tuple[Hold, ...]:
        """The ramped resumes still raising their rate."""
        return self.state.live_ramps(self.now)

    @property
    def scheduled(self) -> tuple[Hold, ...]:
        """The holds that start later, soonest first (each window's next occurrence too)."""
        return self.state.scheduled_holds(self.now)
