"""A circuit breaker shared by the whole cluster, that pauses its queues while open.

Define it at module level and attach it to tasks with the task base::

    payments = CircuitBreaker("payments-api", fail_max=5, window=60, reset_timeout=30,
                              exceptions=(ConnectionError, TimeoutError), queues=["payments"])

    @app.task(base=BreakerTask, breaker=payments)
    def charge(order_id): ...

Counted failures go to a sliding window in the pause store, shared by every
worker. At ``fail_max`` failures the breaker opens: it adds a hold with source
``breaker:<name>`` on its queues, and the pause takes over. A task that failed
with a counted exception is published again to its own queue, unchanged (same
id, arguments and retry count), so it runs once the breaker closes. The worker
side (:mod:`celery_pause.breaker.agent`) runs the half-open period: one worker
holds the probe lease, runs the probe or lets a bounded number of trial tasks
through, and the outcome closes or re-opens the breaker. With ``ramp`` the
breaker closes gradually: removing its hold starts a ramped resume of the hold's
scope (:mod:`celery_pause.model.ramp`), and a counted failure while that ramp lasts
re-opens it at once.

This module holds the options and the operations on the breaker's record and
hold, used from every place a breaker's code runs.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

from celery import Celery

from ..control import notify_workers
from ..errors import InvalidInput, StoreError
from ..model.formatting import format_time
from ..model.outcome import Outcome
from ..model.scope import Scope
from ..model.state import BREAKER_PREFIX, Hold, PauseState
from ..model.validation import (
    check_count,
    check_exceptions,
    check_limit,
    check_positive,
    check_queues,
    check_ramp,
)
from ..settings import config_for
from ..stores import Store, store_for
from ..stores.base import RecordUpdated
from ..stores.primitives import Record, lease_key
from .record import CLOSED, BreakerRecord, Policy, R, Rule

logger = logging.getLogger(__name__)

NAME = re.compile(r"[A-Za-z0-9_.@-]{1,100}\Z")
RECORD_PREFIX = BREAKER_PREFIX
"""Prefix of a breaker's record, failure window and probe lease keys in the store."""
MAX_ERROR = 200

Probe = Callable[[], Any]


