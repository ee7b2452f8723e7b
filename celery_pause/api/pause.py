"""Pause: check, place a hold (a pure rule), write, notify, record, then wait if asked."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from celery import Celery

from ..control import notify_workers
from ..errors import InvalidInput, PauseTimeout
from ..history import pause_entry, record
from ..model.placing import Placing, place
from ..model.report import WorkerReport
from ..model.scope import Rule, Target
from ..model.validation import (
    check_beat,
    check_operator,
    check_reason,
    check_resume,
    check_scope,
    check_start,
    check_timeout,
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
    strict: bool = False,
) -> PauseResult:
    """Pause the tasks of ``queues``, named ``tasks``, on ``workers``: a hold on that scope.

    The hold is recorded in the store (a pure rule, :func:`~celery_pause.model.placing.place`,
    decides the next state), the workers are told, the history records it, and with
    ``wait=True`` the call returns only once the cluster is quiet in the scope.

    Parameters:
        app: The Celery app whose cluster to pause.
        reason: Why, shown by ``pause status`` and recorded in the history.
        paused_by: Who pauses; ``user@host`` of this process by default.
        queues: The queues to pause (every one by default).
        tasks: The task names to pause (every one by default); shell-style patterns
            (``proj.billing.*``) allowed. A paused task type is held by each worker's gate
            while the rest of its queue flows.
        workers: The workers to pause (every one by default); patterns (``w1@*``) allowed.
            The scope is the intersection of ``queues``, ``tasks`` and ``workers``; a name
            that matches no registered task or no live worker is recorded all the same, with
            a warning in :attr:`PauseResult.warnings`.
        resume_after: Resume by itself that long after the start (a ``timedelta`` or
            seconds).
        resume_at: Resume by itself at that time (a ``datetime``, naive meaning local time,
            or seconds since the epoch on the store's clock); it must lie ahead.
        start_at: Schedule the pause (a ``datetime`` or seconds since the epoch on the
            store's clock): it is recorded now, every worker learns it in advance and
            applies it at that time without a command; ``resume_after`` counts from there.
        beat: ``"queue"`` or ``"skip"`` (default ``pause_beat_default``): whether
            ``celery beat`` keeps sending periodic tasks of the scope while the hold is
            active.
        force: Replace a manual hold that overlaps the scope (and, for scheduled holds, the
            time) instead of raising :class:`AlreadyPaused`.
        wait: Return only once every live worker (starting ones included) has applied the
            pause and runs no task of the paused scope; for a scheduled pause, wait for its
            start first.
        timeout: Seconds to wait with ``wait=True`` (counted from the start of a scheduled
            pause).
        progress: Called with the recorded pause and the live workers' reports at every
            poll of the wait.
        notify: Broadcast ``pause_refresh``; with ``False`` the workers learn of the pause
            at their next poll (``pause_poll_interval``).
        strict: Refuse, writing nothing, a task or worker name that matches no task the app
            defines or no live worker (by default it is recorded with a warning).

    Returns:
        The recorded pause; with ``wait=True``, the workers that confirmed it.

    Raises:
        AlreadyPaused: A manual hold overlaps the scope, and ``force`` is not set.
        PauseTimeout: The wait took longer than ``timeout``; ``.busy`` maps each busy
            worker to the task ids it still runs. The pause stays.
        InvalidInput: An argument is out of bounds, or a start or resume time is not ahead.
        StoreError: The store cannot be reached.
    """
    placing = Placing(
        scope=check_scope({"queues": queues, "tasks": tasks, "workers": workers}),
        reason=check_reason(reason),
        resume_at=check_resume(resume_after, resume_at),
        start_at=check_start(start_at),
        beat=check_beat(beat) or config_for(app).beat_default,
        by=check_operator(paused_by) or default_operator(),
        force=force,
    )
    if wait:
        timeout = check_timeout(timeout)
    store = store_for(app)
    if strict:
        ttl = config_for(app).worker_ttl
        refused = unmatched(app, placing.scope.rule, store.live_reports(ttl, store.now()))
        if refused:
            raise InvalidInput("; ".join(refused) + " (--strict: nothing was recorded)")
    done = store.update(lambda state, now: place(state, now, placing))
    if notify:
        notify_workers(app)
    placed = done.result
    live = store.live_reports(config_for(app).worker_ttl, done.snapshot.now)
    result = PauseResult(
        placed.hold,
        done.snapshot.state.generation,
        placed.replaced,
        warnings=unmatched(app, placing.scope.rule, live),
    )
    record(app, pause_entry(result.hold, result.generation, placed.replaced))
    if not wait:
        return result
    return confirmed(app, result, placing.start_at, timeout, progress)


def confirmed(
    app: Celery, result: PauseResult, start: float | None, timeout: float, progress: Progress | None
) -> PauseResult:
    """``result`` with the workers that confirmed it: wait for a scheduled ``start``, then for
    quiet; :class:`PauseTimeout` (carrying ``result``) after ``timeout`` seconds."""
    watch = None if progress is None else lambda workers: progress(result, workers)
    if start is not None:
        wait_for_start(app, start)
    try:
        workers = wait_until_quiet(app, result.generation, timeout, watch, since=start)
    except PauseTimeout as exc:
        raise PauseTimeout(exc.timeout, exc.busy, paused=result, silent=exc.silent) from None
    return replace(result, workers=tuple(workers))


def unmatched(app: Celery, rule: Rule, live: Sequence[WorkerReport]) -> tuple[str, ...]:
    """Warnings for task names and worker names of ``rule`` that match nothing known now.

    The app's task modules are imported first, as a worker imports them at start
    (``imports``, ``include`` and ``autodiscover_tasks()``, Django's included): a process
    that only pauses knows the tasks a worker would run.
    """
    warnings = []
    known = [name for name in registered_tasks(app) if not name.startswith("celery.")]
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


def registered_tasks(app: Celery) -> list[str]:
    """The names of the tasks ``app`` defines, its task modules imported as a worker does."""
    try:
        app.loader.import_default_modules()
    except Exception as exc:  # a task module that fails outside a worker: judge by what loaded
        logger.warning("celery-pause: could not import the app's task modules: %r", exc)
    return list(app.tasks)
