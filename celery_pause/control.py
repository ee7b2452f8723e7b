"""The remote-control command that tells workers to re-read the pause state now, and its sender."""

from __future__ import annotations

import logging
from typing import Any, cast

from celery import Celery
from celery.worker.control import control_command, nok, ok

logger = logging.getLogger(__name__)

REFRESH = "pause_refresh"


@control_command()  # type: ignore[untyped-decorator]
def pause_refresh(state: Any) -> dict[str, str]:
    """Re-read the pause state from the store at once."""
    step = getattr(state.consumer, "celery_pause", None)
    if step is None:
        return cast(dict[str, str], nok("celery-pause is not installed on this worker"))
    step.refresh()
    return cast(dict[str, str], ok("refreshing"))


def notify_workers(app: Celery) -> None:
    """Ask every connected worker to re-read the state now (polling covers a miss)."""
    try:
        app.control.broadcast(REFRESH, reply=False)
    except Exception as exc:
        logger.warning("celery-pause: could not notify workers (%s); they poll instead", exc)
