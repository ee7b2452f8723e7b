"""Remote commands: ``pause_refresh`` (re-read the state now; sent by every pause and
resume) and ``inspect pause_state`` (what a worker applies, holds and runs).

Neither reaches a worker with ``worker_enable_remote_control = False``, nor any worker of
a broker without fanout (SQS): there :func:`notify_workers` relies on the store's own
notifications (``pause_store_notify``), and on each worker's poll of the store.

They read what the apply step put on the consumer: ``pause_sync`` (the store thread)
and ``pause_state`` (the worker's :class:`~celery_pause.worker.state.WorkerState`).
"""

from __future__ import annotations

import logging
from typing import Any, cast

from celery import Celery
from celery.worker.control import control_command, inspect_command, nok, ok

from .settings import config_for
from .stores import store_for

logger = logging.getLogger(__name__)

REFRESH = "pause_refresh"


@control_command()  # type: ignore[untyped-decorator]
def pause_refresh(state: Any) -> dict[str, str]:
    """Re-read the pause state from the store at once."""
    sync = getattr(state.consumer, "pause_sync", None)
    if sync is None:
        return cast(dict[str, str], nok("celery-pause is not installed on this worker"))
    sync.refresh()
    return cast(dict[str, str], ok("refreshing"))


@inspect_command()  # type: ignore[untyped-decorator]
def pause_state(state: Any) -> dict[str, Any]:
    """The holds this worker applies, what it holds and what it runs in scope:
    ``celery -A proj inspect pause_state``."""
    pause_state = getattr(state.consumer, "pause_state", None)
    if pause_state is None:
        return cast(dict[str, Any], nok("celery-pause is not installed on this worker"))
    return cast(dict[str, Any], pause_state.snapshot().describe())


def notify_workers(app: Celery) -> None:
    """Ask every connected worker to re-read the state now (polling covers a miss): through
    the store's notifications (:meth:`~celery_pause.stores.Store.notify`, Redis pub/sub) when
    ``pause_store_notify`` is on, and Celery's broadcast where the broker has one."""
    try:
        if config_for(app).store_notify:
            store_for(app).notify()
        if has_broadcast(app):
            app.control.broadcast(REFRESH, reply=False)
    except Exception as exc:
        logger.warning("celery-pause: could not notify workers (%s); they poll instead", exc)


def has_broadcast(app: Celery) -> bool:
    """Whether the broker's transport has fanout exchanges, which Celery's remote control
    needs (SQS has none: its workers never start remote control)."""
    with app.connection_for_write() as connection:
        return bool(connection.supports_exchange_type("fanout"))
