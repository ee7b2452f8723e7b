"""Resume: check, lift holds by scope or by id (a pure rule), write, notify, record."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from celery import Celery

from ..control import notify_workers
from ..errors import InvalidInput
from ..history import CANCEL, RESUME, record, resume_entry
from ..model.lifting import Lifted, Lifting, lift
from ..model.scope import Scope
from ..model.state import Hold
from ..model.validation import Labels, check_ramp, check_scope
from ..settings import PauseConfig, config_for
from ..stores import Snapshot, Store, store_for
from .operator import operator
from .results import ResumeResult
from .status import in_force


def resume(
    app: Celery,
    *,
    queues: Iterable[str] | str | None = None,
    tasks: Iterable[str] | str | None = None,
    workers: Iterable[str] | str | None = None,
    labels: Labels = None,
    hold: str | None = None,
    force: bool = False,
    by: str | None = None,
    ramp: timedelta | float | None = None,
    notify: bool = True,
    resumed_by: str | None = None,
) -> ResumeResult:
    """Lift the active manual holds within ``queues``, ``tasks`` and ``workers``, or exactly
    the hold whose id is ``hold``.

    A hold the resume's scope contains is removed. A hold that differs from it in
    one dimension only, where both list names, loses the names resumed (a hold on
    queues a and b, resumed for a, holds b on). Any other overlap would leave a
    hold that is no list of names (resuming queue a of a hold on every queue) and
    raises :class:`InvalidInput` before anything changes. Scheduled holds (not
    started yet) stay: cancel one by its id. A pure rule,
    :func:`~celery_pause.model.lifting.lift`, decides the next state.

    Parameters:
        app: The Celery app whose cluster to resume.
        queues: The queues to resume (every one by default).
        tasks: The task names to resume (every one by default); patterns allowed.
        workers: The workers to resume (every one by default); patterns allowed.
        labels: The labels ``NAME=VALUE`` to resume (every task by default), or a mapping
            (``{"tenant": "acme"}``), as :func:`~celery_pause.pause` takes them.
        hold: Lift exactly this hold (``pause status`` shows the ids) instead of a scope:
            a manual hold, active or scheduled (a breaker's with ``force``), or a
            maintenance window's current occurrence (ended early) or next one (skipped):
            ``window:<name>:<start>``, or ``window:<name>`` for whichever comes first.
        force: Also lift holds owned by a circuit breaker, and a hold standing for
            unreadable state, by the same rules (leaving whole those it cannot split), and
            end the current occurrence of a maintenance window the scope contains.
        by: Who resumes, recorded in the history; ``user@host`` by default.
        ramp: Resume gradually (seconds or a ``timedelta``, at most a day): over that time
            the cluster's start rate for what was lifted rises linearly to
            ``pause_ramp_peak`` tasks per second, then is unlimited (see
            :mod:`celery_pause.model.ramp`).
        notify: Broadcast ``pause_refresh``; with ``False`` the workers apply the change at
            their next poll.
        resumed_by: ``by``, as earlier releases spelled it (deprecated).

    Returns:
        The holds removed and cancelled, and those that still pause some of the scope
        (``remaining``) or are scheduled in it (``scheduled``).

    Raises:
        InvalidInput: An argument is out of bounds, both a hold id and a scope are given,
            no hold has that id, what would remain of a hold is no list of names, or a
            ramp finds nothing paused in the scope.
        StoreError: The store cannot be reached.
    """
    scope = check_scope({"queues": queues, "tasks": tasks, "workers": workers, "labels": labels})
    seconds = check_ramp(ramp)
    by = operator(by, resumed_by=resumed_by)
    if hold is not None and (not isinstance(hold, str) or not scope.everything):
        raise InvalidInput("give a hold id, or a scope (queues, tasks, workers), not both")
    config = config_for(app)
    store = store_for(app)
    lifting = Lifting(
        scope=scope,
        hold_id=hold,
        force=force,
        windows=tuple(config.windows),
        ramp=seconds,
        peak=config.ramp_peak,
        by=by,
    )
    done = store.update(lambda state, now: lift(state, now, lifting))
    if done.changed and notify:
        notify_workers(app, config, store)
    lifted = done.result
    scope = lifting.scope if hold is None else (lifted.removed + lifted.cancelled)[0].scope
    record_resume(store, config, done.snapshot, lifted, scope, by=by, force=force)
    return result_of(config, done.snapshot, lifted, scope)


def record_resume(
    store: Store,
    config: PauseConfig,
    snapshot: Snapshot,
    lifted: Lifted,
    scope: Scope,
    *,
    by: str,
    force: bool,
) -> None:
    """Add a history entry for the holds ``lifted`` removed, and one for those it cancelled."""
    for action, holds in ((RESUME, lifted.removed), (CANCEL, lifted.cancelled)):
        if holds:
            entry = resume_entry(
                at=snapshot.now,
                scope=scope,
                by=by,
                generation=snapshot.state.generation,
                removed=list(holds),
                kept=snapshot.state.holds,
                forced=force,
                action=action,
                ramp=_duration(lifted.ramps) if action == RESUME else None,
            )
            record(store, config, entry)


def result_of(
    config: PauseConfig, snapshot: Snapshot, lifted: Lifted, scope: Scope
) -> ResumeResult:
    """What a resume of ``scope`` returns, once it lifted ``lifted`` into ``snapshot``."""
    current = in_force(config, snapshot)
    now = snapshot.now
    return ResumeResult(
        lifted.removed,
        tuple(h for h in current.active_holds(now) if h.scope.overlaps(scope) and not h.ramp),
        snapshot.state.generation,
        cancelled=lifted.cancelled,
        scheduled=tuple(h for h in current.scheduled_holds(now) if h.scope.overlaps(scope)),
        now=now,
        ramps=lifted.ramps,
    )


def _duration(ramps: tuple[Hold, ...]) -> float | None:
    """Seconds the ramped resume ``ramps`` lasts (``None``: no ramp)."""
    rise = ramps[0].limit.rise if ramps and ramps[0].limit else None
    return None if rise is None else rise[1]
