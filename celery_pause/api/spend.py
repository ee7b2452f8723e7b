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
from typing import Any

from celery import Task, current_task

from ..errors import InvalidInput, StoreError
from ..model.content import label_value, units
from ..model.limit import Limit, charge, partition_id, rate_key
from ..model.scope import Target
from ..routing import queue_of
from ..settings import config_for
from ..stores import store_for
from ..stores.primitives import RecordChange

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
    app = task.app
    store = store_for(app)
    snapshot = store.read()
    target = _target(task)
    settled: dict[str, float] = {}
    for hold in snapshot.state.limits(snapshot.now):
        limit = hold.limit
        if limit is None or limit.cost not in spent or not hold.scope.covers(target):
            continue
        key = hold.id
        if limit.per is not None:
            value = _label(task, limit.per)
            if value is None:
                continue  # outside a limit per label without the label
            key = partition_id(hold.id, value)
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
    value = _header(task, limit.cost)
    if value is None:
        value = (task.request.kwargs or {}).get(limit.cost)
    cost = units(value) if value is not None else None
    return min(1.0 if cost is None else cost, limit.most_cost)


def _target(task: Task) -> Target:
    """Where the task stands in every dimension of a scope, as the gate read it."""
    request = task.request
    labels = config_for(task.app).labels
    found = tuple(f"{name}={value}" for name in labels if (value := _label(task, name)) is not None)
    return Target(
        queue=queue_of(task.app, request),
        task=getattr(request, "shadow", None) or task.name,
        worker=request.hostname,
        label=found or None,
    )


def _label(task: Task, name: str) -> str | None:
    """A label's value: its header, else the keyword argument ``pause_labels`` names."""
    value = _header(task, name)
    if value is None:
        kwarg = config_for(task.app).labels.get(name)
        value = (task.request.kwargs or {}).get(kwarg) if kwarg else None
    return label_value(value)


def _header(task: Task, name: str) -> Any:
    """A message header of the running task (the worker hands them over as the request's
    own fields)."""
    return vars(task.request).get(name)
