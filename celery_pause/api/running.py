"""The running task, as the worker's gate read it: where it stands in every dimension of a
scope, its labels and headers, and the limits in force over it; and its publishing again,
unchanged (for :func:`~celery_pause.spend`, :class:`~celery_pause.Overloaded` and the
breaker's tasks, run in the pool process)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from celery import Task

from ..model.content import label_value
from ..model.limit_keys import partition_id
from ..model.scope import Target
from ..model.state import Hold, PauseState
from ..routing import queue_of
from ..settings import config_for

logger = logging.getLogger(__name__)


def limits_over(
    task: Task, state: PauseState, now: float
) -> Iterator[tuple[Hold, str, str | None]]:
    """Each limit in force over the running ``task``: its hold, the id of its records (of a
    limit per label, the partition's), and that partition's label value."""
    target = target_of(task)
    for hold in state.limits(now):
        limit = hold.limit
        if limit is None or not hold.scope.covers(target):
            continue
        if limit.per is None:
            yield hold, hold.id, None
        elif (value := label_of(task, limit.per)) is not None:  # else outside it
            yield hold, partition_id(hold.id, value), value


def target_of(task: Task) -> Target:
    """Where the running task stands in every dimension of a scope, as the gate read it."""
    request = task.request
    labels = config_for(task.app).labels
    found = tuple(
        f"{name}={value}" for name in labels if (value := label_of(task, name)) is not None
    )
    return Target(
        queue=queue_of(task.app, request),
        task=getattr(request, "shadow", None) or task.name,
        worker=request.hostname,
        label=found or None,
    )


def label_of(task: Task, name: str) -> str | None:
    """A label's value: its header, else the keyword argument ``pause_labels`` names."""
    value = header_of(task, name)
    if value is None:
        kwarg = config_for(task.app).labels.get(name)
        value = (task.request.kwargs or {}).get(kwarg) if kwarg else None
    return label_value(value)


def header_of(task: Task, name: str) -> Any:
    """A message header of the running task (the worker hands them over as the request's
    own fields)."""
    return vars(task.request).get(name)


def publish_again(task: Task, delay: float | None, headers: dict[str, Any], why: str) -> bool:
    """Publish the running ``task`` again as it came, its retries unchanged, to run after
    ``delay`` seconds (with ``headers``); whether that worked (logged with ``why`` if not)."""
    request = task.request
    signature = task.signature_from_request(request, countdown=delay, headers=headers)
    try:
        signature.apply_async()
    except Exception as exc:
        logger.error("celery-pause: %s: could not publish %s again: %r", why, request.id, exc)
        return False
    return True
