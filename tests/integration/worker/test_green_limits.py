"""A rate limit on green pools: their consumer loop runs handed-over work only every
``pause_green_loop_wait``, longer than a start time's lateness, so the worker starts what is due
from a greenlet of its own. Without that, most start times passed unspent (the rate collapsed)."""

from __future__ import annotations

import time

import pytest

import celery_pause
from support.harness import Cluster
from support.observe import most_within, per_second


@pytest.mark.parametrize("pool", ["gevent", "eventlet"])
def test_a_rate_limit_runs_at_its_rate_on_a_green_pool(redis_cluster: Cluster, pool: str) -> None:
    # Given two green workers and a limit of 10/s
    cluster = redis_cluster
    workers = [cluster.worker(f"g{i}", pool=pool, concurrency=8) for i in (1, 2)]
    result = celery_pause.throttle(cluster.app, rate="10/s")
    for worker in workers:
        worker.wait_applied(result.generation)

    # When 80 tasks are sent at once
    sent_at = time.time()
    sent = [cluster.send(f"r{i}") for i in range(80)]
    records = cluster.wait_records(80, timeout=40)

    # Then each ran once, at the rate: 8 s of the backlog within 10 % of it, no second bunched
    assert sorted(r["id"] for r in records) == sorted(sent), "lost or duplicated tasks"
    starts = sorted(r["started"] for r in records)
    counts = per_second(starts, sent_at + 1.5, starts[-1])
    assert len(counts) >= 6, f"the backlog ran too fast or too short: {counts}"
    window = sum(counts[:6])
    assert 54 <= window <= 66, f"6 s held {window} starts: {counts}"
    assert most_within(starts) <= 12, f"seconds {counts}"