class CircuitBreaker:
    """A breaker for one dependency, shared by every worker through the pause store.

    Parameters (everything after ``name`` is keyword-only):

    - ``name``: identifies the breaker in the store and in its hold's source.
    - ``fail_max`` (5): counted failures within ``window`` seconds (60) that open it.
    - ``reset_timeout`` (30): seconds open before the first half-open period; each
      failed period multiplies it by ``backoff_factor`` (2), up to
      ``max_reset_timeout`` (ten times ``reset_timeout``).
    - ``exceptions`` ((ConnectionError, TimeoutError)): the exceptions that count.
    - ``queues`` (None): the queues its hold pauses; by default it pauses exactly the
      tasks that use it, in every queue, so a breaker never stops unrelated work.
    - ``probe`` (None): a callable run by the one worker holding the probe lease;
      it fails by raising or returning ``False``. Without it, ``half_open_trials``
      (1) real tasks are let through instead.
    - ``success_threshold`` (1): successes that close it, at most ``half_open_trials``
      when trial tasks are the probe.
    - ``lease_ttl`` (30): expiry of the probe lease, renewed by a live holder.
    - ``probe_timeout`` (30): a probe call running longer counts as failed.
    - ``trial_timeout`` (300): a trial task that reports nothing for this long
      counts as failed.
    - ``requeue_delay`` (5): countdown of a counted failure re-published into a
      queue the breaker does not (yet) pause; ``max_requeues`` (10) such
      re-publishes of one task, after which its failure takes its normal course.
    - ``ramp`` (None): seconds (or a timedelta, at most a day) to close over: when
      it closes, its tasks' start rate rises from a trickle to ``pause_ramp_peak``
      per second over that time, as with ``resume(ramp=...)``, and one counted
      failure before the ramp ends re-opens it at once. A forced resume does not ramp.
    - ``throttle`` (None): a rate (``"5/s"``, as ``throttle(rate=...)`` takes it): while
      open, its hold *limits* its tasks to that rate across the cluster instead of pausing
      them, for a dependency that answers "too many requests" rather than being down. Its
      tasks run while it is open (a counted failure goes back to its queue as before);
      the probe, or while half-open the first tasks to start, decide when it closes.
    - ``adaptive`` (False): with ``throttle``, the rate is a ceiling (``throttle(...,
      adaptive=True)``): each counted failure while open cuts it, as does a task that
      raises :class:`~celery_pause.Overloaded` (which also honours its Retry-After).
    """

    def __init__(
        self,
        name: str,
        *,
        fail_max: int = 5,
        window: float = 60.0,
        reset_timeout: float = 30.0,
        exceptions: Iterable[type[BaseException]] = (ConnectionError, TimeoutError),
        queues: Iterable[str] | str | None = None,
        probe: Probe | None = None,
        half_open_trials: int = 1,
        success_threshold: int = 1,
        backoff_factor: float = 2.0,
        max_reset_timeout: float | None = None,
        lease_ttl: float = 30.0,
        probe_timeout: float = 30.0,
        trial_timeout: float = 300.0,
        requeue_delay: float = 5.0,
        max_requeues: int | None = 10,
        ramp: timedelta | float | None = None,
        throttle: str | float | None = None,
        adaptive: bool = False,
    ) -> None:
        if not isinstance(name, str) or not NAME.match(name):
            raise InvalidInput(
                f"breaker name must be 1-100 of A-Z a-z 0-9 _ . @ -, got {str(name)[:60]!r}"
            )
        self.name = name
        self.exceptions = check_exceptions(exceptions)
        self.probe = probe
        if probe is not None and not callable(probe):
            raise InvalidInput(f"probe must be callable, got {type(probe).__name__}")
        self.queues = check_queues(queues)
        self.fail_max = check_count("fail_max", fail_max)
        self.window = _seconds("window", window)
        self.reset_timeout = _seconds("reset_timeout", reset_timeout)
        self.max_reset_timeout = (
            10 * self.reset_timeout
            if max_reset_timeout is None
            else _seconds("max_reset_timeout", max_reset_timeout)
        )
        if self.max_reset_timeout < self.reset_timeout:
            raise InvalidInput("max_reset_timeout must be at least reset_timeout")
        self.backoff_factor = float(backoff_factor)
        if not self.backoff_factor >= 1:
            raise InvalidInput(f"backoff_factor must be at least 1, got {backoff_factor!r}")
        self.half_open_trials = check_count("half_open_trials", half_open_trials)
        self.success_threshold = check_count("success_threshold", success_threshold)
        if probe is None and self.success_threshold > self.half_open_trials:
            raise InvalidInput(
                f"success_threshold ({success_threshold}) cannot exceed half_open_trials "
                f"({half_open_trials}): trial tasks are the only evidence without a probe"
            )
        self.lease_ttl = _seconds("lease_ttl", lease_ttl)
        self.probe_timeout = _seconds("probe_timeout", probe_timeout)
        self.trial_timeout = _seconds("trial_timeout", trial_timeout)
        self.requeue_delay = _seconds("requeue_delay", requeue_delay)
        if max_requeues is not None:
            max_requeues = check_count("max_requeues", max_requeues)
        self.max_requeues = max_requeues
        self.ramp = check_ramp(ramp)
        if adaptive and throttle is None:
            raise InvalidInput("adaptive needs throttle: the rate it adapts below")
        self.limit = None if throttle is None else check_limit(throttle, None, adaptive=adaptive)
        self.policy = Policy(
            fail_max=self.fail_max,
            window=self.window,
            reset_timeout=self.reset_timeout,
            max_reset_timeout=self.max_reset_timeout,
            backoff_factor=self.backoff_factor,
            half_open_trials=self.half_open_trials,
            success_threshold=self.success_threshold,
            queues=None if self.queues is None else tuple(self.queues),
        )
        self.last_read: tuple[float, BreakerRecord] | None = None

    @property
    def key(self) -> str:
        """Key of its record, failure window and probe lease in the store."""
        return RECORD_PREFIX + self.name

    @property
    def source(self) -> str:
        """Source of its hold."""
        return BREAKER_PREFIX + self.name

    def counts(self, exc: BaseException) -> bool:
        """Whether ``exc`` is a failure of the dependency."""
        return isinstance(exc, self.exceptions)

    def reset(self, app: Celery) -> None:
        """Forget the breaker's state and remove its holds: it starts closed.

        The way out of an unreadable record; failures counted so far are dropped.
        """
        store = store_for(app)

        def drop(state: PauseState, now: float) -> Outcome[PauseState, None]:
            kept = [hold for hold in state.holds if hold.source != self.source]
            if len(kept) == len(state.holds):
                return Outcome(None, None)
            return Outcome(state.with_holds(kept), None)

        dropped = store.update(drop)
        store.delete_record(self.key)
        store.clear_events(self.key)
        store.delete_record(lease_key(self.key))
        if dropped.changed:
            notify_workers(app, config_for(app), store)
        logger.warning("celery-pause: circuit %s reset", self.name)

    def __repr__(self) -> str:
        guarded = "its tasks" if self.queues is None else Scope.of(self.queues).describe()
        return f"<CircuitBreaker {self.name} {guarded}>"

    def guards(self, queue: str) -> bool:
        """Whether a task of this breaker from ``queue`` waits while it is open: with
        ``queues`` only from those; without, from any queue."""
        return self.queues is None or queue in self.queues

    def hold_scope(self, app: Celery) -> Scope:
        """What its hold pauses: its ``queues``, or else exactly the tasks that use it."""
        if self.queues is not None:
            return Scope.of(self.queues)
        return Scope.of(tasks=sorted(breakers_tasks(app, self)) or None)

    # -- the record ---------------------------------------------------------------------
    def read(self, store: Store) -> BreakerRecord:
        """The record (closed if there is none); :class:`StoreError` if unreadable."""
        try:
            return BreakerRecord.from_json(self.name, store.read_record(self.key))
        except ValueError as exc:
            raise StoreError(str(exc)) from None

    def change(
        self, store: Store, transition: Callable[[BreakerRecord, float], BreakerRecord | None]
    ) -> tuple[BreakerRecord, bool]:
        """Apply ``transition`` to the record atomically; the record and whether it changed."""
        done = self._update(store, lambda record, now: Outcome(transition(record, now), None))
        return BreakerRecord.from_json(self.name, done.record), done.changed

    def decide(self, store: Store, rule: Rule[R]) -> tuple[BreakerRecord, R]:
        """Apply ``rule`` to the record atomically; the record, and the result of the attempt
        that committed."""
        done = self._update(store, rule)
        return BreakerRecord.from_json(self.name, done.record), done.result

    def _update(self, store: Store, rule: Rule[R]) -> RecordUpdated[R]:

        def apply(data: Record | None, now: float) -> Outcome[Record, R]:
            try:
                record = BreakerRecord.from_json(self.name, data)
            except ValueError as exc:
                raise StoreError(str(exc)) from None
            outcome = rule(record, now)
            if outcome.value is not None:
                return Outcome(outcome.value.with_policy(self.policy).to_json(), outcome.result)
            first = None if data is not None else record.with_policy(self.policy).to_json()
            return Outcome(first, outcome.result)

        return store.update_record(self.key, apply)

    # -- the hold -----------------------------------------------------------------------
    def place_hold(self, app: Celery, store: Store, record: BreakerRecord, paused_by: str) -> None:
        """Make sure the hold of ``record``'s open period is in the pause state."""
        hold_id = record.hold_id
        if hold_id is None:
            return
        during = " during its ramp" if record.failures < self.fail_max else ""
        reason = (
            f"circuit {self.name} open: {record.failures} failures in {self.window:g}s{during}; "
            f"last: {record.last_error}"
        )

        scope = self.hold_scope(app)

        def add(state: PauseState, now: float) -> Outcome[PauseState, None]:
            if any(hold.id == hold_id for hold in state.holds):
                return Outcome(None, None)
            hold = Hold(
                scope=scope,
                source=self.source,
                paused_by=paused_by,
                reason=reason,
                paused_at=now,
                id=hold_id,
                limit=self.limit,
            )
            # The pause wins over a ramp anyway; dropped, a forced resume cannot revive it.
            following = state.with_holds([*state.live_holds(now), hold])
            return Outcome(following.without_ramps(self.source), None)

        added = store.update(add)
        self.change(store, lambda rec, now: rec.placed(hold_id))
        if added.changed:
            notify_workers(app, config_for(app), store)
            logger.warning("celery-pause: %s", reason)

    def drop_hold(
        self, app: Celery, store: Store, hold_id: str, closed: BreakerRecord | None = None
    ) -> None:
        """Remove this breaker's hold ``hold_id``, and no other hold. With ``closed``, the
        record of the close that ended the hold's period, the same update starts the ramp
        the breaker closed with (if any) on the hold's scope."""
        ramping = closed if closed and closed.hold_id == hold_id and closed.ramp_until else None
        config = config_for(app)

        def drop(state: PauseState, now: float) -> Outcome[PauseState, None]:
            dropped = [hold for hold in state.holds if hold.id == hold_id]
            if not dropped:
                return Outcome(None, None)
            following = state.with_holds(h for h in state.holds if h.id != hold_id)
            scope = dropped[0].scope
            ramps = ramping.ramp_on(scope, config.ramp_peak, self.source) if ramping else ()
            live = [ramp for ramp in ramps if ramp.live(now)]
            return Outcome(following.with_ramps(live, now) if live else following, None)

        if store.update(drop).changed:
            notify_workers(app, config_for(app), store)

    def after_close(self, app: Celery, store: Store, record: BreakerRecord) -> None:
        """Once the record is closed: remove its hold (starting its ramp, if it closed with
        one) and start counting afresh."""
        if record.hold_id is not None:
            self.drop_hold(app, store, record.hold_id, closed=record)
        store.clear_events(self.key)
        self.last_read = None
        ramp = f", ramping up until {format_time(record.ramp_until)}" if record.ramp_until else ""
        logger.warning("celery-pause: circuit %s closed; its queues flow again%s", self.name, ramp)

    def check_forced_resume(
        self, store: Store, record: BreakerRecord
    ) -> tuple[BreakerRecord, set[str]]:
        """Close the breaker if an operator removed its hold; the record and the live holds.

        ``record`` must have been read just before: the pause state is read after it,
        and a hold is placed before the record says so, so a placed hold missing from
        that later read was removed by someone else (``resume --force``).
        """
        pause = store.read()
        live = {hold.id for hold in pause.state.live_holds(pause.now)}
        if record.state != CLOSED and record.hold_placed and record.hold_id not in live:
            record = self.forced_close(store, record)
        return record, live

    def forced_close(self, store: Store, record: BreakerRecord) -> BreakerRecord:
        """Close because ``record``'s placed hold is gone: an operator's forced resume."""
        hold_id = record.hold_id
        if hold_id is None:
            return record
        closed, changed = self.change(store, lambda rec, now: rec.forced_close(hold_id, now))
        if changed:
            store.clear_events(self.key)
            self.last_read = None
            logger.warning(
                "celery-pause: circuit %s: its hold was removed by a forced resume; closed, "
                "counting failures afresh",
                self.name,
            )
        return closed


def breakers_tasks(app: Celery, breaker: CircuitBreaker) -> set[str]:
    """Names of ``app``'s tasks that use ``breaker``."""
    return {
        task.name
        for task in list(app.tasks.values())
        if getattr(getattr(task, "breaker", None), "name", None) == breaker.name
    }


def breakers_of(app: Celery) -> dict[str, CircuitBreaker]:
    """The breakers used by ``app``'s tasks, by name."""
    found: dict[str, CircuitBreaker] = {}
    for task in list(app.tasks.values()):
        breaker = getattr(task, "breaker", None)
        if isinstance(breaker, CircuitBreaker):
            found.setdefault(breaker.name, breaker)
    return found


def describe(exc: BaseException) -> str:
    """A short ``repr`` of an exception for reasons and status."""
    text = repr(exc)
    return text if len(text) <= MAX_ERROR else text[: MAX_ERROR - 1] + "…"


def _seconds(option: str, value: float) -> float:
    return check_positive(option, value, what="a number of seconds", finite=True)
