"""The consumer bootstep of the circuit breakers: starts the agent, wires the admission.

It comes along with :class:`~celery_pause.PauseStep` and does nothing on a worker
whose app has no task with a breaker. It reads what the apply step put on the
consumer: the gate (``c.pause_gate``), the state (``c.pause_state``) and the store
thread (``c.pause_sync``).
"""

from __future__ import annotations

from typing import Any

from celery import bootsteps
from celery.worker.consumer import Consumer

from ..settings import config_for
from ..worker.apply import ApplyStep
from .admission import TrialAdmission
from .agent import BreakerAgent
from .circuit import breakers_of


class BreakerStep(bootsteps.StartStopStep):
    """Runs the half-open periods of the app's breakers and lets trial tasks through."""

    label = "celery-pause-breaker"
    # A class, not a name: Celery resolves names only for the steps it was given.
    requires = (ApplyStep,)

    def __init__(self, c: Consumer, **kwargs: Any) -> None:
        super().__init__(c, **kwargs)
        self.breakers = breakers_of(c.app)
        self.enabled = bool(self.breakers)
        self.agent: BreakerAgent | None = None
        self.admission: TrialAdmission | None = None
        if self.enabled:
            self.admission = TrialAdmission(c, gate=c.pause_gate, worker=c.pause_state)
            c.pause_gate.admit_with(self.admission.admits)

    def start(self, c: Consumer) -> None:
        if self.admission is None:
            return
        if self.agent is not None:
            return  # a reconnect: the same consumer, and the agent runs on
        c.pause_state.serve_breakers(sorted(self.breakers))
        c.pause_sync.publish_now()
        self.agent = BreakerAgent(
            app=c.app,
            hostname=c.hostname,
            breakers=list(self.breakers.values()),
            admission=self.admission,
            poll=config_for(c.app).poll_interval,
        )
        self.agent.start()

    def shutdown(self, c: Consumer) -> None:
        if self.agent is not None:
            self.agent.stop()
