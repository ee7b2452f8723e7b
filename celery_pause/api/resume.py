"""Resume: lift holds by scope or by id, optionally through a ramp."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import timedelta

from celery import Celery

from ..control import notify_workers
from ..errors import InvalidInput
from ..history import CANCEL, RESUME, record, resume_entry
from ..model.lifting import Lifted, lift_hold, lift_scope
from ..model.ramp import Ramp, count_sharers
from ..model.scope import NOTHING, Scope
from ..model.state import Hold, PauseState
from ..model.validation import check_queues, check_ramp, check_tasks, check_workers
from ..settings import config_for
from ..stores import store_for
from .operator import default_operator
from .results import ResumeResult
from .status import in_force


def resume(
    app: Celery,
    *,
    queues: Iterable[str] | str | None = None,
    tasks: Iterable[str] | str | None = None,
    workers: Iterable[str] | str | None = None,
    hold: str | None = None,
    force: bool = False,
    resumed_by: str | None = None,
    ramp: timedelta | float | None = None,
    notify: bool = True,
) -> ResumeResult:
    """Lift the active manual holds within ``queues``, ``tasks`` and ``workers`` (each every
    one by default), or exactly the hold whose id is ``hold``.

    A hold the resume's scope contains is removed. A hold that differs from it in
    one dimension only, where both list names, loses the names resumed (a hold on
    queues a and b, resumed for a, holds b on). Any other overlap would leave a
    hold that is no list of names (resuming queue a of a hold on every queue) and
    raises :class:`InvalidInput` before anything changes. Holds owned by a circuit
    breaker stay unless ``force=True``, which lifts them (and a hold standing for
    unreadable state) by the same rules, leaving whole those it cannot split; with
    ``force`` the current occurrence of a maintenance window the scope contains ends.
    Scheduled holds (not started yet) stay: cancel one by its id.

    ``hold`` lifts one hold by id (``pause status`` shows them): a manual hold, active or
    scheduled (breakers' with ``force``), or a maintenance window's current occurrence
    (ended early) or next one (skipped): ``window:<name>:<start>``, or ``window:<name>``
    for whichever comes first. ``resumed_by`` (default ``user@host``) is recorded in the
    history. With ``notify=False`` workers apply the change at their next poll.

    ``ramp`` (seconds or a timedelta, at most a day) resumes gradually: over that time the
    cluster's start rate for what was lifted rises linearly to ``pause_ramp_peak`` tasks
    per second, then is unlimited (see :mod:`celery_pause.model.ramp`). Raises
    :class:`InvalidInput` if nothing in the scope is paused.
    """
    names = (check_queues(queues), check_tasks(tasks), check_workers(workers))
    seconds = check_ramp(ramp)
    if hold is not None and (not isinstance(hold, str) or any(n is not None for n in names)):
        raise InvalidInput("give a hold id, or a scope (queues, tasks, workers), not both")
    scope = Scope.of(names[0], tasks=names[1], workers=names[2])
    config = config_for(app)
    windows = config.windows
    lifted = Lifted()
    store = store_for(app)
    # The live workers share a ramp's rate: read once, and only for a ramp.
    live = store.live_reports(config.worker_ttl, store.now()) if seconds is not None else []
    hosts = [report.hostname for report in live]
    by = resumed_by or default_operator()
    recorded: list[Ramp] = []

    def lift(state: PauseState, now: float) -> PauseState | None:
        following: PauseState | None
        if hold is not None:
            following = lift_hold(state, now, hold, force=force, windows=windows, lifted=lifted)
        else:
            following = lift_scope(state, now, scope, force=force, windows=windows, lifted=lifted)
        if seconds is None:
            return following
        lifts = scope if hold is None else NOTHING
        resumed = ramped_scope(lifted.removed, lifts)
        if following is None or not resumed:
            raise InvalidInput(f"nothing to ramp: {scope.describe()} is not paused")
        ramp = Ramp(
            resumed,
            start=now,
            duration=seconds,
            peak=config.ramp_peak,
            sharers=count_sharers(resumed, hosts),
            by=by,
        )
        recorded[:] = [ramp]
        return following.with_ramp(ramp, now)

    snapshot, changed = store.update(lift)
    if changed and notify:
        notify_workers(app)
    current = in_force(app, snapshot)
    if hold is not None:
        scope = (lifted.removed + lifted.cancelled)[0].scope
    remaining = tuple(h for h in current.active_holds(snapshot.now) if h.scope.overlaps(scope))
    scheduled = tuple(h for h in current.scheduled_holds(snapshot.now) if h.scope.overlaps(scope))
    for action, holds in ((RESUME, lifted.removed), (CANCEL, lifted.cancelled)):
        if holds:
            entry = resume_entry(
                at=snapshot.now,
                scope=scope,
                by=by,
                generation=snapshot.state.generation,
                removed=holds,
                kept=snapshot.state.holds,
                forced=force,
                action=action,
                ramp=seconds if action == RESUME else None,
            )
            record(app, entry)
    return ResumeResult(
        tuple(lifted.removed),
        remaining,
        snapshot.state.generation,
        cancelled=tuple(lifted.cancelled),
        scheduled=scheduled,
        now=snapshot.now,
        ramp=recorded[0] if recorded else None,
    )


def ramped_scope(removed: Sequence[Hold], scope: Scope) -> Scope:
    """What lifting ``removed`` by a resume of ``scope`` resumes (all of each hold when
    ``scope`` is empty: a resume by hold id)."""
    resumed = NOTHING
    for hold in removed:
        resumed = resumed | (hold.scope & scope if scope else hold.scope)
    return resumed
