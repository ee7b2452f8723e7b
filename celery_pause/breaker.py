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
side (:mod:`celery_pause.breaker_step`) runs the half-open period: one worker
holds the probe lease, runs the probe or lets a bounded number of trial tasks
through, and the outcome closes or re-opens the breaker.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any, cast

from celery import Celery, Task
from celery.exceptions import Ignore, Reject, Retry

from .api import check_queues, notify_workers
from .bootstep import QueueResolver
from .breaker_state import CLOSED, HALF_OPEN, OPEN, BreakerRecord, Policy
from .errors import ConfigurationError, InvalidInput, StoreError
from .state import BREAKER_PREFIX, Hold, PauseState, Scope, format_time
from .stores import Store, store_for

logger = logging.getLogger(__name__)

NAME = re.compile(r"[A-Za-z0-9_.@-]{1,100}\Z")
REQUEUES_HEADER = "celery_pause_requeues"
"""Message header counting re-publishes into a queue the breaker did not pause."""
RECORD_PREFIX = "breaker:"
MAX_ERROR = 200
STATUS_UNREADABLE = "unreadable"

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
    - ``queues`` (None: every queue): the queues its hold pauses.
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
    ) -> None:
        if not isinstance(name, str) or not NAME.match(name):
            raise InvalidInput(
                f"breaker name must be 1-100 of A-Z a-z 0-9 _ . @ -, got {str(name)[:60]!r}"
            )
        self.name = name
        self.exceptions = _exception_types(exceptions)
        self.probe = probe
        if probe is not None and not callable(probe):
            raise InvalidInput(f"probe must be callable, got {type(probe).__name__}")
        self.queues = check_queues(queues)
        self.scope = Scope.of(self.queues)
        self.fail_max = _count("fail_max", fail_max)
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
        self.half_open_trials = _count("half_open_trials", half_open_trials)
        self.success_threshold = _count("success_threshold", success_threshold)
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
            max_requeues = _count("max_requeues", max_requeues)
        self.max_requeues = max_requeues
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
        self._cache: tuple[float, BreakerRecord] | None = None

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

    def status(self, app: Celery) -> BreakerStatus:
        """This breaker's state as the cluster sees it."""
        return _status(store_for(app), self.name, self)

    def reset(self, app: Celery) -> None:
        """Forget the breaker's state and remove its holds: it starts closed.

        The way out of an unreadable record; failures counted so far are dropped.
        """
        store = store_for(app)

        def drop(state: PauseState, now: float) -> PauseState | None:
            kept = [hold for hold in state.holds if hold.source != self.source]
            return None if len(kept) == len(state.holds) else state.with_holds(kept)

        _, changed = store.update(drop)
        store.delete_record(self.key)
        store.clear_events(self.key)
        if changed:
            notify_workers(app)
        logger.warning("celery-pause: circuit %s reset", self.name)

    def __repr__(self) -> str:
        return f"<CircuitBreaker {self.name} {self.scope.describe()}>"

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
        """Apply ``transition`` to the record atomically."""

        def apply(data: dict[str, Any] | None, now: float) -> dict[str, Any] | None:
            try:
                record = BreakerRecord.from_json(self.name, data)
            except ValueError as exc:
                raise StoreError(str(exc)) from None
            following = transition(record, now)
            if following is None:
                return None if data is not None else record.with_policy(self.policy).to_json()
            return following.with_policy(self.policy).to_json()

        data, changed = store.update_record(self.key, apply)
        return BreakerRecord.from_json(self.name, data), changed

    # -- the hold -----------------------------------------------------------------------
    def place_hold(self, app: Celery, store: Store, record: BreakerRecord, paused_by: str) -> None:
        """Make sure the hold of ``record``'s open period is in the pause state."""
        hold_id = record.hold_id
        if hold_id is None:
            return
        reason = (
            f"circuit {self.name} open: {record.failures} failures in {self.window:g}s; "
            f"last: {record.last_error}"
        )

        def add(state: PauseState, now: float) -> PauseState | None:
            if any(hold.id == hold_id for hold in state.holds):
                return None
            hold = Hold(
                scope=self.scope,
                source=self.source,
                paused_by=paused_by,
                reason=reason,
                paused_at=now,
                id=hold_id,
            )
            return state.with_holds([*state.live_holds(now), hold])

        _, added = store.update(add)
        self.change(store, lambda rec, now: rec.placed(hold_id))
        if added:
            notify_workers(app)
            logger.warning("celery-pause: %s", reason)

    def drop_hold(self, app: Celery, store: Store, hold_id: str) -> None:
        """Remove this breaker's hold ``hold_id``, and no other hold."""

        def drop(state: PauseState, now: float) -> PauseState | None:
            kept = [hold for hold in state.holds if hold.id != hold_id]
            return None if len(kept) == len(state.holds) else state.with_holds(kept)

        _, dropped = store.update(drop)
        if dropped:
            notify_workers(app)

    def after_close(self, app: Celery, store: Store, record: BreakerRecord) -> None:
        """Once the record is closed: remove its hold and start counting afresh."""
        if record.hold_id is not None:
            self.drop_hold(app, store, record.hold_id)
        store.clear_events(self.key)
        self._cache = None
        logger.warning("celery-pause: circuit %s closed; its queues flow again", self.name)

    # -- the task side (pool processes) ---------------------------------------------------
    def before_run(self, task: Task) -> int | None:
        """Whether ``task`` may start: the half-open period it is a trial of, or ``None``
        for an ordinary run. Raises :class:`Retry` once it is re-published when it may not.

        A task of the breaker's queues that starts while the breaker is open or
        half-open without being a trial of the current period (it reached the pool
        before the pause reached its worker, or it was a trial of a period that has
        ended) does not run: it goes back to its queue to wait. A recent "closed"
        read is trusted for under half the reset timeout: a trial is only admitted a
        full reset timeout after the breaker opened, so such a read cannot hide one.
        """
        request = task.request
        if request.called_directly or request.is_eager:
            return None
        cached = self._cache
        max_age = min(1.0, self.reset_timeout / 2)
        if cached and cached[1].state == CLOSED and time.monotonic() - cached[0] < max_age:
            return None
        app = task.app
        try:
            store = store_for(app)
            record = self.read(store)
            self._cache = (time.monotonic(), record)
            if record.state == CLOSED:
                return None
            if record.state == HALF_OPEN and request.id in record.trials:
                return record.period
            queue = queue_of(app, request)
            if not self.scope.covers(queue):
                return None
            record, live = self.check_forced_resume(store, record)
            if record.state == CLOSED:
                return None
        except StoreError as exc:
            logger.error("celery-pause: circuit %s: %s", self.name, exc)
            return None
        # Until its hold is in place the queue may still flow: wait a moment then.
        delay = None if record.hold_id in live else 1.0
        if not self._publish(task, delay, dict(request.headers or {})):
            return None
        message = f"circuit {self.name} {record.state}: not started, waits in {queue}"
        raise cast(BaseException, Retry(message, when=delay))

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
            self._cache = None
            logger.warning(
                "celery-pause: circuit %s: its hold was removed by a forced resume; closed, "
                "counting failures afresh",
                self.name,
            )
        return closed

    def trial_succeeded(self, app: Celery, period: int, task_id: str) -> None:
        """Count a trial's success; the last success needed closes the breaker."""
        try:
            store = store_for(app)
            record, changed = self.change(
                store, lambda rec, now: rec.succeed(period, task_id, self.success_threshold, now)
            )
            if changed and record.state == CLOSED:
                self.after_close(app, store, record)
        except StoreError as exc:
            logger.error("celery-pause: circuit %s: trial success not recorded: %s", self.name, exc)

    def task_failed(self, task: Task, exc: BaseException) -> BaseException:
        """Count ``exc``, open or re-open the breaker if due, and re-publish the task.

        Returns what the task must raise: :class:`Retry` once it is published again
        (its retry budget untouched), otherwise ``exc`` itself.
        """
        request = task.request
        app = task.app
        error = describe(exc)
        period = getattr(request, "breaker_trial", None)
        record: BreakerRecord | None = None
        try:
            store = store_for(app)
            self.check_forced_resume(store, self.read(store))
            count = store.add_event(self.key, window=self.window, detail=error)
            hold_id = uuid.uuid4().hex[:12]
            outcome: list[str] = []

            def after_failure(rec: BreakerRecord, now: float) -> BreakerRecord | None:
                outcome.clear()
                if period is not None:
                    reopened = rec.fail(period, now, error, self.policy, key=request.id)
                    if reopened is not None:
                        outcome.append("reopened")
                        return reopened
                tripped = rec.trip(now, count, error, self.policy, hold_id)
                if tripped is not None:
                    outcome.append("tripped")
                return tripped

            record, _ = self.change(store, after_failure)
            self._cache = (time.monotonic(), record)
            if outcome == ["tripped"]:
                self.place_hold(app, store, record, paused_by=request.hostname or "a worker")
            elif outcome == ["reopened"]:
                logger.warning(
                    "celery-pause: circuit %s: trial %s failed (%s); open again, next probe in %gs",
                    self.name,
                    request.id,
                    error,
                    record.reset_timeout or self.reset_timeout,
                )
        except StoreError as exc_store:
            logger.error(
                "celery-pause: circuit %s: cannot record the failure of %s: %s",
                self.name,
                request.id,
                exc_store,
            )
        return self._republish(task, exc, record)

    def _republish(
        self, task: Task, exc: BaseException, record: BreakerRecord | None
    ) -> BaseException:
        """Publish the task again, as it came, to the queue it came from."""
        request = task.request
        if request.called_directly or request.is_eager:
            return exc
        queue = queue_of(task.app, request)
        waits = record is not None and record.state != CLOSED and self.scope.covers(queue)
        headers = dict(request.headers or {})
        delay: float | None = None
        if not waits:
            requeues = _int(headers.get(REQUEUES_HEADER)) + 1
            if self.max_requeues is not None and requeues > self.max_requeues:
                logger.error(
                    "celery-pause: circuit %s: %s failed %d times while its queue flowed; "
                    "no more re-publishing, the failure takes its normal course",
                    self.name,
                    request.id,
                    requeues,
                )
                return exc
            headers[REQUEUES_HEADER] = requeues
            delay = self.requeue_delay
        if not self._publish(task, delay, headers):
            if task.acks_late:
                return cast(BaseException, Reject(exc, requeue=True))
            return exc
        state = record.state if record is not None else "unknown"
        where = f"waits in {queue}" if waits else f"runs again in {delay:g}s"
        return cast(
            BaseException, Retry(f"circuit {self.name} {state}: {where}", exc=exc, when=delay)
        )

    def _publish(self, task: Task, delay: float | None, headers: dict[str, Any]) -> bool:
        """Publish ``task``'s request again, retries unchanged; whether that worked."""
        request = task.request
        signature = task.signature_from_request(request, countdown=delay, headers=headers)
        try:
            signature.apply_async()
        except Exception as exc:
            logger.error(
                "celery-pause: circuit %s: could not publish %s again: %r",
                self.name,
                request.id,
                exc,
            )
            return False
        return True


