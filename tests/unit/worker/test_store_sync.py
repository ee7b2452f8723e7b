"""The store thread's reports, on a memory store and a fake gate (timing logic only)."""

from __future__ import annotations

import time
from typing import Any, cast

from celery_pause.model.report import WorkerReport
from celery_pause.model.scope import EVERYTHING, Scope
from celery_pause.settings import PauseConfig
from celery_pause.stores.memory import MemoryStore
from celery_pause.worker.gate import Gate
from celery_pause.worker.pools import PoolSupport
from celery_pause.worker.sync import StoreSync
from support.harness import wait_for

POLL = 5.0


class EndingGate:
    """A gate with one running task, which ends while the report naming it is written."""

    def __init__(self) -> None:
        self.tasks = [("t1", "proj.slow")]
        self.held: list[Any] = []
        self.waiting: list[Any] = []

    def running_tasks(self, scope: Scope) -> list[tuple[str, str]]:
        return list(self.tasks) if scope else []

    def running(self, scope: Scope) -> list[str]:
        return [task_id for task_id, _ in self.running_tasks(scope)]

    def next_ramp_start(self) -> None:
        return None

    def clock(self) -> float:
        return time.monotonic()


class EndsWhileWriting(MemoryStore):
    def __init__(self, gate: EndingGate) -> None:
        super().__init__("memory://", "store-sync-test")
        self.gate = gate
        self.written: list[tuple[float, tuple[str, ...]]] = []

    def put_worker(self, report: WorkerReport) -> None:
        super().put_worker(report)
        self.written.append((time.monotonic(), report.running))
        self.gate.tasks = []


def test_tasks_that_end_while_their_report_is_written_are_reported_ended_at_once() -> None:
    # Given a worker paused everywhere with one task running, a poll interval and
    # heartbeat of 5 s, and a store write during which that task ends
    gate = EndingGate()
    store = EndsWhileWriting(gate)
    config = PauseConfig(
        store_url="memory://",
        key_prefix="store-sync-test",
        poll_interval=POLL,
        max_hold=60.0,
        worker_ttl=3 * POLL,
        store_timeout=1.0,
    )
    sync = StoreSync(
        store=store,
        config=config,
        hostname="w1@host",
        pool=PoolSupport("threads", start_check=True),
        gate=cast(Gate, gate),
        applied=lambda: (1, EVERYTHING),
        as_of=lambda: 0.0,
        breakers=lambda: (),
        deliver=lambda snapshot: None,
        return_expired=lambda: None,
        pump=lambda: None,
    )

    # When the store thread runs
    sync.start()
    try:
        wait_for(lambda: len(store.written) >= 2, timeout=POLL, what="a second report")
    finally:
        sync.stop()

    # Then the report naming the task is followed by one saying it ended, long
    # before the next poll or heartbeat
    (first, running), (second, after) = store.written[:2]
    assert (running, after) == (("t1",), ())
    assert second - first < 0.5
