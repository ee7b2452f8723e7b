"""What a pause places: the pure rule of :func:`celery_pause.pause`.

:func:`place` takes the state, the store's time and the pause asked for (a
:class:`Placing`) and returns the next state with the hold it placed and the
manual holds it replaced (:class:`Placed`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ..errors import AlreadyPaused, InvalidInput
from .formatting import format_time
from .limit import Limit
from .outcome import Outcome
from .scope import Scope
from .state import MANUAL, Hold, PauseState, fresh_id


@dataclass(frozen=True)
class Placing:
    """A pause as asked for: what it holds, who asks and why, and when it starts and ends."""

    scope: Scope
    by: str
    reason: str | None
    resume_at: Callable[[float], float | None]
    """From the time the hold starts, when it resumes by itself (``None``: never)."""
    start_at: float | None = None
    beat: str = "queue"
    force: bool = False
    """Replace the manual holds it overlaps instead of refusing."""
    limit: Limit | None = None
    """``None``: a pause; else the limit placed (a throttle)."""
    id: str = field(default_factory=fresh_id)
    """The id of the hold it places (known before the write: announced to the workers)."""

    @property
    def closes_now(self) -> bool:
        """Whether it pauses its scope from the moment it is written."""
        return self.limit is None and self.start_at is None


@dataclass(frozen=True)
class Placed:
    """The hold a pause placed, and the manual holds it replaced."""

    hold: Hold
    replaced: tuple[Hold, ...] = ()
    """The holds it ended (a scheduled throttle: from its start on)."""


def place(state: PauseState, now: float, placing: Placing) -> Outcome[PauseState, Placed]:
    """The state with the hold ``placing`` asks for, at store time ``now``.

    Raises :class:`InvalidInput` for a start or resume time that is not ahead, and
    :class:`AlreadyPaused` for an overlapping manual pause unless ``placing.force``. A limit
    replaces the manual limit of the same scope that counts the same (tasks, or the same
    cost: turning the dial) and leaves every other hold: where several cover a task, the
    strictest decides, and a pause beats a limit.
    """
    start = placing.start_at
    if start is not None and start <= now:
        raise InvalidInput(
            f"start_at {format_time(start)} is not in the future (now {format_time(now)})"
        )
    until = placing.resume_at(now if start is None else start)
    if until is not None and start is None and until <= now:
        raise InvalidInput(
            f"resume_at {format_time(until)} is not in the future (now {format_time(now)})"
        )
    if until is not None and start is not None and until <= start:
        raise InvalidInput(
            f"resume_at {format_time(until)} is not after start_at {format_time(start)}"
        )
    hold = Hold(
        scope=placing.scope,
        source=MANUAL,
        paused_by=placing.by,
        reason=placing.reason,
        paused_at=now,
        resume_at=until,
        start_at=start,
        beat=placing.beat,
        limit=placing.limit,
        id=placing.id,
    )
    live = state.live_holds(now)
    conflicts = tuple(other for other in live if other.manual and _conflict(other, hold, now))
    if conflicts and not placing.force and hold.pauses:
        raise AlreadyPaused(list(conflicts))
    kept = [h for h in live if h not in conflicts]
    if not hold.pauses and start is not None:
        # A scheduled turn of the dial: the limit in force keeps its place until then.
        kept += [replace(h, resume_at=start) for h in conflicts if h.began < start]
    following = state.with_holds([*kept, hold])
    return Outcome(following, Placed(hold, conflicts))


def _conflict(other: Hold, placed: Hold, now: float) -> bool:
    """Whether ``placed`` replaces (or, a pause, refuses) the manual hold ``other`` (never a
    ramp: a limit and a ramp on one scope both apply)."""
    if other.ramp or other.pauses != placed.pauses or not other.overlaps_in_time(placed, now):
        return False
    if placed.pauses:
        return other.scope.overlaps(placed.scope)
    return other.scope == placed.scope and _cost(other) == _cost(placed)


def _cost(hold: Hold) -> str | None:
    """What a limit's rate counts (``None``: tasks; a pause counts nothing)."""
    return None if hold.limit is None else hold.limit.cost
