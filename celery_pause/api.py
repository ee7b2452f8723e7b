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
from .history import pause_entry, record, resume_entry
from .report import WorkerReport
from .results import ClusterStatus, PauseResult, ResumeResult
from .scope import DIMENSIONS, NOTHING, Rule, Scope
from .settings import config_for
from .state import MANUAL, Hold, PauseState
from .stores import store_for
from .validation import (
    check_operator,
    check_queues,
    check_reason,
    check_resume,
    check_tasks,
    check_workers,
)

logger = logging.getLogger(__name__)

WAIT_POLL = 0.01
"""Seconds between reads of the workers' reports while waiting for quiet."""

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

    With ``wait=True`` return only once every live worker has applied the pause
    and runs no task of the paused scope; raise :class:`PauseTimeout` naming the
    busy workers if that takes longer than ``timeout`` seconds (the pause stays).
    Raises :class:`AlreadyPaused` if a manual hold overlaps the scope,
    unless ``force=True``, which replaces it. ``progress`` is called at every
    poll of the wait. With ``notify=False`` no broadcast is sent and workers
    apply the pause at their next poll (``pause_poll_interval``).
    """
    scope = Scope.of(check_queues(queues), tasks=check_tasks(tasks), workers=check_workers(workers))
    reason = check_reason(reason)
    after = check_resume(resume_after, resume_at)
    by = check_operator(paused_by) or default_operator()
    replaced: list[Hold] = []

    def add_hold(state: PauseState, now: float) -> PauseState:
        live = state.live_holds(now)
        conflicts = [hold for hold in live if hold.manual and hold.scope.overlaps(scope)]
        if conflicts and not force:
            raise AlreadyPaused(conflicts)
        replaced[:] = conflicts
        until = after(now)
        if until is not None and until <= now:
            raise InvalidInput(
                f"resume_at {format_time(until)} is not in the future (now {format_time(now)})"
            )
        hold = Hold(
            scope=scope, source=MANUAL, paused_by=by, reason=reason, paused_at=now, resume_at=until
        )
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
    try:
        confirmed = wait_until_quiet(app, result.generation, timeout, watch)
    except PauseTimeout as exc:
        raise PauseTimeout(exc.timeout, exc.busy, paused=result) from None
    return replace(result, workers=tuple(confirmed))


def resume(
    app: Celery,
    *,
    queues: Iterable[str] | str | None = None,
    tasks: Iterable[str] | str | None = None,
    workers: Iterable[str] | str | None = None,
    force: bool = False,
    resumed_by: str | None = None,
    notify: bool = True,
) -> ResumeResult:
    """Lift the manual holds within ``queues``, ``tasks`` and ``workers`` (each every one
    by default).

    A hold the resume's scope contains is removed. A hold that differs from it in
    one dimension only, where both list names, loses the names resumed (a hold on
    queues a and b, resumed for a, holds b on). Any other overlap would leave a
    hold that is no list of names (resuming queue a of a hold on every queue) and
    raises :class:`InvalidInput` before anything changes. Holds owned by a circuit
    breaker stay unless ``force=True``, which lifts them (and a hold standing for
    unreadable state) by the same rules, leaving whole those it cannot split.
    ``resumed_by`` (default ``user@host``) is recorded in the history. With
    ``notify=False`` workers apply the change at their next poll.
    """
    scope = Scope.of(check_queues(queues), tasks=check_tasks(tasks), workers=check_workers(workers))
    removed: list[Hold] = []

    def lift(state: PauseState, now: float) -> PauseState | None:
        removed.clear()
        kept: list[Hold] = []
        for hold in state.live_holds(now):
            rest = hold.scope
            if hold.manual or force:
                try:
                    rest = lifted_scope(hold, scope)
                except InvalidInput:
                    if hold.manual:
                        raise  # a foreign hold it cannot split stays whole
            if rest != hold.scope:
                removed.append(hold)
            if rest:
                kept.append(replace(hold, scope=rest))
        if len(kept) == len(state.holds) and not removed:
            return None
        return state.with_holds(kept)

    store = store_for(app)
    snapshot, changed = store.update(lift)
    if changed and notify:
        notify_workers(app)
    remaining = tuple(
        hold for hold in snapshot.state.live_holds(snapshot.now) if hold.scope.overlaps(scope)
    )
    if removed:
        entry = resume_entry(
            at=snapshot.now,
            scope=scope,
            by=resumed_by or default_operator(),
            generation=snapshot.state.generation,
            removed=removed,
            kept=snapshot.state.holds,
            forced=force,
        )
        record(app, entry)
    return ResumeResult(tuple(removed), remaining, snapshot.state.generation)


def status(app: Celery) -> ClusterStatus:
    """The holds, the paused queues and every live worker's report."""
    store = store_for(app)
    snapshot = store.read()
    return ClusterStatus(
        state=snapshot.state,
        now=snapshot.now,
        paused=snapshot.state.paused(snapshot.now),
        workers=tuple(store.live_reports(config_for(app).worker_ttl, snapshot.now)),
        store=store.display_url,
    )


def wait_until_quiet(
    app: Celery,
    generation: int,
    timeout: float,
    progress: Callable[[Sequence[WorkerReport]], None] | None = None,
) -> list[WorkerReport]:
    """Poll worker reports until every live worker applied ``generation`` and is idle in scope.

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
        busy = {w.hostname: list(w.running) for w in workers if not w.quiet_for(generation)}
        if not busy:
            # Every report says quiet: read the state's generation only now, once.
            current = store.read().state.generation
            busy = {w.hostname: list(w.running) for w in workers if w.generation > current}
            if not busy:
                return workers
        if time.monotonic() >= deadline:
            raise PauseTimeout(timeout, busy)
        time.sleep(WAIT_POLL)


def lifted_scope(hold: Hold, lifted: Scope) -> Scope:
    """What remains of ``hold``'s scope once ``lifted`` is resumed (see :func:`resume`)."""
    rule, resumed = hold.scope.rule, lifted.rule
    if not rule.overlaps(resumed):
        return hold.scope
    if resumed.contains(rule):
        return NOTHING
    outside = [d for d in DIMENSIONS if not Rule(**{d: getattr(resumed, d)}).contains(rule)]
    if len(outside) == 1:
        (dimension,) = outside
        held, freed = getattr(rule, dimension), getattr(resumed, dimension)
        rest = frozenset(held) - freed if held is not None and freed is not None else None
        if rest is not None and not Rule(**{dimension: rest}).overlaps(Rule(**{dimension: freed})):
            return Scope(frozenset({replace(rule, **{dimension: rest})}))
    raise InvalidInput(
        f"cannot resume {lifted.describe()} out of the {hold.describe()}: what would remain is "
        f"no list of names. Resume its whole scope ({hold.scope.describe()}), or resume "
        "without filters, then pause what should stay paused"
    )


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
