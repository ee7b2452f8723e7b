"""The Python API: pause, resume and status of the whole cluster."""

from __future__ import annotations

import getpass
import logging
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from celery import Celery

from .control import notify_workers
from .errors import AlreadyPaused, InvalidInput, PauseTimeout
from .formatting import format_time
from .history import CANCEL, RESUME, pause_entry, record, resume_entry
from .lifting import Lifted, lift_hold, lift_scope, lifted_scope
from .ramp import Ramp, count_sharers
from .report import WorkerReport
from .results import ClusterStatus, PauseResult, ResumeResult
from .scope import NOTHING, Rule, Scope
from .settings import config_for
from .state import MANUAL, Hold, PauseState
from .stores import Snapshot, store_for
from .validation import (
    check_beat,
    check_operator,
    check_queues,
    check_ramp,
    check_reason,
    check_resume,
    check_start,
    check_tasks,
    check_workers,
)
from .windows import with_windows

logger = logging.getLogger(__name__)

WAIT_POLL = 0.01
"""Seconds between reads of the workers' reports while waiting for quiet."""
START_POLL = 0.5
"""Most seconds between reads of the store's clock while waiting for a scheduled start."""

__all__ = ("lifted_scope", "pause", "resume", "status", "wait_until_quiet")

Progress = Callable[[PauseResult, Sequence[WorkerReport]], None]
"""Called with the recorded pause and the live workers' reports at every poll of a wait."""


def pause(
    app: Celery,
    *,
    reason: str | None = None,
    paused_by: str | None = None,
    queues: Iterable[str] | str | None = None,
    tasks: Iterable[str] | str | None = None,
    workers: Iterable[str] | str | None = None,
    resume_after: timedelta | float | None = None,
    resume_at: datetime | float | None = None,
    start_at: datetime | float | None = None,
    beat: str | None = None,
    force: bool = False,
    wait: bool = False,
    timeout: float = 30.0,
    progress: Progress | None = None,
    notify: bool = True,
) -> PauseResult:
    """Pause the tasks named ``tasks`` of ``queues`` on ``workers`` (each every one by default).

    Task and worker names may be shell-style patterns (``proj.billing.*``, ``w1@*``).
    A name or pattern that matches no task this app knows, or no live worker, is
    recorded all the same, with a warning in the result.

    ``start_at`` (a datetime, or seconds since the epoch on the store's clock) schedules
    the pause: it is recorded now, every worker learns it in advance and applies it at
    that time without a command; ``resume_after`` then counts from the start. ``beat``
    (``"queue"`` or ``"skip"``, default ``pause_beat_default``) says whether ``celery beat``
    keeps sending periodic tasks of the scope while the hold is active.

    With ``wait=True`` return only once every live worker has applied the pause
    and runs no task of the paused scope (for a scheduled pause: wait for its start,
    then for that); raise :class:`PauseTimeout` naming the busy workers if that takes
    longer than ``timeout`` seconds (the pause stays).
    Raises :class:`AlreadyPaused` if a manual hold overlaps the scope (and, for
    scheduled holds, the time), unless ``force=True``, which replaces it. ``progress`` is
    called at every poll of the wait. With ``notify=False`` no broadcast is sent and
    workers learn of the pause at their next poll (``pause_poll_interval``).
    """
    scope = Scope.of(check_queues(queues), tasks=check_tasks(tasks), workers=check_workers(workers))
    reason = check_reason(reason)
    after = check_resume(resume_after, resume_at)
    start = check_start(start_at)
    policy = check_beat(beat) or config_for(app).beat_default
    by = check_operator(paused_by) or default_operator()
    replaced: list[Hold] = []

    def add_hold(state: PauseState, now: float) -> PauseState:
        if start is not None and start <= now:
            raise InvalidInput(
                f"start_at {format_time(start)} is not in the future (now {format_time(now)})"
            )
        until = after(now if start is None else start)
        if until is not None and start is None and until <= now:
            raise InvalidInput(
                f"resume_at {format_time(until)} is not in the future (now {format_time(now)})"
            )
        if until is not None and start is not None and until <= start:
            raise InvalidInput(
                f"resume_at {format_time(until)} is not after start_at {format_time(start)}"
            )
        hold = Hold(
            scope=scope,
            source=MANUAL,
            paused_by=by,
            reason=reason,
            paused_at=now,
            resume_at=until,
            start_at=start,
            beat=policy,
        )
        live = state.live_holds(now)
        conflicts = [
            other
            for other in live
            if other.manual and other.scope.overlaps(scope) and other.overlaps_in_time(hold, now)
        ]
        if conflicts and not force:
            raise AlreadyPaused(conflicts)
        replaced[:] = conflicts
        return state.with_holds([*(h for h in live if h not in conflicts), hold])

    store = store_for(app)
    snapshot, _ = store.update(add_hold)
    if notify:
        notify_workers(app)
    result = PauseResult(
        snapshot.state.holds[-1],
        snapshot.state.generation,
        tuple(replaced),
        warnings=unmatched(
            app, scope.rule, store.live_reports(config_for(app).worker_ttl, snapshot.now)
        ),
    )
    for warning in result.warnings:
        logger.warning("celery-pause: %s", warning)
    record(app, pause_entry(result.hold, result.generation, replaced))
    if not wait:
        return result
    watch = None if progress is None else lambda workers: progress(result, workers)
    if start is not None:
        wait_for_start(app, start)
    try:
        confirmed = wait_until_quiet(app, result.generation, timeout, watch, since=start)
    except PauseTimeout as exc:
        raise PauseTimeout(exc.timeout, exc.busy, paused=result) from None
    return replace(result, workers=tuple(confirmed))


