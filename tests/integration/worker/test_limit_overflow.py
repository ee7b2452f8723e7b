"""A limit on part of a queue with a deep backlog: the tasks waiting for it past
``pause_max_held`` leave the worker for the limit's turns queue and come back as the workers
can start them; the rest of the queue flows, and each task runs once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import celery_pause
from celery_pause.model.fair import FAIR_REGISTRY, fair_queues
from celery_pause.stores import store_for
from support.cells import TWO_CELLS, cell_cluster
from support.harness import Cluster, wait_for
from support.observe import most_within

MAX_HELD = 10
RATE = 20


@pytest.fixture(params=TWO_CELLS)
def cell(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Cluster, str]]:
    broker, pool, store = request.param
    labels = {"tenant": "tenant_id"}
    cluster = cell_cluster(broker, store, tmp_path, pause_labels=labels, pause_max_held=MAX_HELD)
    yield cluster, pool
    cluster.close()


class MostWaiting(threading.Thread):
    """Polls the workers' reports: the most tasks any worker said it kept waiting."""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(daemon=True)
        self.cluster, self.most, self.stopped = cluster, 0, threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.1):
            reports = celery_pause.status(self.cluster.app).workers
            self.most = max([self.most, *(report.waiting for report in reports)])


def started(records: list[dict[str, Any]], tenant: str) -> list[float]:
    return sorted(r["started"] for r in records if r["labels"]["tenant_id"] == tenant)


def test_tasks_waiting_for_a_limit_past_the_bound_wait_on_the_broker(
    cell: tuple[Cluster, str],
) -> None:
    # Given two workers bounded at 10 waiting tasks each, and tenant A limited to 20/s
    cluster, pool = cell
    workers = [cluster.worker(f"w{i}", pool=pool, concurrency=2) for i in (1, 2)]
    result = celery_pause.throttle(cluster.app, labels=["tenant=A"], rate=RATE)
    for worker in workers:
        worker.wait_applied(result.generation)
    watch = MostWaiting(cluster)
    watch.start()

    # When A floods 400 tasks into the shared queue, then B sends 100
    ids = [cluster.send(f"A{i:03}", 0.01, kwargs={"tenant_id": "A"}) for i in range(400)]
    ids += [cluster.send(f"B{i:03}", 0.01, kwargs={"tenant_id": "B"}) for i in range(100)]

    # Then B's 100 start while A is still at its rate (the rest of the queue flows), no worker
    # keeps more than the bound waiting, A's starts keep to the rate
    def b_done() -> list[dict[str, Any]] | None:
        records = cluster.records()
        return records if len(started(records, "B")) == 100 else None

    records = wait_for(b_done, timeout=60, what="B's 100 tasks")
    a_starts = started(records, "A")
    assert len(a_starts) < 300, f"{len(a_starts)} of A started before B's last"
    assert most_within(a_starts) <= RATE + 2

    # When 100 of A have started, and the limit is lifted
    cluster.wait_records(200, timeout=60)
    watch.stopped.set()
    watch.join()
    assert 0 < watch.most <= MAX_HELD + 1, f"a worker kept {watch.most} waiting"
    record = store_for(cluster.app).read_record(FAIR_REGISTRY)
    assert fair_queues(record, result.hold.id), "nothing was parked in the limit's turns queue"
    celery_pause.resume(cluster.app)

    # Then every task ran exactly once
    records = cluster.wait_records(len(ids), timeout=120)
    assert sorted(r["id"] for r in records) == sorted(ids)
