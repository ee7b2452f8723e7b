"""Pause: record a hold on a scope, tell the workers, and wait for quiet if asked."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from celery import Celery

from ..control import notify_workers
from ..errors import AlreadyPaused, InvalidInput, PauseTimeout
from ..history import pause_entry, record
from ..model.formatting import format_time
from ..model.report import WorkerReport
from ..model.scope import Rule, Scope, Target
from ..model.state import MANUAL, Hold, PauseState
from ..model.validation import (
    check_beat,
    check_operator,
    check_queues,
    check_reason,
    check_resume,
    check_start,
    check_tasks,
    check_workers,
)
from ..settings import config_for
from ..stores import store_for
from .operator import default_operator
from .results import PauseResult
from .waiting import wait_for_start, wait_until_quiet

logger = logging.getLogger(__name__)

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


def unmatched(app: Celery, rule: Rule, live: Sequence[WorkerReport]) -> tuple[str, ...]:
    """Warnings for task names and worker names of ``rule`` that match nothing known now."""
    warnings = []
    known = [name for name in app.tasks if not name.startswith("celery.")]
    for name in sorted(rule.tasks or ()):
        if not any(Rule(tasks=frozenset({name})).covers(Target(task=task)) for task in known):
            warnings.append(
                f"task {name!r} matches no task registered in this app; "
                "the hold applies to it once a worker runs such a task"
            )
    hosts = [report.hostname for report in live]
    for name in sorted(rule.workers or ()):
        if not any(Rule(workers=frozenset({name})).covers(Target(worker=host)) for host in hosts):
            warnings.append(
                f"worker {name!r} matches no live worker; "
                "the hold is recorded and applies when such a worker starts"
            )
    return tuple(warnings)
