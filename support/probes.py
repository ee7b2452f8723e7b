"""A stand-in for a worker's monitor, so that the probes answer without a worker."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from celery_pause.http.health import Probes
from celery_pause.http.server import Request, Response
from celery_pause.model.scope import NOTHING, Scope
from celery_pause.model.state import Hold
from celery_pause.monitor.view import WorkerView
from celery_pause.worker.figures import GateCounters, GateFigures
from celery_pause.worker.pools import PoolSupport
from celery_pause.worker.snapshot import Applied, WorkerSnapshot


class StandIn:
    """Answers what :class:`Probes` asks a monitor."""

    def __init__(self, view: WorkerView, alive: tuple[bool, str] = (True, "")) -> None:
        self._view = view
        self._alive = alive

    def view(self) -> WorkerView:
        return self._view

    def liveness(self) -> tuple[bool, str]:
        return self._alive


def view(
    *,
    scope: Scope = NOTHING,
    holds: tuple[Hold, ...] = (),
    scheduled: tuple[Hold, ...] = (),
    held: int = 0,
    held_by_task: dict[str, int] | None = None,
    **changes: Any,
) -> WorkerView:
    """A connected worker's view on queues a and b: applying ``scope`` (nothing paused by
    default) under ``holds``, its gate holding ``held`` requests, and ``changes``."""
    gate = GateFigures(
        scope=scope,
        held=held,
        waiting=0,
        oldest=None,
        held_by_task=held_by_task or {},
        counters=GateCounters(),
    )
    applied = Applied(3, scope)
    snapshot = WorkerSnapshot(
        hostname="w1@host",
        pool=PoolSupport("prefork"),
        applied=applied,
        enforced=applied,
        holds=holds,
        scheduled=scheduled,
        as_of=0.0,
        breakers=(),
        consumed=("a", "b"),
        listening=("a", "b"),
        store_ok=True,
        gate=gate,
        in_flight=(),
        store_now=time.time(),
    )
    base = WorkerView(
        snapshot=snapshot,
        now=time.time(),
        connected=True,
        transitions={"pause": 0, "resume": 0},
        breakers={},
        loop_idle=0.1,
        busy=False,
    )
    return replace(base, **changes)


def get(monitor: StandIn, path: str) -> Response:
    """The probes' answer to ``GET path``."""
    probes = Probes(monitor)  # type: ignore[arg-type]
    return probes(Request(method="GET", path=path, headers={}, body=b"", host="127.0.0.1"))