class BreakerTask(Task):
    """Task base that reports to its ``breaker``: ``@app.task(base=BreakerTask, breaker=b)``.

    A counted exception (raised, or passed to :meth:`retry`, as ``autoretry_for``
    does) does not fail the task nor spend its retry budget: the message is
    published again unchanged and waits in its (paused) queue.
    """

    breaker: CircuitBreaker | None = None

    @classmethod
    def on_bound(cls, app: Celery) -> None:
        if not isinstance(cls.breaker, CircuitBreaker):
            raise ConfigurationError(
                f"task {cls.name or cls.__name__!r} uses BreakerTask without a breaker: "
                "pass breaker=CircuitBreaker(...) to @app.task"
            )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        breaker = self.breaker
        assert breaker is not None  # checked in on_bound
        request = self.request
        period = breaker.before_run(self)
        request.breaker_trial = period
        try:
            result = super().__call__(*args, **kwargs)
        except (Retry, Ignore, Reject):
            # Its own choice (or a counted failure, already recorded as the trial's).
            if period is not None:
                breaker.trial_succeeded(self.app, period, request.id)
            raise
        except BaseException as exc:
            if not breaker.counts(exc):
                if period is not None:  # the dependency answered: the trial passed
                    breaker.trial_succeeded(self.app, period, request.id)
                raise
            raise breaker.task_failed(self, exc) from None
        if period is not None:
            breaker.trial_succeeded(self.app, period, request.id)
        return result

    def retry(
        self,
        args: Any = None,
        kwargs: Any = None,
        exc: BaseException | None = None,
        throw: bool = True,
        eta: Any = None,
        countdown: float | None = None,
        max_retries: int | None = None,
        **options: Any,
    ) -> Any:
        """Celery's retry, except that a counted ``exc`` goes to the breaker instead."""
        breaker = self.breaker
        if breaker is not None and exc is not None and breaker.counts(exc):
            outcome = breaker.task_failed(self, exc)
            if throw:
                raise outcome
            return outcome
        return super().retry(args, kwargs, exc, throw, eta, countdown, max_retries, **options)


