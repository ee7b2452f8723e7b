"""Limits on real workers: a cluster-wide rate and concurrency, shared by four workers.

Each cell runs four worker processes of one pool on one broker, with the state in Redis or
PostgreSQL: the cells together cover prefork and threads, Redis and RabbitMQ, both stores.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import celery_pause
from celery_pause.model.limit_keys import slots_key
from celery_pause.model.slots import live_slots
from celery_pause.stores import store_for
from support.cells import cell_cluster, four_workers
from support.harness import Cluster, stop_all, wait_for
from support.observe import most_at_once, per_second
from support.proj import OTHER_TASK

CELLS = [
    pytest.param(("redis", "prefork", "redis"), id="redis-prefork-redis-store"),
    pytest.param(("amqp", "threads", "redis"), id="amqp-threads-redis-store"),
    pytest.param(("redis", "threads", "postgresql"), id="redis-threads-postgresql-store"),
    pytest.param(("amqp", "prefork", "postgresql"), id="amqp-prefork-postgresql-store"),
]


@pytest.fixture(params=CELLS)
def limit_cell(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Cluster, str]]:
    """A private cluster on the cell's broker and store, and the pool its workers run."""
    broker, pool, store = request.param
    cluster = cell_cluster(broker, store, tmp_path, pause_worker_ttl=6.0)
    yield cluster, pool
    cluster.close()


def finished(cluster: Cluster, count: int) -> dict[str, float] | None:
    """When each task finished, by id, once ``count`` did (``None`` before)."""
    raw = cluster.records_client.lrange(cluster.finished_key, 0, -1)
    ends = {entry["id"]: entry["finished"] for entry in map(json.loads, raw)}
    return ends if len(ends) >= count else None


def test_a_rate_limit_holds_the_cluster_to_it(limit_cell: tuple[Cluster, str]) -> None:
    # Given four workers (eight slots) and a backlog far above 20/s
    cluster, pool = limit_cell
    four_workers(cluster, pool)
    result = celery_pause.throttle(cluster.app, rate="20/s", reason="provider allows 20/s")
    assert result.hold.limit is not None and result.hold.limit.rate == 20.0
    for worker in cluster.workers:
        worker.wait_applied(result.generation)

    # When 360 tasks are sent at once
    sent_at = time.time()
    sent = [cluster.send(f"r{i}") for i in range(360)]
    records = cluster.wait_records(360, timeout=60)

    # Then every task ran once, and from 2 s in the cluster ran 20/s: each 10 s window within
    # 10 %, no second above twice the limit
    assert sorted(r["id"] for r in records) == sorted(sent), "lost or duplicated tasks"
    starts = sorted(r["started"] for r in records)
    counts = per_second(starts, sent_at + 2, starts[-1])
    assert len(counts) >= 14, f"the backlog ran out too soon: {len(counts)} s"
    windows = [sum(counts[i : i + 10]) for i in range(len(counts) - 9)]
    assert all(180 <= w <= 220 for w in windows), f"10 s windows {windows}, seconds {counts}"
    assert max(per_second(starts, sent_at, starts[-1])) <= 40, f"seconds {counts}"
    assert len({r["worker"] for r in records}) == 4, "the rate was not shared by every worker"


def test_a_concurrency_limit_is_never_exceeded_and_kept_used(
    limit_cell: tuple[Cluster, str],
) -> None:
    # Given four workers with eight slots between them, and a limit of 3 at once
    cluster, pool = limit_cell
    workers = four_workers(cluster, pool)
    result = celery_pause.throttle(cluster.app, concurrency=3, wait=True, timeout=20)
    assert len(result.workers) == 4

    # When 60 tasks of 0.3 s each are sent at once
    sent = [cluster.send(f"c{i}", 0.3) for i in range(60)]
    records = cluster.wait_records(60, timeout=60)
    ends = wait_for(lambda: finished(cluster, 60), timeout=20, what="every task to finish")

    # Then every task ran once, never more than 3 at once, and 3 ran most of the time
    assert sorted(r["id"] for r in records) == sorted(sent), "lost or duplicated tasks"
    spans = [(r["started"], ends[r["id"]]) for r in records]
    assert most_at_once(spans) <= 3, f"{most_at_once(spans)} ran at once"
    busy = sum(end - start for start, end in spans)
    elapsed = max(end for _, end in spans) - min(start for start, _ in spans)
    used = busy / (3 * elapsed)
    assert used >= 0.8, f"the limit was used {used:.0%} on average"
    assert len({r["worker"] for r in records}) >= 2

    # And once the tasks ended, the workers hold no slot of it
    store = store_for(cluster.app)
    key = slots_key(result.hold.id)
    wait_for(
        lambda: not live_slots(store.read_record(key), store.now()),
        timeout=10,
        what="the slots to be given back",
    )
    stop_all(workers)


@pytest.mark.parametrize(
    "limit_cell", [CELLS[0], CELLS[1]], indirect=True
)  # the two pools on the two brokers: the store plays no part here
def test_tasks_no_limit_covers_keep_their_pace(limit_cell: tuple[Cluster, str]) -> None:
    # Given a limit of 2/s on one task type of the default queue
    cluster, pool = limit_cell
    four_workers(cluster, pool)
    celery_pause.throttle(cluster.app, rate=2, tasks=["support.proj.record"], wait=True)

    # When 30 limited and 120 unlimited tasks of the same queue are sent interleaved
    sent_at = time.time()
    for i in range(120):
        if i % 4 == 0:
            cluster.send(f"limited{i}")
        cluster.send(f"other{i}", task=OTHER_TASK)
    others = wait_for(lambda: records_of(cluster, OTHER_TASK, 120), timeout=30, what="others")

    # Then the unlimited tasks all ran while the limited ones still trickle at 2/s
    others_done = max(r["started"] for r in others)
    limited = [r for r in cluster.records() if r["task"] != OTHER_TASK]
    assert others_done - sent_at < 8, f"unlimited tasks took {others_done - sent_at:.1f} s"
    assert len(limited) <= 2 * (others_done - sent_at) + 2, "the limit let more through"
    records = cluster.wait_records(150, timeout=40)
    assert len({r["id"] for r in records}) == 150


def records_of(cluster: Cluster, task: str, count: int) -> list[dict[str, Any]] | None:
    """The start records of ``task``, once there are ``count`` (``None`` before)."""
    records = [r for r in cluster.records() if r["task"] == task]
    return records if len(records) >= count else None