def resume(
    app: Celery,
    *,
    queues: Iterable[str] | str | None = None,
    tasks: Iterable[str] | str | None = None,
    workers: Iterable[str] | str | None = None,
    hold: str | None = None,
    force: bool = False,
    resumed_by: str | None = None,
    ramp: timedelta | float | None = None,
    notify: bool = True,
) -> ResumeResult:
    """Lift the active manual holds within ``queues``, ``tasks`` and ``workers`` (each every
    one by default), or exactly the hold whose id is ``hold``.

    A hold the resume's scope contains is removed. A hold that differs from it in
    one dimension only, where both list names, loses the names resumed (a hold on
    queues a and b, resumed for a, holds b on). Any other overlap would leave a
    hold that is no list of names (resuming queue a of a hold on every queue) and
    raises :class:`InvalidInput` before anything changes. Holds owned by a circuit
    breaker stay unless ``force=True``, which lifts them (and a hold standing for
    unreadable state) by the same rules, leaving whole those it cannot split; with
    ``force`` the current occurrence of a maintenance window the scope contains ends.
    Scheduled holds (not started yet) stay: cancel one by its id.

    ``hold`` lifts one hold by id (``pause status`` shows them): a manual hold, active or
    scheduled (breakers' with ``force``), or a maintenance window's current occurrence
    (ended early) or next one (skipped): ``window:<name>:<start>``, or ``window:<name>``
    for whichever comes first. ``resumed_by`` (default ``user@host``) is recorded in the
    history. With ``notify=False`` workers apply the change at their next poll.

    ``ramp`` (seconds or a timedelta, at most a day) resumes gradually: over that time the
    cluster's start rate for what was lifted rises linearly to ``pause_ramp_peak`` tasks
    per second, then is unlimited (see :mod:`celery_pause.ramp`). Raises
    :class:`InvalidInput` if nothing in the scope is paused.
    """
    names = (check_queues(queues), check_tasks(tasks), check_workers(workers))
    seconds = check_ramp(ramp)
    if hold is not None and (not isinstance(hold, str) or any(n is not None for n in names)):
        raise InvalidInput("give a hold id, or a scope (queues, tasks, workers), not both")
    scope = Scope.of(names[0], tasks=names[1], workers=names[2])
    config = config_for(app)
    windows = config.windows
    lifted = Lifted()
    store = store_for(app)
    # The live workers share a ramp's rate: read once, and only for a ramp.
    live = store.live_reports(config.worker_ttl, store.now()) if seconds is not None else []
    hosts = [report.hostname for report in live]
    by = resumed_by or default_operator()
    recorded: list[Ramp] = []

    def lift(state: PauseState, now: float) -> PauseState | None:
        following: PauseState | None
        if hold is not None:
            following = lift_hold(state, now, hold, force=force, windows=windows, lifted=lifted)
        else:
            following = lift_scope(state, now, scope, force=force, windows=windows, lifted=lifted)
        if seconds is None:
            return following
        lifts = scope if hold is None else NOTHING
        resumed = ramped_scope(lifted.removed, lifts)
        if following is None or not resumed:
            raise InvalidInput(f"nothing to ramp: {scope.describe()} is not paused")
        ramp = Ramp(
            resumed,
            start=now,
            duration=seconds,
            peak=config.ramp_peak,
            sharers=count_sharers(resumed, hosts),
            by=by,
        )
        recorded[:] = [ramp]
        return following.with_ramp(ramp, now)

    snapshot, changed = store.update(lift)
    if changed and notify:
        notify_workers(app)
    current = in_force(app, snapshot)
    if hold is not None:
        scope = (lifted.removed + lifted.cancelled)[0].scope
    remaining = tuple(h for h in current.active_holds(snapshot.now) if h.scope.overlaps(scope))
    scheduled = tuple(h for h in current.scheduled_holds(snapshot.now) if h.scope.overlaps(scope))
    for action, holds in ((RESUME, lifted.removed), (CANCEL, lifted.cancelled)):
        if holds:
            entry = resume_entry(
                at=snapshot.now,
                scope=scope,
                by=by,
                generation=snapshot.state.generation,
                removed=holds,
                kept=snapshot.state.holds,
                forced=force,
                action=action,
                ramp=seconds if action == RESUME else None,
            )
            record(app, entry)
    return ResumeResult(
        tuple(lifted.removed),
        remaining,
        snapshot.state.generation,
        cancelled=tuple(lifted.cancelled),
        scheduled=scheduled,
        now=snapshot.now,
        ramp=recorded[0] if recorded else None,
    )


