"""The one step a worker needs: ``app.steps["consumer"].add(PauseStep)``."""

from __future__ import annotations

import logging
from typing import Any

from celery import bootsteps

from .breaker.step import BreakerStep
from .http.step import HttpStep
from .monitor.step import MonitorStep
from .settings import config_for
from .worker.apply import ApplyStep

logger = logging.getLogger(__name__)


class PauseStep(bootsteps.Step):
    """Brings every worker-side part of celery-pause along; itself it only warns, once at
    worker start, of settings in force other than given (``PauseConfig.stretched``).

    Celery's blueprint adds each step named in ``requires``: the gate and the
    store thread (:class:`ApplyStep`), events and warnings (:class:`MonitorStep`),
    the health and metrics endpoint (:class:`HttpStep`, on with ``pause_http_port``)
    and the circuit breakers' agent (:class:`BreakerStep`, on when a task uses a
    breaker).
    """

    label = "celery-pause"
    requires = (ApplyStep, MonitorStep, HttpStep, BreakerStep)

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        for said in config_for(parent.app).stretched:
            logger.warning("celery-pause: %s", said)
