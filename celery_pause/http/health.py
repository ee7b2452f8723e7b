"""The worker's HTTP endpoint: ``/healthz``, ``/readyz`` and ``/metrics``.

Off unless ``pause_http_port`` is set; binds ``pause_http_host`` (127.0.0.1 by
default). Liveness says whether the worker is alive, paused or not; readiness
says whether it starts tasks, and why not.
"""

from __future__ import annotations

import logging

from ..errors import ConfigurationError
from ..model.formatting import format_time
from ..monitor.view import Observed
from .metrics import INSTALL_HINT, render, require_prometheus
from .server import Request, Response, Server, json_response, wsgi_app

logger = logging.getLogger(__name__)


class Probes:
    """Answers the three paths from what the worker's monitor knows."""

    def __init__(self, monitor: Observed, *, report_pause: bool = False) -> None:
        self.monitor = monitor
        self.report_pause = report_pause
        """Whether a fully paused worker stays ready, saying so (``pause_readyz_when_paused``)."""

    def __call__(self, request: Request) -> Response:
        if request.method not in ("GET", "HEAD"):
            return json_response(405, {"error": "use GET"}, (("Allow", "GET, HEAD"),))
        if request.path == "/healthz":
            return self.healthz()
        if request.path == "/readyz":
            return self.readyz()
        if request.path == "/metrics":
            return self.metrics()
        return json_response(404, {"error": "try /healthz, /readyz or /metrics"})

    def healthz(self) -> Response:
        alive, problem = self.monitor.liveness()
        view = self.monitor.view()
        body = {
            "alive": alive,
            "hostname": view.hostname,
            "connected": view.connected,
            "paused": view.paused,
        }
        if not alive:
            body["reason"] = problem
        return json_response(200 if alive else 503, body)

    def readyz(self) -> Response:
        view = self.monitor.view()
        pool = {"pool": view.snapshot.pool.name, "pause_guaranteed": not view.snapshot.pool.problem}
        if view.snapshot.pool.problem:
            pool["pool_problem"] = view.snapshot.pool.problem
        if not view.connected or not view.applied:
            return json_response(
                503, {"ready": False, "reason": "not connected to the broker yet", **pool}
            )
        if not view.fully_paused:
            return json_response(
                200, {"ready": True, "paused_queues": list(view.paused_queues), **pool}
            )
        reason, by = view.hold_summary()
        return json_response(
            200 if self.report_pause else 503,
            {
                **pool,
                "ready": self.report_pause,
                "paused": True,
                "reason": reason,
                "paused_by": by or None,
                "since": format_time(view.since) if view.since else None,
                "paused_seconds": round(view.paused_seconds, 3),
                "paused_queues": list(view.paused_queues),
                "generation": view.generation,
                "holds": [hold.to_json() for hold in view.relevant_holds()],
            },
        )

    def metrics(self) -> Response:
        try:
            body, content_type = render(self.monitor)
        except ConfigurationError:
            return Response(
                501,
                f"metrics need prometheus_client: {INSTALL_HINT}\n".encode(),
                "text/plain; charset=utf-8",
            )
        return Response(200, body, content_type, (("Cache-Control", "no-store"),))


def serve_probes(
    monitor: Observed, host: str, port: int, *, report_pause: bool = False
) -> Server | None:
    """Serve the probes on ``host:port``; log and return ``None`` if that fails."""
    probes = Probes(monitor, report_pause=report_pause)
    try:
        server = Server(wsgi_app(probes), host, port, name="celery-pause-http")
    except OSError as exc:
        logger.error(
            "celery-pause: cannot serve /healthz, /readyz and /metrics on %s:%s: %s; "
            "the worker runs on without them (set pause_http_port to a free port)",
            host,
            port,
            exc,
        )
        return None
    server.start()
    try:
        require_prometheus()
    except ConfigurationError as exc:
        logger.warning("celery-pause: /metrics answers 501: %s", exc)
    logger.info("celery-pause: serving /healthz, /readyz and /metrics on %s", server.url)
    return server