def ramped_scope(removed: Sequence[Hold], scope: Scope) -> Scope:
    """What lifting ``removed`` by a resume of ``scope`` resumes (all of each hold when
    ``scope`` is empty: a resume by hold id)."""
    resumed = NOTHING
    for hold in removed:
        resumed = resumed | (hold.scope & scope if scope else hold.scope)
    return resumed


def status(app: Celery) -> ClusterStatus:
    """The holds (with the maintenance windows' occurrences), the paused scope and every
    live worker's report."""
    store = store_for(app)
    snapshot = store.read()
    state = in_force(app, snapshot)
    return ClusterStatus(
        state=state,
        now=snapshot.now,
        paused=state.paused(snapshot.now),
        workers=tuple(store.live_reports(config_for(app).worker_ttl, snapshot.now)),
        store=store.display_url,
    )


def in_force(app: Celery, snapshot: Snapshot) -> PauseState:
    """The state read, with the app's maintenance windows' current and next occurrences."""
    return with_windows(snapshot.state, config_for(app).windows, snapshot.now)


def wait_for_start(app: Celery, start: float) -> None:
    """Sleep until the store's clock reaches ``start``."""
    store = store_for(app)
    while (left := start - store.now()) > 0:
        time.sleep(min(left, START_POLL))


def wait_until_quiet(
    app: Celery,
    generation: int,
    timeout: float,
    progress: Callable[[Sequence[WorkerReport]], None] | None = None,
    *,
    since: float | None = None,
) -> list[WorkerReport]:
    """Poll worker reports until every live worker applied ``generation`` (as the state
    stood at store time ``since`` or later, when given) and is idle in scope.

    A report of a generation above the stored one predates a reset of the state
    (the state was lost, or unreadable and then repaired, which restarts the
    count): that worker has not read the current state yet, so it is not quiet.
    """
    store = store_for(app)
    ttl = config_for(app).worker_ttl
    deadline = time.monotonic() + timeout
    while True:
        workers = store.live_reports(ttl, store.now())
        if progress is not None:
            progress(workers)
        busy = {w.hostname: list(w.running) for w in workers if not w.quiet_for(generation, since)}
        if not busy:
            # Every report says quiet: read the state's generation only now, once.
            current = store.read().state.generation
            busy = {w.hostname: list(w.running) for w in workers if w.generation > current}
            if not busy:
                return workers
        if time.monotonic() >= deadline:
            raise PauseTimeout(timeout, busy)
        time.sleep(WAIT_POLL)


def unmatched(app: Celery, rule: Rule, live: Sequence[WorkerReport]) -> tuple[str, ...]:
    """Warnings for task names and worker names of ``rule`` that match nothing known now."""
    warnings = []
    known = [name for name in app.tasks if not name.startswith("celery.")]
    for name in sorted(rule.tasks or ()):
        if not any(Rule(tasks=frozenset({name})).covers("", task, None) for task in known):
            warnings.append(
                f"task {name!r} matches no task registered in this app; "
                "the hold applies to it once a worker runs such a task"
            )
    hosts = [report.hostname for report in live]
    for name in sorted(rule.workers or ()):
        if not any(Rule(workers=frozenset({name})).covers("", None, host) for host in hosts):
            warnings.append(
                f"worker {name!r} matches no live worker; "
                "the hold is recorded and applies when such a worker starts"
            )
    return tuple(warnings)


def default_operator() -> str:
    """``user@host`` of whoever runs this process."""
    try:
        user = getpass.getuser()
    except Exception:
        user = "unknown"
    return f"{user}@{socket.gethostname()}"
