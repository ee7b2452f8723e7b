"""The Python API: pause, resume and status of the whole cluster."""

from __future__ import annotations

import getpass
import logging
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from celery import Celery

from . import journal
from .conf import config_for
from .control import REFRESH
from .errors import AlreadyPaused, InvalidInput, PauseTimeout
from .report import WorkerReport
from .state import MANUAL, Hold, PauseState, Scope
from .stores import Store, store_for

logger = logging.getLogger(__name__)

MAX_QUEUES = 100
MAX_QUEUE_NAME = 200
MAX_REASON = 1000
WAIT_POLL = 0.01

Progress = Callable[[list[WorkerReport]], None]


@dataclass(frozen=True)
class PauseResult:
    """A recorded pause, and the workers that confirmed it when waited for."""

    hold: Hold
    generation: int
    replaced: tuple[Hold, ...]
    workers: tuple[WorkerReport, ...] = ()


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


def pause(
    app: Celery,
    *,
    reason: str | None = None,
    paused_by: str | None = None,
    queues: Iterable[str] | str | None = None,
    resume_after: timedelta | float | None = None,
    resume_at: datetime | float | None = None,
    force: bool = False,
    wait: bool = False,
    timeout: float = 30.0,
    progress: Progress | None = None,
) -> PauseResult:
    """Pause ``queues`` (every queue by default) on every worker.

    With ``wait=True`` return only once every live worker has applied the pause
    and runs no task of the paused scope; raise :class:`PauseTimeout` naming the
    busy workers if that takes longer than ``timeout`` seconds (the pause stays).
    Raises :class:`AlreadyPaused` if a manual hold covers any of the queues,
    unless ``force=True``, which replaces it.
    """
    scope = Scope.of(check_queues(queues))
    reason = check_reason(reason)
    after = check_resume(resume_after, resume_at)
    by = paused_by or default_operator()
    replaced: list[Hold] = []

    def add_hold(state: PauseState, now: float) -> PauseState:
        live = state.live_holds(now)
        conflicts = [hold for hold in live if hold.manual and hold.scope.overlaps(scope)]
        if conflicts and not force:
            raise AlreadyPaused(conflicts)
        replaced[:] = conflicts
        until = after(now)
        hold = Hold(
            scope=scope, source=MANUAL, paused_by=by, reason=reason, paused_at=now, resume_at=until
        )
        return state.with_holds([*(h for h in live if h not in conflicts), hold])

    store = store_for(app)
    snapshot, _ = store.update(add_hold)
    notify_workers(app)
    hold = snapshot.state.holds[-1]
    generation = snapshot.state.generation
    journal.record(app, journal.pause_entry(hold, generation, replaced))
    workers = wait_until_quiet(app, generation, timeout, progress) if wait else []
    return PauseResult(hold, generation, tuple(replaced), tuple(workers))


def resume(
    app: Celery,
    *,
    queues: Iterable[str] | str | None = None,
    force: bool = False,
    resumed_by: str | None = None,
) -> ResumeResult:
    """Remove the manual holds on ``queues`` (every queue by default).

    Holds owned by a circuit breaker stay unless ``force=True``. A hold on every
    queue cannot be lifted for some queues only: it stays, and is reported.
    ``resumed_by`` (default ``user@host``) is recorded in the history.
    """
    scope = Scope.of(check_queues(queues))
    removed: list[Hold] = []

    def lift(state: PauseState, now: float) -> PauseState | None:
        removed.clear()
        kept: list[Hold] = []
        for hold in state.live_holds(now):
            rest = lifted_scope(hold, scope) if (force or hold.manual) else hold.scope
            if rest != hold.scope:
                removed.append(hold)
            if rest:
                kept.append(replace(hold, scope=rest))
        if len(kept) == len(state.holds) and not removed:
            return None
        return state.with_holds(kept)

    store = store_for(app)
    snapshot, changed = store.update(lift)
    if changed:
        notify_workers(app)
    remaining = tuple(
        hold for hold in snapshot.state.live_holds(snapshot.now) if hold.scope.overlaps(scope)
    )
    if removed:
        entry = journal.resume_entry(
            at=snapshot.now,
            scope=scope,
            by=resumed_by or default_operator(),
            generation=snapshot.state.generation,
            removed=removed,
            kept=snapshot.state.holds,
            forced=force,
        )
        journal.record(app, entry)
    return ResumeResult(tuple(removed), remaining, snapshot.state.generation)


