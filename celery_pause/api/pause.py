"""Pause: check, place a hold (a pure rule), write, notify, record, then wait if asked."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from celery import Celery

from ..model.placing import Placing
from ..model.validation import (
    Labels,
    check_beat,
    check_reason,
    check_resume,
    check_scope,
    check_start,
)
from ..settings import config_for
from .holding import Progress, place_hold
from .operator import operator
from .results import PauseResult


def pause(
    app: Celery,
    *,
    reason: str | None = None,
    by: str | None = None,
    queues: Iterable[str] | str | None = None,
    tasks: Iterable[str] | str | None = None,
    workers: Iterable[str] | str | None = None,
    labels: Labels = None,
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
    wait_for_lost: bool = False,
    paused_by: str | None = None,
) -> PauseResult:
    """Pause the tasks of ``queues``, named ``tasks``, on ``workers``: a hold on that scope.

    The hold is recorded in the store (a pure rule, :func:`~celery_pause.model.placing.place`,
    decides the next state), the workers are told, the history records it, and with
    ``wait=True`` the call returns only once the cluster is quiet in the scope.

    Parameters:
        app: The Celery app whose cluster to pause.
        reason: Why, shown by ``pause status`` and recorded in the history.
        by: Who pauses; ``user@host`` of this process by default.
        queues: The queues to pause (every one by default).
        tasks: The task names to pause (every one by default); shell-style patterns
            (``proj.billing.*``) allowed. A paused task type is held by each worker's gate
            while the rest of its queue flows.
        workers: The workers to pause (every one by default); patterns (``w1@*``) allowed.
        labels: Labels ``NAME=VALUE`` of the tasks to pause (every task by default), the
            value exact or a pattern (``tenant=trial-*``), or a mapping of each label to a
            value or a list of values (``{"tenant": "acme"}``); a task carries the labels of
            ``pause_labels`` (a keyword argument or a message header). The scope is the
            intersection of ``queues``, ``tasks``, ``workers`` and ``labels``; a name that
            matches no registered task, no live worker or no configured label is recorded
            all the same, with a warning in :attr:`PauseResult.warnings`.
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
            start first. A worker that stopped reporting before it confirmed is counted once
            it surely fenced itself (silent for over ``pause_worker_ttl + pause_lease``, the
            wait a lease old): it
            can start nothing, and :attr:`PauseResult.lost` names it.
        timeout: Seconds to wait with ``wait=True`` (counted from the start of a scheduled
            pause).
        progress: Called with the recorded pause and the live workers' reports at every
            poll of the wait.
        notify: Broadcast ``pause_refresh``; with ``False`` the workers learn of the pause
            at their next poll (``pause_poll_interval``).
        strict: Refuse, writing nothing, a task or worker name that matches no task the app
            defines or no live worker (by default it is recorded with a warning).
        wait_for_lost: With ``wait=True``, wait for lost workers too until they report
            again and confirm (or are forgotten, ``pause_forget_worker_after``): for a caller
            that needs the tasks they ran known finished. Always so with ``pause_lease = None``.
        paused_by: ``by``, as earlier releases spelled it (deprecated).

    Returns:
        The recorded pause; with ``wait=True``, the workers that confirmed it, and those
        lost (:attr:`PauseResult.lost`: fenced, their tasks may still be finishing).

    Raises:
        AlreadyPaused: A manual hold overlaps the scope, and ``force`` is not set.
        PauseTimeout: The wait took longer than ``timeout``; ``.busy`` maps each busy
            worker to the task ids it still runs. The pause stays.
        InvalidInput: An argument is out of bounds, or a start or resume time is not ahead.
        StoreError: The store cannot be reached.
    """
    config = config_for(app)
    placing = Placing(
        scope=check_scope({"queues": queues, "tasks": tasks, "workers": workers, "labels": labels}),
        reason=check_reason(reason),
        resume_at=check_resume(resume_after, resume_at),
        start_at=check_start(start_at),
        beat=check_beat(beat) or config.beat_default,
        by=operator(by, paused_by=paused_by),
        force=force,
    )
    return place_hold(
        app,
        config,
        placing,
        notify=notify,
        strict=strict,
        wait=wait,
        timeout=timeout,
        progress=progress,
        wait_for_lost=wait_for_lost,
    )
