"""The ``beat_init`` handler, connected when :mod:`celery_pause` is imported.

It runs in every beat process (``celery beat`` and a worker's embedded ``-B`` beat)
of every app, and acts only for apps with the pause step. Celery swallows a signal
handler's exceptions, so a failure here is logged loudly and beat carries on sending
every entry (the workers still hold paused tasks).
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery
from celery.signals import beat_init

from .guard import BeatGuard

logger = logging.getLogger(__name__)

STEP_LABELS = ("celery-pause", "celery-pause-apply")
"""Labels of the worker steps that mark an app as using celery-pause."""


def uses_pause(app: Celery) -> bool:
    """Whether ``app``'s workers run the pause step (``app.steps["consumer"]``)."""
    return any(getattr(step, "label", None) in STEP_LABELS for step in app.steps["consumer"])


@beat_init.connect  # type: ignore[untyped-decorator]
def on_beat_init(sender: Any = None, **kwargs: Any) -> None:
    """Make the live scheduler of beat's ``Service`` (``sender``) follow the pause."""
    try:
        scheduler = sender.scheduler
        app = scheduler.app
        if not uses_pause(app) or getattr(scheduler, "celery_pause", None) is not None:
            return  # not an app of ours, or this scheduler follows the pause already
        guard = BeatGuard(app, scheduler)
        guard.install()
        scheduler.celery_pause = guard
        logger.info(
            "celery-pause: beat follows the pause state in %s (%s)",
            guard.watch.store.display_url,
            type(scheduler).__name__,
        )
    except Exception:
        logger.exception(
            "celery-pause: beat cannot follow the pause state; it sends every periodic task "
            "(workers still hold tasks of paused queues, so nothing runs early)"
        )
