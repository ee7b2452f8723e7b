"""A worker's gate and limit keeper on a store whose clock the test moves: the limits' rules
run as on a worker, second by simulated second, with no thread and no wait."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from celery.worker.request import Request

from celery_pause.limits.keeper import LimitKeeper
from celery_pause.model.limit import KEPT_KEY, kept_since
from celery_pause.model.scope import NOTHING
from celery_pause.model.state import Hold
from celery_pause.stores.memory import MemoryStore
from celery_pause.worker.gate import Gate

TICK = 0.005
"""Seconds between two looks of the simulated worker (its keeper's shortest wait)."""


class SimulatedStore(MemoryStore):
    """An in-memory store on a clock the test moves."""

    def __init__(self, clock: list[float]) -> None:
        super().__init__("memory://simulated", uuid.uuid4().hex)
        self.clock = clock

    def now(self) -> float:
        return self.clock[0]


class SimulatedWorker:
    """One worker's gate and keeper under ``limits``, from store time ``now``; the store
    time each request started at, in :attr:`started`."""

    def __init__(self, limits: Iterable[Hold], now: float) -> None:
        self.clock = [now]
        self.started: list[float] = []
        self.gate = Gate(
            lambda request: self.started.append(self.clock[0]),
            lambda request: "default",
            hostname="w1@host",
            clock=lambda: self.clock[0],
        )
        self.gate.hold_to(NOTHING, limits=list(limits))
        self.store = SimulatedStore(self.clock)
        self.store.update_record(KEPT_KEY, lambda record, now: kept_since(record, now - 3600))
        self.keeper = LimitKeeper(
            store=self.store, hostname="w1", clock=self.store.now, ttl=6.0, pump=self.gate.pump
        )

    def receive(self, requests: Iterable[Request]) -> None:
        for request in requests:
            self.gate(request)

    def run_until(self, until: float) -> None:
        """Look every :data:`TICK` seconds until store time ``until``."""
        while self.clock[0] < until:
            self.keeper.pace(self.gate.pacing.all_permits(), [])
            self.gate.pump()
            self.clock[0] += TICK
