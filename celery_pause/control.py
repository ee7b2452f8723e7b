"""Remote commands: ``pause_refresh`` (re-read the state now; sent by every pause and
resume), ``pause_announce`` (hold a scope whose pause is being written) and ``inspect
pause_state`` (what a worker applies, holds and runs).

Neither reaches a worker with ``worker_enable_remote_control = False``, nor any worker of
a broker without fanout (SQS): there :func:`notify_workers` relies on the store's own
notifications (``pause_store_notify``), and on each worker's poll of the store.

They read what the apply step put on the consumer: ``pause_sync`` (the store thread),
``pause_state`` (the worker's :class:`~celery_pause.worker.state.WorkerState`) and
``pause_announced`` (its handler of announcements).
"""

from __future__ import annotations

import logging
import math
from typing import Any, cast

from celery import Celery
from celery.worker.control import control_command, inspect_command, nok, ok

from .errors import InvalidInput
from .model.formatting import printable
from .model.placing import Placing
from .model.validation import check_scope
from .settings import PauseConfig
from .stores import Store

logger = logging.getLogger(__name__)

REFRESH = "pause_refresh"
ANNOUNCE = "pause_announce"
ANNOUNCED_FOR = 10.0
"""Seconds a worker holds an announced scope at most, unless a read shows its hold first."""


@control_command()  # type: ignore[untyped-decorator]
def pause_refresh(state: Any) -> dict[str, str]:
    """Re-read the pause state from the store at once."""
    sync = getattr(state.consumer, "pause_sync", None)
    if sync is None:
        return cast(dict[str, str], nok("celery-pause is not installed on this worker"))
    sync.refresh()
    return cast(dict[str, str], ok("refreshing"))


@control_command()  # type: ignore[untyped-decorator]
def pause_announce(state: Any, hold: Any = "", rule: Any = None, seconds: Any = 0.0) -> Any:
    """Hold the scope ``rule`` of the hold ``hold`` being written, for ``seconds`` at most or
    until a read shows it (``seconds`` 0: the write failed, stop holding it)."""
    announced = getattr(state.consumer, "pause_announced", None)
    if announced is None:
        return nok("celery-pause is not installed on this worker")
    try:
        if not isinstance(hold, str) or not hold or len(hold) > 64:
            raise ValueError(f"hold is {hold!r:.80}")
        if not isinstance(rule, dict):
            raise TypeError(f"rule is {type(rule).__name__}")
        scope = check_scope(rule)  # the checks of every name an operator gives
        seconds = float(seconds)
        if math.isnan(seconds):
            raise ValueError("seconds is NaN")
        seconds = min(max(seconds, 0.0), ANNOUNCED_FOR)
    except (InvalidInput, TypeError, ValueError, OverflowError) as exc:
        return nok(printable(f"unreadable announcement: {exc!r:.200}"))
    announced(hold, scope, seconds)
    return ok("holding" if seconds else "withdrawn")


@inspect_command()  # type: ignore[untyped-decorator]
def pause_state(state: Any) -> dict[str, Any]:
    """The holds this worker applies, what it holds and what it runs in scope:
    ``celery -A proj inspect pause_state``."""
    pause_state = getattr(state.consumer, "pause_state", None)
    if pause_state is None:
        return cast(dict[str, Any], nok("celery-pause is not installed on this worker"))
    return cast(dict[str, Any], pause_state.snapshot().describe())


def notify_workers(app: Celery, config: PauseConfig, store: Store) -> None:
    """Ask every connected worker of ``app`` to re-read the state now (polling covers a miss):
    through the store's notifications (:meth:`~celery_pause.stores.Store.notify`, Redis
    pub/sub) when ``pause_store_notify`` is on, and Celery's broadcast where the broker has
    one."""
    try:
        if config.store_notify:
            store.notify()
        if has_broadcast(app):
            app.control.broadcast(REFRESH, reply=False)
    except Exception as exc:
        logger.warning("celery-pause: could not notify workers (%s); they poll instead", exc)


def announce(app: Celery, placing: Placing, *, seconds: float = ANNOUNCED_FOR) -> bool:
    """Before a pause that holds at once is written: have every connected worker hold its
    scope already (until a read shows the hold, or ``seconds``), so that the write's time
    (a SQL store's first connection in a fresh process) is not time tasks keep starting.
    Whether the announcement went out (not where there is no broadcast)."""
    if not placing.closes_now:
        return False
    try:
        if not has_broadcast(app):
            return False
        arguments = {"hold": placing.id, "rule": placing.scope.rule.to_json(), "seconds": seconds}
        app.control.broadcast(ANNOUNCE, arguments=arguments, reply=False)
    except Exception as exc:
        logger.warning("celery-pause: could not announce the pause (%s); writing it", exc)
        return False
    return True


def withdraw(app: Celery, placing: Placing) -> None:
    """The announced pause ``placing`` was not written: the workers stop holding its scope."""
    announce(app, placing, seconds=0.0)


def has_broadcast(app: Celery) -> bool:
    """Whether the broker's transport has fanout exchanges, which Celery's remote control
    needs (SQS has none: its workers never start remote control)."""
    with app.connection_for_write() as connection:
        return bool(connection.supports_exchange_type("fanout"))
