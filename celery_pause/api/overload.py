"""Overloaded: a task found its downstream overloaded (a 429), and the cluster backs off.

``raise celery_pause.Overloaded(retry_after=1.5)`` inside a task: Celery takes it for a retry
(:class:`~celery.exceptions.Retry`: not a failure), and the pool process that ran the task
(:func:`on_retry`, connected to ``task_retry``)

1. cuts every adaptive limit in force over the task (:func:`~celery_pause.model.adaptive.
   overload`), once per cool-down however many tasks found the overload at once;
2. with ``retry_after``, places a pause of the limit's scope (source ``adaptive``, one per
   limit or partition, extended by a later Retry-After) that resumes by itself once it
   passed, and tells the workers: nothing of the scope starts anywhere until then;
3. publishes the task again, unchanged (its retries untouched), to wait for its turn.

A task no adaptive limit covers is published again to run after ``retry_after`` (one
second without it). A store that cannot be reached cuts nothing (logged); a broker that
cannot take the task again fails it, as Celery's own ``retry`` would.
"""

from __future__ import annotations

import glob
import hashlib
import logging
import math
from dataclasses import replace
from typing import Any

from celery import Task, signals
from celery.exceptions import Retry

from ..control import notify_workers
from ..errors import StoreError
from ..logs import ThrottledLog
from ..model.adaptive import MAX_WAIT, adapt_key, cut_of, overload
from ..model.formatting import printable
from ..model.outcome import Outcome
from ..model.scope import Scope
from ..model.state import Hold, PauseState
from ..settings import config_for
from ..stores import Store, store_for
from .running import limits_over, publish_again

logger = logging.getLogger(__name__)
_warned = ThrottledLog(logger)

ADAPTIVE = "adaptive"
"""The source of the pauses a Retry-After places."""
UNCOVERED_DELAY = 1.0
"""Seconds before a task no adaptive limit covers runs again, without a Retry-After."""


class Overloaded(Retry):
    """Raised by a task whose downstream is overloaded (it answered 429, or 503): the task
    runs again later, unchanged, and every adaptive limit over it slows the cluster.

    Parameters:
        retry_after: Seconds the downstream asked to wait (its ``Retry-After``, as a number
            or a numeric string): nothing of the limit's scope starts before they passed.
            ``None``, a value that is not a finite number of at least 0, or an HTTP date,
            waits for nothing (the cut alone slows the scope); above an hour, an hour.
        why: What the downstream said, shown as the limit's last cut (``"429 from the
            payments API"``; ``overloaded`` by default; control characters are dropped).
    """

    def __init__(self, retry_after: Any = None, why: str | None = None) -> None:
        self.retry_after = seconds(retry_after)
        self.why = printable(why)[:200] if isinstance(why, str) and why else "overloaded"
        wait = "" if self.retry_after is None else f", retry after {self.retry_after:g}s"
        super().__init__(f"{self.why}{wait}", when=self.retry_after)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.retry_after, self.why))


def seconds(value: Any) -> float | None:
    """A Retry-After in seconds: a finite number (or numeric text) of at least 0, at most
    :data:`MAX_WAIT`; ``None`` for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str, bytes)):
        return None
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return None
    if not math.isfinite(number) or number < 0:
        return None
    return min(number, MAX_WAIT)


def on_retry(sender: Task | None = None, request: Any = None, reason: Any = None, **_: Any) -> None:
    """Celery's ``task_retry``, in the pool process: back off from an :class:`Overloaded`."""
    if not isinstance(reason, Overloaded) or sender is None or request is None:
        return
    if request.called_directly or request.is_eager:
        return
    try:
        covered = cut_limits(sender, reason)
    except StoreError as exc:
        _warned.error("celery-pause: overload of %s not counted: %s", request.id, exc)
        covered = False
    except Exception:  # a defect must not lose the task: it still goes back
        logger.exception("celery-pause: overload of %s not counted", request.id)
        covered = False
    delay = None if covered else (reason.retry_after or UNCOVERED_DELAY)
    if not covered:
        _warned.warning(
            "celery-pause: %s raised Overloaded outside any adaptive limit: it runs again "
            "in %gs (throttle --adaptive its scope to slow the cluster)",
            sender.name,
            delay,
        )
    headers = dict(request.headers or {})
    if not publish_again(sender, delay, headers, "overloaded"):
        lost = RuntimeError("Overloaded, and the broker did not take the task again")
        sender.backend.mark_as_failure(request.id, lost, request=request)


signals.task_retry.connect(on_retry, weak=False)


def cut_limits(task: Task, overloaded: Overloaded) -> bool:
    """Cut every adaptive limit over the running ``task`` and hold its scope for the
    Retry-After; whether one covers it."""
    app = task.app
    store = store_for(app)
    snapshot = store.read()
    by = task.request.hostname or "a worker"
    covered, paused = False, False
    for hold, key, value in limits_over(task, snapshot.state, snapshot.now):
        if hold.limit is None or not hold.limit.adaptive:
            continue
        covered = True
        updated = store.update_record(
            adapt_key(key),
            lambda record, now: overload(
                record, now, why=overloaded.why, retry_after=overloaded.retry_after
            ),
        )
        cut = cut_of(updated.record)
        if updated.result is not None:
            logger.warning(
                "celery-pause: %s cut to %.0f%% of its ceiling: %s",
                hold.limit.describe(),
                100 * updated.result.level(updated.result.at),
                overloaded.why,
            )
        if updated.changed and cut is not None and cut.until is not None:
            paused = _hold_off(store, hold, key, value, cut.until, by, overloaded.why) or paused
    if paused:
        notify_workers(app, config_for(app), store)
    return covered


def _hold_off(
    store: Store, limit: Hold, key: str, value: str | None, until: float, by: str, why: str
) -> bool:
    """Pause ``limit``'s scope (of a partition: its label value's) until store time
    ``until``; whether the state changed."""
    hold_id = hashlib.blake2b(f"{ADAPTIVE}:{key}".encode(), digest_size=6).hexdigest()
    scope = limit.scope
    assert limit.limit is not None
    if value is not None and limit.limit.per is not None and scope.rule.labels is None:
        label = f"{limit.limit.per}={glob.escape(value)}"
        scope = Scope(frozenset({replace(scope.rule, labels=frozenset({label}))}))

    def add(state: PauseState, now: float) -> Outcome[PauseState, None]:
        if until <= now:
            return Outcome(None, None)
        held = next((h for h in state.live_holds(now) if h.id == hold_id), None)
        if held is not None and (held.resume_at or math.inf) >= until:
            return Outcome(None, None)
        pause = Hold(
            scope=scope,
            source=ADAPTIVE,
            paused_by=by,
            reason=f"Retry-After of an adaptive limit: {why}",
            paused_at=now,
            resume_at=until,
            id=hold_id,
        )
        others = [h for h in state.live_holds(now) if h.id != hold_id]
        return Outcome(state.with_holds([*others, pause]), None)

    return store.update(add).changed
