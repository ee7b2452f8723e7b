"""The breaker's side in the pool processes: what a task of a breaker does when it
starts, succeeds or fails.

A counted failure goes to the breaker's shared window and may open it; the task
is then published again, unchanged, to wait in its (paused) queue. A task that
starts while its breaker is open without being a trial goes back the same way,
unless the breaker throttles instead of pausing: then it runs, at the hold's pace.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any, cast

from celery import Celery, Task
from celery.exceptions import Ignore, Reject, Retry

from ..api.overload import Overloaded, cut_limits
from ..api.running import publish_again
from ..errors import ConfigurationError, StoreError
from ..model.outcome import Outcome
from ..routing import queue_of
from ..settings import config_for
from ..stores import Store, store_for
from .circuit import CircuitBreaker, describe
from .record import CLOSED, HALF_OPEN, BreakerRecord

logger = logging.getLogger(__name__)

TRIPPED, REOPENED = "tripped", "reopened"
"""What a counted failure did to the breaker's record (empty: nothing)."""
REQUEUES_HEADER = "celery_pause_requeues"
"""Message header counting re-publishes into a queue the breaker did not pause."""


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
        period = before_run(breaker, self)
        request.breaker_trial = period
        try:
            result = super().__call__(*args, **kwargs)
        except (Retry, Ignore, Reject):
            # Its own choice (or a counted failure, already recorded as the trial's).
            if period is not None:
                trial_succeeded(breaker, self.app, period, request.id)
            raise
        except BaseException as exc:
            if not breaker.counts(exc):
                if period is not None:  # the dependency answered: the trial passed
                    trial_succeeded(breaker, self.app, period, request.id)
                raise
            raise task_failed(breaker, self, exc) from None
        if period is not None:
            trial_succeeded(breaker, self.app, period, request.id)
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
            outcome = task_failed(breaker, self, exc)
            if throw:
                raise outcome
            return outcome
        return super().retry(args, kwargs, exc, throw, eta, countdown, max_retries, **options)


def before_run(breaker: CircuitBreaker, task: Task) -> int | None:
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
    cached = breaker.last_read
    max_age = min(1.0, breaker.reset_timeout / 2)
    if cached and cached[1].state == CLOSED and time.monotonic() - cached[0] < max_age:
        return None
    app = task.app
    try:
        store = store_for(app)
        record = breaker.read(store)
        breaker.last_read = (time.monotonic(), record)
        if record.state == CLOSED:
            return None
        if record.state == HALF_OPEN and request.id in record.trials:
            return record.period
        if breaker.limit is not None:  # its hold limits its tasks' pace: they run
            return None
        queue = queue_of(app, request)
        if not breaker.guards(queue):
            return None
        record, live = breaker.check_forced_resume(store, record)
        if record.state == CLOSED:
            return None
    except StoreError as exc:
        logger.error("celery-pause: circuit %s: %s", breaker.name, exc)
        return None
    # Until its hold is in place the queue may still flow: wait a moment then.
    delay = None if record.hold_id in live else 1.0
    if not publish_again(task, delay, dict(request.headers or {}), f"circuit {breaker.name}"):
        return None
    message = f"circuit {breaker.name} {record.state}: not started, waits in {queue}"
    raise cast(BaseException, Retry(message, when=delay))


def trial_succeeded(breaker: CircuitBreaker, app: Celery, period: int, task_id: str) -> None:
    """Count a trial's success; the last success needed closes the breaker."""
    try:
        store = store_for(app)
        threshold, ramp = breaker.success_threshold, breaker.ramp
        record, changed = breaker.change(
            store, lambda rec, now: rec.succeed(period, task_id, threshold, now, ramp)
        )
        if changed and record.state == CLOSED:
            breaker.after_close(app, store, record)
    except StoreError as exc:
        logger.error("celery-pause: circuit %s: trial success not recorded: %s", breaker.name, exc)


