"""The consumer bootstep that serves ``/healthz``, ``/readyz`` and ``/metrics``.

On only when ``pause_http_port`` is set. It serves what the worker's monitor
(``c.pause_monitor``, put there by :class:`~celery_pause.monitor.step.MonitorStep`)
sees, so it needs nothing but the monitor's picture (:class:`~celery_pause.monitor.view.Observed`).
"""

from __future__ import annotations

from typing import Any

from celery import bootsteps
from celery.worker.consumer import Consumer

from ..monitor.step import MonitorStep
from ..settings import config_for
from .health import serve_probes
from .server import Server


class HttpStep(bootsteps.StartStopStep):
    """Serves the worker's probes and metrics on ``pause_http_host:pause_http_port``."""

    label = "celery-pause-http"
    # A class, not a name: Celery resolves names only for the steps it was given.
    requires = (MonitorStep,)

    def __init__(self, c: Consumer, **kwargs: Any) -> None:
        super().__init__(c, **kwargs)
        self.config = config_for(c.app)
        self.enabled = self.config.http_port is not None
        self.server: Server | None = None
        self._tried = False

    def start(self, c: Consumer) -> None:
        port = self.config.http_port
        if self._tried or port is None:
            return  # serve once: the server outlives reconnects of the consumer
        self._tried = True
        self.server = serve_probes(
            c.pause_monitor,
            self.config.http_host,
            port,
            report_pause=self.config.readyz_when_paused == "report",
        )

    def shutdown(self, c: Consumer) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
