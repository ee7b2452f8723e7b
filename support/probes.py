"""A stand-in for a worker's monitor, so that the probes answer without a worker."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from celery_pause.http.health import Probes
from celery_pause.http.server import Request, Response
from celery_pause.model.scope import NOTHING
from celery_pause.monitor.view import WorkerView
from celery_pause.worker.figures import GateCounters


class StandIn:
    """Answers what :class:`Probes` asks a monitor."""

    def __init__(self, view: WorkerView, alive: tuple[bool, str] = (True, "")) -> None:
        self._view = view
        self._alive = alive

    def view(self) -> WorkerView:
        return self._view

    def liveness(self) -> tuple[bool, str]:
        return self._alive


def view(**changes: Any) -> WorkerView:
    """A connected worker's view with nothing paused, and ``changes``."""
    base = WorkerView(
        hostname="w1@host",
        now=time.time(),
        connected=True,
        applied=True,
        generation=3,
        scope=NOTHING,
        consumed=("a", "b"),
        holds=(),
        scheduled=(),
        since=None,
        held=0,
        counters=GateCounters(),
        held_by_task={},
        transitions={"pause": 0, "resume": 0},
        breakers={},
        store_ok=True,
        loop_idle=0.1,
        busy=False,
        pool="prefork",
    )
    return replace(base, **changes)


def get(monitor: StandIn, path: str) -> Response:
    """The probes' answer to ``GET path``."""
    probes = Probes(monitor)  # type: ignore[arg-type]
    return probes(Request(method="GET", path=path, headers={}, body=b"", host="127.0.0.1"))