@dataclass(frozen=True)
class BreakerStatus:
    """One breaker as ``pause status`` shows it."""

    name: str
    state: str
    failures: int
    fail_max: int
    window: float
    opened_at: float | None = None
    next_probe_at: float | None = None
    reset_timeout: float | None = None
    last_error: str | None = None
    prober: str | None = None
    period: int = 0
    queues: tuple[str, ...] | None = None
    hold_id: str | None = None
    now: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """The fields as JSON (times as epoch seconds), for ``pause status --json``."""
        data = asdict(self)
        data.pop("now")
        data["queues"] = None if self.queues is None else list(self.queues)
        return data

    def describe(self) -> str:
        """One line for people."""
        scope = Scope.of(self.queues).describe()
        parts = [f"circuit {self.name} ({scope}): {self.state}"]
        if self.state != STATUS_UNREADABLE:
            parts.append(f"{self.failures}/{self.fail_max} failures in {self.window:g}s")
        if self.state in (OPEN, HALF_OPEN) and self.opened_at is not None:
            parts.append(f"opened at {format_time(self.opened_at)}")
        if self.state == OPEN and self.next_probe_at is not None:
            wait = max(0.0, self.next_probe_at - self.now)
            parts.append(f"next probe at {format_time(self.next_probe_at)} (in {wait:.0f}s)")
        if self.state == HALF_OPEN:
            parts.append(f"probing (period {self.period}) by {self.prober or 'nobody yet'}")
        if self.last_error:
            parts.append(f"last error: {self.last_error}")
        return "; ".join(parts)


