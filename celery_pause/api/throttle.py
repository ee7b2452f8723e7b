"""Throttle: a hold that limits its scope to a cluster-wide rate or concurrency (the dial)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from celery import Celery

from ..errors import InvalidInput
from ..model.placing import Placing
from ..model.validation import (
    Labels,
    check_limit,
    check_reason,
    check_resume,
    check_scope,
    check_start,
)
from ..settings import config_for, setting_name
from .holding import Progress, place_hold
from .operator import operator
from .results import ThrottleResult


def throttle(
    app: Celery,
    *,
    rate: str | float | None = None,
    concurrency: int | None = None,
    reason: str | None = None,
    by: str | None = None,
    queues: Iterable[str] | str | None = None,
    tasks: Iterable[str] | str | None = None,
    workers: Iterable[str] | str | None = None,
    labels: Labels = None,
    per: str | None = None,
    cost: str | None = None,
    adaptive: bool = False,
    fair: str | None = None,
    weights: Mapping[str, float] | Iterable[str] | None = None,
    resume_after: timedelta | float | None = None,
    resume_at: datetime | float | None = None,
    start_at: datetime | float | None = None,
    wait: bool = False,
    timeout: float = 30.0,
    progress: Progress | None = None,
    notify: bool = True,
    strict: bool = False,
    wait_for_lost: bool = False,
    paused_by: str | None = None,
) -> ThrottleResult:
    """Limit the tasks of ``queues``, named ``tasks``, on ``workers`` to a cluster-wide
    ``rate`` and/or ``concurrency``: a hold that slows its scope instead of stopping it.

    A throttle on the same scope as a manual one that counts the same (tasks, or the same
    ``cost``) replaces it (the dial turned); every other hold stays. Where several limits
    cover a task each one counts it and the strictest decides; a pause beats any limit.
    ``resume`` lifts a limit like a pause.

    Parameters:
        app: The Celery app whose cluster to throttle.
        rate: Starts per second across the cluster: Celery's notation (``"10/s"``,
            ``"100/m"``, ``"5/h"``) or a number per second.
        concurrency: Most tasks of the scope running at once across the cluster.
        reason: Why, shown by ``pause status`` and recorded in the history.
        by: Who throttles; ``user@host`` of this process by default.
        queues: The queues to limit (every one by default).
        tasks: The task names or patterns to limit (every one by default).
        workers: The workers the limit applies on (every one by default); the limit is
            shared by all of them, not given to each.
        labels: Labels ``NAME=VALUE`` of the tasks to limit, or a mapping
            (``{"tenant": "acme"}``), as :func:`~celery_pause.pause` takes them.
        per: A label of ``pause_labels`` (``"tenant"``): the limit applies to each of its
            values apart, every tenant its own, a value seen first getting its own at once;
            a task without the label is not limited.
        cost: The keyword argument (or message header, which wins) each task says its cost
            in (``"tokens"``): the rate then counts units, not tasks, and a task starts once
            its units have accrued. A task without it costs 1; one whose value is not a
            number of at least 0 costs 1 too, with a warning. A limit with a cost and one
            without on the same scope both apply (tokens per minute and requests per minute).
        adaptive: ``rate`` and ``concurrency`` are a ceiling: a task of the scope that
            raises :class:`~celery_pause.Overloaded` cuts them across the cluster (and
            with its ``retry_after`` nothing of the scope starts until then); they come
            back by themselves (:doc:`/apis`).
        fair: A label of ``pause_labels`` (``"tenant"``): while more tasks of the scope
            wait than can start, the next to start is chosen across its values in
            proportion to their ``weights``; a value alone takes all the capacity
            (:doc:`/fair`). Alone, or with ``rate``, ``concurrency`` and ``per``.
        weights: Each value's share of the turns, by name or glob pattern
            (``{"acme": 3, "trial-*": 0.5}``; exact names first, then patterns in order;
            1 for the rest).
        resume_after: Lift the limit by itself that long after its start.
        resume_at: Lift it by itself at that time.
        start_at: Schedule the limit (as :func:`~celery_pause.pause`).
        wait: Return only once every live worker applied the limit (a lost worker counted
            once it surely fenced itself, as for :func:`~celery_pause.pause`).
        timeout: Seconds to wait with ``wait=True``.
        progress: Called with the recorded limit and the live workers' reports at every
            poll of the wait.
        notify: Broadcast ``pause_refresh``; with ``False`` workers learn of it at their
            next poll.
        strict: Refuse a task or worker name that matches nothing known (as ``pause``).
        wait_for_lost: With ``wait=True``, wait for lost workers too (as ``pause``).
        paused_by: ``by``, as earlier releases spelled it (deprecated).

    Returns:
        The recorded limit (``result.limit``), and the manual limit it replaced; with
        ``wait=True`` the workers that applied it, and those lost (``result.lost``).

    Raises:
        InvalidInput: Neither ``rate`` nor ``concurrency``, or either out of bounds (a rate
            of 0, above 1e6/s, not a rate; a concurrency below 1), or ``per`` not a label
            of ``pause_labels``; nothing is written.
        PauseTimeout: The wait took longer than ``timeout``; the limit stays.
        StoreError: The store cannot be reached.
    """
    placing = Placing(
        scope=check_scope({"queues": queues, "tasks": tasks, "workers": workers, "labels": labels}),
        reason=check_reason(reason),
        resume_at=check_resume(resume_after, resume_at),
        start_at=check_start(start_at),
        by=operator(by, paused_by=paused_by),
        limit=check_limit(rate, concurrency, per, cost, adaptive, fair, weights),
    )
    config = config_for(app)
    configured = config.labels
    for option, label in (("per", per), ("fair", fair)):
        if label is not None and label not in configured:
            known = ", ".join(sorted(configured)) or "none"
            raise InvalidInput(
                f"{option}={label!r} names no label of {setting_name(app, 'pause_labels')} "
                f"(labels: {known}): a task carries no such label, so nothing would be limited"
            )
    placed = place_hold(
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
    assert isinstance(placed, ThrottleResult)  # a placing with a limit records one
    return placed
