"""The cluster's status: the holds in force and every known worker's report."""

from __future__ import annotations

from celery import Celery

from ..errors import UnreadableRecord
from ..model.adaptive import adapt_key
from ..model.limit import Limit, Record
from ..model.limit_keys import rate_key, records_prefix, slots_key
from ..model.report import known
from ..model.state import PauseState
from ..model.usage import Usage
from ..model.windows import with_windows
from ..settings import PauseConfig, config_for
from ..stores import Snapshot, Store, store_for
from .results import ClusterStatus


def status(app: Celery) -> ClusterStatus:
    """The holds (with the maintenance windows' occurrences), the paused scope and every
    known worker's report (those that stopped reporting marked ``silent``).

    Parameters:
        app: The Celery app whose cluster to read.

    Returns:
        The holds (``holds``: active ones, windows' occurrences included; ``scheduled``:
        those that start later), the effective paused scope, how much of each limit is used
        (``usage``), and every live worker's
        report (hostname, applied generation, paused queues, running task ids in scope,
        held count, last seen, ``as_of``).

    Raises:
        StoreError: The store cannot be reached.
    """
    store = store_for(app)
    config = config_for(app)
    snapshot, reports = store.read_with_reports()
    state = in_force(config, snapshot)
    used, unread = usage(store, state, snapshot.now)
    return ClusterStatus(
        state=state,
        now=snapshot.now,
        paused=state.paused(snapshot.now),
        workers=tuple(
            known(reports, snapshot.now, ttl=config.worker_ttl, forget=config.forget_worker_after)
        ),
        store=store.display_url,
        queues=tuple(app.amqp.queues),
        store_warnings=(*store.warnings(), *unread),
        usage=used,
    )


def usage(store: Store, state: PauseState, now: float) -> tuple[dict[str, Usage], list[str]]:
    """How much of each active limit the cluster uses, by hold id (of a limit per label:
    how many values use it, and the busiest); and a warning for each limit whose records
    cannot be read (its use is left out; the limit stays in force)."""
    used: dict[str, Usage] = {}
    unread: list[str] = []
    for hold in state.limits(now):
        if hold.limit is None or hold.ramp:
            continue
        try:
            used[hold.id] = _usage_of(store, hold.id, hold.limit, now)
        except (UnreadableRecord, TypeError, ValueError) as exc:
            unread.append(f"limit {hold.id}: its use is not shown: {exc}"[:300])
    return used, unread


def _usage_of(store: Store, hold_id: str, limit: Limit, now: float) -> Usage:
    if limit.per is not None:
        return Usage.of_partitions(limit, partition_records(store, hold_id), now)
    return Usage.of(
        limit,
        store.read_record(slots_key(hold_id)) if limit.concurrency else None,
        store.read_record(rate_key(hold_id)) if limit.rate else None,
        now,
        store.read_record(adapt_key(hold_id)) if limit.adaptive else None,
    )


def partition_records(store: Store, hold_id: str) -> dict[str, Record]:
    """The records of the partitions of hold ``hold_id``'s limit per label, keyed by what
    follows :func:`~celery_pause.model.limit.records_prefix`."""
    prefix = records_prefix(hold_id)
    return {key[len(prefix) :]: record for key, record in store.read_records(prefix).items()}


def in_force(config: PauseConfig, snapshot: Snapshot) -> PauseState:
    """The state read, with the app's maintenance windows' current and next occurrences."""
    return with_windows(snapshot.state, config.windows, snapshot.now)
