"""Spend: a running task says what it really cost, and every cost-weighted limit that covered
it is charged the difference from what its message said (or credits it back).

``celery_pause.spend(tokens=usage.total_tokens)`` inside a task whose message said
``tokens=500``: each limit in force counting ``tokens`` whose scope covers the task (its
queue, name, worker and labels, read as the worker's gate read them) is charged the units
spent over 500, or credited those under it, in its rate's record (:func:`~celery_pause.model.
limit.charge`). The worker charged the message's cost when the task started; this settles it.
"""

from __future__ import annotations

import logging

from celery import Task, current_task

from ..errors import InvalidInput, StoreError
from ..model.content import units
from ..model.limit import Limit, charge
from ..model.limit_keys import rate_key
from ..stores import store_for
from ..stores.primitives import RecordChange
from .running import header_of, limits_over

logger = logging.getLogger(__name__)


def spend(*, task: Task | None = None, **costs: float) -> dict[str, float]:
    """Settle what the running task (``task``, else Celery's current one) cost: each of
    ``costs`` (``tokens=812``) against what its message said, in every cost-weighted limit
    in force counting that cost and covering the task; the units charged (credited:
    negative) per limit's hold id.

    A cost that is no finite number of at least 0 is refused (:class:`InvalidInput`); a
    task not run by a worker (called directly, or eagerly) settles nothing; a store that
    cannot be reached is logged and settles nothing (the task's work is done)."""
    for name, value in costs.items():
        if units(value) is None:
            raise InvalidInput(f"{name} must be a number of at least 0, not {value!r}"[:120])
    task = task if task is not None else (current_task or None)  # a proxy: false without one
    if task is None or task.request.called_directly or task.request.is_eager:
        return {}
    try:
        return _settle(task, {name: float(value) for name, value in costs.items()})
    except StoreError as exc:
        logger.warning("celery-pause: what task %s spent is not counted: %s", task.request.id, exc)
        return {}


def _settle(task: Task, spent: dict[str, float]) -> dict[str, float]:
    store = store_for(task.app)
    snapshot = store.read()
    settled: dict[str, float] = {}
    for hold, key, _ in limits_over(task, snapshot.state, snapshot.now):
        limit = hold.limit
        if limit is None or limit.cost not in spent:
            continue
        difference = min(spent[limit.cost], limit.most_cost) - _said(task, limit)
        if difference:
            updated = store.update_record(rate_key(key), _charging(limit, difference))
            settled[hold.id] = updated.result
    return settled


def _charging(limit: Limit, difference: float) -> RecordChange[float]:
    """The change of a rate's record charging ``difference`` units (crediting, if negative)."""
    return lambda record, now: charge(record, now, limit=limit, units=difference)


def _said(task: Task, limit: Limit) -> float:
    """The cost the worker charged when the task started (its message's, as the gate read
    it: 1 where it said none, or nothing readable)."""
    assert limit.cost is not None
    value = header_of(task, limit.cost)
    if value is None:
        value = (task.request.kwargs or {}).get(limit.cost)
    cost = units(value) if value is not None else None
    return min(1.0 if cost is None else cost, limit.most_cost)