def task_failed(breaker: CircuitBreaker, task: Task, exc: BaseException) -> BaseException:
    """Count ``exc``, open or re-open the breaker if due (at ``fail_max`` failures, or at
    once while the ramp it closed with lasts), and re-publish the task.

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
        before, _ = breaker.check_forced_resume(store, breaker.read(store))
        count = store.add_event(
            breaker.key, window=breaker.window, detail=error, limit=breaker.fail_max
        )
        hold_id = uuid.uuid4().hex[:12]
        # Open only where a worker runs the breaker's agent: nothing else closes it.
        due = count >= breaker.fail_max or (
            before.ramp_until is not None and before.ramping(store.now())
        )
        may_trip = not due or agent_running(app, store, breaker)

        def after_failure(rec: BreakerRecord, now: float) -> Outcome[BreakerRecord, str]:
            if period is not None:
                reopened = rec.fail(period, now, error, breaker.policy, key=request.id)
                if reopened is not None:
                    return Outcome(reopened, REOPENED)
            tripped = rec.trip(now, count, error, breaker.policy, hold_id) if may_trip else None
            return Outcome(tripped, TRIPPED if tripped is not None else "")

        record, happened = breaker.decide(store, after_failure)
        breaker.last_read = (time.monotonic(), record)
        if not may_trip and record.state == CLOSED:
            logger.error(
                "celery-pause: circuit %s: %d failures, but no live worker runs its agent "
                "(add PauseStep to the workers); not opening it, as nothing could close it",
                breaker.name,
                count,
            )
        if happened == TRIPPED:
            breaker.place_hold(app, store, record, paused_by=request.hostname or "a worker")
        elif happened == REOPENED:
            logger.warning(
                "celery-pause: circuit %s: trial %s failed (%s); open again, next probe in %gs",
                breaker.name,
                request.id,
                error,
                record.reset_timeout or breaker.reset_timeout,
            )
        adaptive = breaker.limit is not None and breaker.limit.adaptive
        if adaptive and happened != TRIPPED and record.state != CLOSED:
            cut_limits(task, Overloaded(why=error))  # its hold limits the tasks: slow them
    except StoreError as exc_store:
        logger.error(
            "celery-pause: circuit %s: cannot record the failure of %s: %s",
            breaker.name,
            request.id,
            exc_store,
        )
    return republish(breaker, task, exc, record)


def republish(
    breaker: CircuitBreaker, task: Task, exc: BaseException, record: BreakerRecord | None
) -> BaseException:
    """Publish the task again, as it came, to the queue it came from."""
    request = task.request
    if request.called_directly or request.is_eager:
        return exc
    queue = queue_of(task.app, request)
    waits = record is not None and record.state != CLOSED and breaker.guards(queue)
    headers = dict(request.headers or {})
    delay: float | None = None
    if not waits:
        requeues = _int(headers.get(REQUEUES_HEADER)) + 1
        if breaker.max_requeues is not None and requeues > breaker.max_requeues:
            logger.error(
                "celery-pause: circuit %s: %s failed %d times while its queue flowed; "
                "no more re-publishing, the failure takes its normal course",
                breaker.name,
                request.id,
                requeues,
            )
            return exc
        headers[REQUEUES_HEADER] = requeues
        delay = breaker.requeue_delay
    if not publish_again(task, delay, headers, f"circuit {breaker.name}"):
        if task.acks_late:
            return cast(BaseException, Reject(exc, requeue=True))
        return exc
    state = record.state if record is not None else "unknown"
    where = f"waits in {queue}" if waits else f"runs again in {delay:g}s"
    return cast(
        BaseException, Retry(f"circuit {breaker.name} {state}: {where}", exc=exc, when=delay)
    )


def agent_running(app: Celery, store: Store, breaker: CircuitBreaker) -> bool:
    """Whether a live worker runs ``breaker``'s agent, which alone can close it again."""
    reports = store.live_reports(config_for(app).worker_ttl, store.now())
    return any(breaker.name in report.breakers for report in reports)


def _int(value: Any) -> int:
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0