def status(app: Celery) -> ClusterStatus:
    """The holds, the paused queues and every live worker's report."""
    store = store_for(app)
    snapshot = store.read()
    return ClusterStatus(
        state=snapshot.state,
        now=snapshot.now,
        paused=snapshot.state.paused(snapshot.now),
        workers=tuple(live_workers(app, store, snapshot.now)),
        store=store.display_url,
    )


def wait_until_quiet(
    app: Celery, generation: int, timeout: float, progress: Progress | None = None
) -> list[WorkerReport]:
    """Poll worker reports until every live worker applied ``generation`` and is idle in scope."""
    store = store_for(app)
    deadline = time.monotonic() + timeout
    while True:
        workers = live_workers(app, store, store.now())
        if progress is not None:
            progress(workers)
        busy = {w.hostname: list(w.running) for w in workers if not w.quiet_for(generation)}
        if not busy:
            return workers
        if time.monotonic() >= deadline:
            raise PauseTimeout(timeout, busy)
        time.sleep(WAIT_POLL)


def live_workers(app: Celery, store: Store, now: float) -> list[WorkerReport]:
    """Reports seen within ``pause_worker_ttl`` seconds, by hostname."""
    ttl = config_for(app).worker_ttl
    reports = (r for r in store.worker_reports() if now - r.seen <= ttl)
    return sorted(reports, key=lambda r: r.hostname)


def notify_workers(app: Celery) -> None:
    """Ask every connected worker to re-read the state now (polling covers a miss)."""
    try:
        app.control.broadcast(REFRESH, reply=False)
    except Exception as exc:
        logger.warning("celery-pause: could not notify workers (%s); they poll instead", exc)


def lifted_scope(hold: Hold, lifted: Scope) -> Scope:
    """What remains of ``hold``'s scope once ``lifted`` is resumed."""
    if lifted.everything:
        return Scope()
    if hold.scope.everything:
        return hold.scope
    return Scope.of(hold.scope.queues - lifted.queues)


def check_queues(queues: Iterable[str] | str | None) -> list[str] | None:
    if queues is None:
        return None
    names = [queues] if isinstance(queues, str) else list(queues)
    if not names:
        raise InvalidInput("queues must name at least one queue (or be None for all)")
    if len(names) > MAX_QUEUES:
        raise InvalidInput(f"at most {MAX_QUEUES} queues at once, got {len(names)}")
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise InvalidInput(f"queue names must be non-empty strings, got {name!r}")
        if len(name) > MAX_QUEUE_NAME:
            raise InvalidInput(f"queue name longer than {MAX_QUEUE_NAME} characters")
    return [name.strip() for name in names]


def check_reason(reason: str | None) -> str | None:
    if reason is not None and len(reason) > MAX_REASON:
        raise InvalidInput(f"reason longer than {MAX_REASON} characters ({len(reason)})")
    return reason


def check_resume(
    resume_after: timedelta | float | None, resume_at: datetime | float | None
) -> Callable[[float], float | None]:
    """From store time ``now``, the auto-resume time (or ``None``)."""
    if resume_after is not None and resume_at is not None:
        raise InvalidInput("give resume_after or resume_at, not both")
    if resume_after is not None:
        seconds = (
            resume_after.total_seconds()
            if isinstance(resume_after, timedelta)
            else float(resume_after)
        )
        if not seconds > 0:
            raise InvalidInput(f"resume_after must be positive, got {resume_after!r}")
        return lambda now: now + seconds
    if resume_at is not None:
        at = resume_at.timestamp() if isinstance(resume_at, datetime) else float(resume_at)
        return lambda now: at
    return lambda now: None


def default_operator() -> str:
    """``user@host`` of whoever runs this process."""
    try:
        user = getpass.getuser()
    except Exception:
        user = "unknown"
    return f"{user}@{socket.gethostname()}"
