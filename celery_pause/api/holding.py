"""What pause and throttle share: announce a pause, write the hold asked for, notify,
record, then wait."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace

from celery import Celery

from ..control import announce, notify_workers, withdraw
from ..errors import InvalidInput, PauseTimeout
from ..history import pause_entry, record
from ..model.placing import Placing, place
from ..model.report import WorkerReport
from ..model.scope import Rule, Target
from ..model.validation import check_timeout
from ..settings import PauseConfig, setting_name
from ..stores import Store, store_for
from .results import PauseResult, ThrottleResult
from .waiting import quiet_workers, wait_for_start

logger = logging.getLogger(__name__)

Progress = Callable[[PauseResult, Sequence[WorkerReport]], None]
"""Called with the recorded pause and the live workers' reports at every poll of a wait."""


def place_hold(
    app: Celery,
    config: PauseConfig,
    placing: Placing,
    *,
    notify: bool,
    strict: bool,
    wait: bool,
    timeout: float,
    progress: Progress | None,
    wait_for_lost: bool = False,
) -> PauseResult:
    """Write the hold ``placing`` asks for, tell the workers, record it, then wait if asked
    (the steps :func:`pause` and :func:`~celery_pause.api.throttle.throttle` share, each
    handing on the app's settings ``config`` it read once); with ``wait_for_lost``, for lost
    workers too.

    A pause that holds at once is announced to the workers first (:func:`announce`): they
    hold its scope while the store is opened and written, and stop when a read shows the
    hold, or at once if the write fails.
    """
    if wait:
        timeout = check_timeout(timeout)
    announced = notify and announce(app, placing)
    try:
        store = store_for(app)  # opened once, after the announcement: its first use may be slow
        if strict:
            live = store.live_reports(config.worker_ttl, store.now())
            refused = unmatched(app, config, placing.scope.rule, live)
            if refused:
                raise InvalidInput("; ".join(refused) + " (--strict: nothing was recorded)")
        done = store.update(lambda state, now: place(state, now, placing))
    except BaseException:
        if announced:
            withdraw(app, placing)
        raise
    if notify:
        notify_workers(app, config, store)
    placed = done.result
    live = store.live_reports(config.worker_ttl, done.snapshot.now)
    made = PauseResult if placed.hold.limit is None else ThrottleResult
    result = made(
        placed.hold,
        done.snapshot.state.generation,
        placed.replaced,
        warnings=unmatched(app, config, placing.scope.rule, live),
    )
    record(store, config, pause_entry(result.hold, result.generation, placed.replaced))
    if not wait:
        return result
    return confirmed(
        config, store, result, placing.start_at, timeout, progress, wait_for_lost=wait_for_lost
    )


def confirmed(
    config: PauseConfig,
    store: Store,
    result: PauseResult,
    start: float | None,
    timeout: float,
    progress: Progress | None,
    *,
    wait_for_lost: bool = False,
) -> PauseResult:
    """``result`` with the workers that confirmed it: wait for a scheduled ``start``, then for
    quiet; :class:`PauseTimeout` (carrying ``result``) after ``timeout`` seconds."""
    watch = None if progress is None else lambda workers: progress(result, workers)
    if start is not None:
        wait_for_start(store, start)
    try:
        workers = quiet_workers(
            config,
            store,
            result.generation,
            timeout,
            watch,
            since=start,
            wait_for_lost=wait_for_lost,
        )
    except PauseTimeout as exc:
        raise PauseTimeout(exc.timeout, exc.busy, paused=result, silent=exc.silent) from None
    return replace(result, workers=tuple(workers))


def unmatched(
    app: Celery, config: PauseConfig, rule: Rule, live: Sequence[WorkerReport]
) -> tuple[str, ...]:
    """Warnings for task names, worker names and labels of ``rule`` that match nothing known
    now (a label not in ``pause_labels`` is read from a message header only).

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
    configured = config.labels
    for label in sorted({name.partition("=")[0] for name in rule.labels or ()}):
        if label not in configured:
            warnings.append(
                f"label {label!r} is not in {setting_name(app, 'pause_labels')}; the hold "
                f"covers only tasks sent with a message header {label!r}"
            )
    return tuple(warnings)


def registered_tasks(app: Celery) -> list[str]:
    """The names of the tasks ``app`` defines, its task modules imported as a worker does."""
    try:
        app.loader.import_default_modules()
    except Exception as exc:  # a task module that fails outside a worker: judge by what loaded
        logger.warning("celery-pause: could not import the app's task modules: %r", exc)
    return list(app.tasks)
