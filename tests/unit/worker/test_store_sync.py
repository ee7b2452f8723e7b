"""The store thread's reports, on a memory store and a fake worker (timing logic only)."""

from __future__ import annotations

import time

from celery_pause.model.report import WorkerReport
from celery_pause.model.scope import EVERYTHING, Target
from celery_pause.settings import PauseConfig
from celery_pause.stores import Snapshot
from celery_pause.stores.memory import MemoryStore
from celery_pause.worker.figures import GateCounters, GateFigures, InFlight
from celery_pause.worker.pools import PoolSupport
from celery_pause.worker.snapshot import Applied, WorkerSnapshot
from celery_pause.worker.sync import StoreSync
from support.polling import wait_for

POLL = 5.0
PAUSED = Applied(1, EVERYTHING)


class EndingWorker:
    """A worker (its loop and its state) with one running task, which ends while the report
    naming it is written."""

    def __init__(self) -> None:
        self.tasks = (InFlight("t1", "proj.slow", Target(queue="q")),)

    def snapshot(self) -> WorkerSnapshot:
        return WorkerSnapshot(
            hostname="w1@host",
            pool=PoolSupport("threads", start_check=True),
            applied=PAUSED,
            enforced=PAUSED,
            holds=(),
            scheduled=(),
            as_of=0.0,
            breakers=(),
            consumed=(),
            listening=(),
            store_ok=True,
            gate=GateFigures(
                scope=PAUSED.scope,
                held=0,
                waiting=0,
                oldest=None,
                held_by_task={},
                counters=GateCounters(),
            ),
            in_flight=self.tasks,
            store_now=time.monotonic(),
        )

    def deliver(self, snapshot: Snapshot) -> None:
        pass

    def store_failed(self) -> None:
        pass

    def return_expired(self) -> None:
        pass

    def fence(self) -> None:
        pass


class EndsWhileWriting(MemoryStore):
    def __init__(self, worker: EndingWorker) -> None:
        super().__init__("memory://", "store-sync-test")
        self.worker = worker
        self.written: list[tuple[float, tuple[str, ...]]] = []

    def put_worker(self, report: WorkerReport) -> None:
        super().put_worker(report)
        self.written.append((time.monotonic(), report.running))
        self.worker.tasks = ()


def test_tasks_that_end_while_their_report_is_written_are_reported_ended_at_once() -> None:
    # Given a worker paused everywhere with one task running, a poll interval and
    # heartbeat of 5 s, and a store write during which that task ends
    worker = EndingWorker()
    store = EndsWhileWriting(worker)
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
        worker=worker,
        state=worker,
        renew=lambda until: None,
        pace=lambda: None,
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
