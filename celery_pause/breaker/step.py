"""The consumer bootstep of the circuit breakers: starts the agent, wires the admission.

It comes along with :class:`~celery_pause.PauseStep` and does nothing on a worker
whose app has no task with a breaker.
"""

from __future__ import annotations

from typing import Any

from celery import bootsteps
from celery.worker.consumer import Consumer
from celery.worker.consumer.tasks import Tasks

from ..settings import config_for
from .admission import TrialAdmission
from .agent import BreakerAgent
from .circuit import breakers_of


class BreakerStep(bootsteps.StartStopStep):
    """Runs the half-open periods of the app's breakers and lets trial tasks through."""

    label = "celery-pause-breaker"
    # A class, not a name: Celery resolves names only for the steps it was given.
    requires = (Tasks,)

    def __init__(self, c: Consumer, **kwargs: Any) -> None:
        super().__init__(c, **kwargs)
        self.breakers = breakers_of(c.app)
        self.enabled = bool(self.breakers)
        self.agent: BreakerAgent | None = None

    def start(self, c: Consumer) -> None:
        if self.agent is not None:
            self.agent.admission.consumer = c  # a reconnect: same agent, new loop
            return
        # Every step's __init__ ran before any start: the apply step is in place.
        pause_step = c.celery_pause
        admission = TrialAdmission(c, pause_step)
        pause_step.gate.admit = admission.admits
        pause_step.serve_breakers(sorted(self.breakers))
        self.agent = BreakerAgent(
            app=c.app,
            hostname=c.hostname,
            breakers=list(self.breakers.values()),
            admission=admission,
            poll=config_for(c.app).poll_interval,
        )
        self.agent.start()

    def shutdown(self, c: Consumer) -> None:
        if self.agent is not None:
            self.agent.stop()