def breaker_statuses(app: Celery) -> list[BreakerStatus]:
    """Every breaker of ``app`` and every breaker with state in its store, by name."""
    store = store_for(app)
    known = breakers_of(app)
    names = {key[len(RECORD_PREFIX) :] for key in store.record_keys(RECORD_PREFIX)}
    return [_status(store, name, known.get(name)) for name in sorted(names | set(known))]


def breakers_of(app: Celery) -> dict[str, CircuitBreaker]:
    """The breakers used by ``app``'s tasks, by name."""
    found: dict[str, CircuitBreaker] = {}
    for task in list(app.tasks.values()):
        breaker = getattr(task, "breaker", None)
        if isinstance(breaker, CircuitBreaker):
            found.setdefault(breaker.name, breaker)
    return found


def queue_of(app: Celery, request: Any) -> str:
    """The queue a task request came from."""
    resolver: QueueResolver | None = getattr(app, "_celery_pause_resolver", None)
    if resolver is None:
        resolver = QueueResolver(app)
        app._celery_pause_resolver = resolver
    return resolver(request)


def describe(exc: BaseException) -> str:
    """A short ``repr`` of an exception for reasons and status."""
    text = repr(exc)
    return text if len(text) <= MAX_ERROR else text[: MAX_ERROR - 1] + "…"


def _status(store: Store, name: str, breaker: CircuitBreaker | None) -> BreakerStatus:
    key = RECORD_PREFIX + name
    try:
        record = BreakerRecord.from_json(name, store.read_record(key))
    except (StoreError, ValueError) as exc:
        return BreakerStatus(
            name=name, state=STATUS_UNREADABLE, failures=0, fail_max=0, window=0.0,
            last_error=str(exc)[:300],
        )  # fmt: skip
    if breaker is not None:
        record = record.with_policy(breaker.policy)
    events = store.recent_events(key, window=record.window) if record.window else []
    return BreakerStatus(
        name=name,
        state=record.state,
        failures=len(events),
        fail_max=record.fail_max,
        window=record.window,
        opened_at=record.opened_at,
        next_probe_at=record.next_probe_at,
        reset_timeout=record.reset_timeout,
        last_error=events[-1].detail if events else record.last_error,
        prober=store.lease_owner(key) if record.state == HALF_OPEN else None,
        period=record.period,
        queues=record.queues,
        hold_id=record.hold_id,
        now=store.now(),
    )


def _exception_types(exceptions: Iterable[type[BaseException]]) -> tuple[type[BaseException], ...]:
    types: tuple[Any, ...] = (exceptions,) if isinstance(exceptions, type) else tuple(exceptions)
    if not types or not all(isinstance(t, type) and issubclass(t, BaseException) for t in types):
        raise InvalidInput(f"exceptions must be exception classes, got {exceptions!r}")
    return types


def _count(option: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput(f"{option} must be a whole number of at least 1, got {value!r}")
    return value


def _seconds(option: str, value: float) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise InvalidInput(f"{option} must be a number of seconds, got {value!r}") from None
    if not seconds > 0 or seconds == float("inf"):
        raise InvalidInput(f"{option} must be positive, got {value!r}")
    return seconds


def _int(value: Any) -> int:
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0
