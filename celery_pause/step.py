"""The one step a worker needs: ``app.steps["consumer"].add(PauseStep)``."""

from __future__ import annotations

from celery import bootsteps

from .breaker.step import BreakerStep
from .http.step import HttpStep
from .worker.apply import ApplyStep
from .worker.monitor import MonitorStep


class PauseStep(bootsteps.Step):
    """Brings every worker-side part of celery-pause along; does nothing itself.

    Celery's blueprint adds each step named in ``requires``: the gate and the
    store thread (:class:`ApplyStep`), events and warnings (:class:`MonitorStep`),
    the health and metrics endpoint (:class:`HttpStep`, on with ``pause_http_port``)
    and the circuit breakers' agent (:class:`BreakerStep`, on when a task uses a
    breaker).
    """

    label = "celery-pause"
    requires = (ApplyStep, MonitorStep, HttpStep, BreakerStep)
