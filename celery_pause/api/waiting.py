"""Waiting for a pause to take hold: a scheduled start, then quiet on every known worker."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from operator import attrgetter

from celery import Celery

from ..errors import PauseTimeout
from ..model.report import WorkerReport, known
from ..settings import config_for
from ..stores import store_for

WAIT_POLL = 0.01
"""Seconds between reads of the workers' reports while waiting for quiet."""
START_POLL = 0.5
"""Most seconds between reads of the store's clock while waiting for a scheduled start."""


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
    """Poll worker reports until every known worker applied ``generation`` (as the state
    stood at store time ``since`` or later, when given) and is idle in scope.

    The first poll reads every report, the next ones those of the workers not quiet
    yet. A worker that stopped reporting (silent over ``pause_worker_ttl``) still counts
    until ``pause_forget_worker_after``: quiet if its last report said so, else it
    keeps the wait from confirming, for it may still start tasks in scope.

    A report of a generation above the stored one predates a reset of the state
    (the state was lost, or unreadable and then repaired, which restarts the
    count): that worker has not read the current state yet, so it is not quiet.

    Parameters:
        app: The Celery app whose workers to wait for.
        generation: The generation of the state every live worker must have applied
            (:attr:`PauseResult.generation`, :attr:`ResumeResult.generation`).
        timeout: Seconds to wait at most.
        progress: Called with the known workers' reports at every poll.
        since: A store time the workers' read of the state must be as recent as (the
            start of a scheduled pause).

    Returns:
        The known workers' reports, every one quiet, by hostname (each as last read).

    Raises:
        PauseTimeout: Some worker was not quiet within ``timeout``; ``.busy`` maps each
            to the task ids it still runs (as last reported), ``.silent`` each that
            stopped reporting to how long ago it last did.
        StoreError: The store cannot be reached.
    """
    store = store_for(app)
    config = config_for(app)
    deadline = time.monotonic() + timeout
    quiet: dict[str, WorkerReport] = {}
    reports = store.worker_reports()
    while True:
        now = store.now()
        busy = []
        for worker in known(reports, now, ttl=config.worker_ttl, forget=config.forget_worker_after):
            if worker.quiet_for(generation, since):
                quiet[worker.hostname] = worker
            else:
                busy.append(worker)
        if progress is not None:
            progress(sorted([*quiet.values(), *busy], key=attrgetter("hostname")))
        if not busy:
            # Every report says quiet: read the state's generation only now, once.
            current = store.read().state.generation
            busy = [w for w in quiet.values() if w.generation > current]
            if not busy:
                return sorted(quiet.values(), key=attrgetter("hostname"))
            for worker in busy:
                del quiet[worker.hostname]
        if time.monotonic() >= deadline:
            raise PauseTimeout.of(timeout, busy)
        time.sleep(WAIT_POLL)
        # Read again only the workers not quiet yet: one that confirmed holds the scope
        # until a later generation, and one that starts now reads the state before it
        # consumes anything. A busy worker whose report is gone shut down.
        reports = store.reports_of([w.hostname for w in busy])
