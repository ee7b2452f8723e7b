"""Waiting for a pause to take hold: a scheduled start, then quiet on every known worker
(a lost worker counted once it surely fenced itself, unless asked to wait for it)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from operator import attrgetter

from celery import Celery

from ..errors import PauseTimeout
from ..model.report import WorkerReport, fenced, known
from ..settings import PauseConfig, config_for
from ..stores import Store, store_for

WAIT_POLL = 0.01
"""Seconds between reads of the workers' reports while waiting for quiet."""
START_POLL = 0.5
"""Most seconds between reads of the store's clock while waiting for a scheduled start."""


def wait_for_start(store: Store, start: float) -> None:
    """Sleep until the store's clock reaches ``start``."""
    while (left := start - store.now()) > 0:
        time.sleep(min(left, START_POLL))


def wait_until_quiet(
    app: Celery,
    generation: int,
    timeout: float,
    progress: Callable[[Sequence[WorkerReport]], None] | None = None,
    *,
    since: float | None = None,
    wait_for_lost: bool = False,
) -> list[WorkerReport]:
    """Poll worker reports until every known worker applied ``generation`` (as the state
    stood at store time ``since`` or later, when given) and is idle in scope, or is lost
    and surely fenced.

    The first poll reads every report, the next ones those of the workers not quiet
    yet. A worker that stopped reporting (silent over ``pause_worker_ttl``) is quiet if
    its last report said so. If not, it keeps the wait from returning until it surely
    fenced itself (:func:`~celery_pause.model.report.fenced`: silent for over
    ``pause_worker_ttl + pause_lease``, and the wait has lasted ``pause_lease``): then
    it can start nothing, and the wait returns its report among the others, not quiet
    (:attr:`PauseResult.lost <celery_pause.PauseResult.lost>`). With ``wait_for_lost``,
    or with ``pause_lease = None`` (a worker never fences), the wait waits for it until
    it reports again and confirms, or is forgotten (``pause_forget_worker_after``).

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
        wait_for_lost: Wait for lost workers too, fenced or not.

    Returns:
        The known workers' reports by hostname (each as last read): every one quiet, or
        lost and fenced.

    Raises:
        PauseTimeout: Some worker was not quiet within ``timeout``; ``.busy`` maps each
            to the task ids it still runs (as last reported), ``.silent`` each that
            stopped reporting to how long ago it last did.
        StoreError: The store cannot be reached.
    """
    return quiet_workers(
        config_for(app),
        store_for(app),
        generation,
        timeout,
        progress,
        since=since,
        wait_for_lost=wait_for_lost,
    )


def quiet_workers(
    config: PauseConfig,
    store: Store,
    generation: int,
    timeout: float,
    progress: Callable[[Sequence[WorkerReport]], None] | None = None,
    *,
    since: float | None = None,
    wait_for_lost: bool = False,
) -> list[WorkerReport]:
    """:func:`wait_until_quiet` for the app whose settings are ``config`` and store ``store``."""
    began = time.monotonic()
    deadline = began + timeout

    def gone(worker: WorkerReport) -> bool:
        """Whether ``worker`` is lost and surely fenced, as of this poll."""
        return not wait_for_lost and fenced(
            worker, ttl=config.worker_ttl, lease=config.lease, waited=waited
        )

    quiet: dict[str, WorkerReport] = {}
    reports = store.worker_reports()
    while True:
        waited = time.monotonic() - began  # before the read: the store's answer is newer
        now = store.now()
        busy: list[WorkerReport] = []
        lost: list[WorkerReport] = []
        for worker in known(reports, now, ttl=config.worker_ttl, forget=config.forget_worker_after):
            if worker.quiet_for(generation, since):
                quiet[worker.hostname] = worker
            else:
                (lost if gone(worker) else busy).append(worker)
        if progress is not None:
            progress(sorted([*quiet.values(), *busy, *lost], key=attrgetter("hostname")))
        if not busy:
            # Every report says quiet (or lost and fenced): read the state's generation only
            # now, once.
            current = store.read().state.generation
            stale = [w for w in quiet.values() if w.generation > current]
            for worker in stale:
                del quiet[worker.hostname]
                (lost if gone(worker) else busy).append(worker)
            if not busy:
                return sorted([*quiet.values(), *lost], key=attrgetter("hostname"))
        if time.monotonic() >= deadline:
            raise PauseTimeout.of(timeout, busy)
        time.sleep(WAIT_POLL)
        # Read again only the workers not quiet yet: one that confirmed holds the scope
        # until a later generation, and one that starts now reads the state before it
        # consumes anything. A busy worker whose report is gone shut down; a lost one that
        # reports again is judged again.
        reports = store.reports_of([w.hostname for w in [*busy, *lost]])
