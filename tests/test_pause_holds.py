"""The core promise on real brokers and real prefork workers: a pause holds."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import celery_pause

from .harness import Cluster, Worker, wait_for


def held(worker: Worker) -> int:
    return worker.wait_applied().held


def scheduled(cluster: Cluster, worker: Worker) -> int:
    replies = cluster.app.control.inspect([worker.hostname], timeout=1).scheduled() or {}
    return len(replies.get(worker.hostname, []))


def stays_quiet(cluster: Cluster, since: float, seconds: float) -> None:
    """Watch for ``seconds``: fail at the first task that starts after ``since``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = cluster.started_between(since, float("inf"))
        assert not started, f"tasks started while paused: {started}"
        time.sleep(0.05)


def test_nothing_starts_while_paused_even_prefetched_eta_or_after_restart(cluster: Cluster) -> None:
    # Given a prefork worker (concurrency 1, prefetch multiplier 4) with a backlog
    worker = cluster.worker("w1")
    worker.wait_applied()
    eta_due = time.time() + 3
    eta = datetime.fromtimestamp(eta_due, tz=timezone.utc)
    sent = [cluster.send(f"eta{i}", eta=eta) for i in range(2)]
    wait_for(lambda: scheduled(cluster, worker) == 2, timeout=10, what="ETA tasks to be received")
    sent += [cluster.send(f"t{i}", 0.4) for i in range(12)]
    cluster.wait_records(1)

    # When the cluster is paused and the pause confirmed
    result = celery_pause.pause(cluster.app, reason="maintenance", wait=True, timeout=20)
    window_start = time.time()
    assert [w.hostname for w in result.workers] == [worker.hostname]

    # Then prefetched tasks are held, ETA tasks falling due are held too, ...
    held_at_pause = held(worker)
    assert held_at_pause >= 1, "prefetched tasks should wait in the gate"
    wait_for(lambda: held(worker) >= held_at_pause + 2, timeout=15, what="ETA tasks to fall due")
    stays_quiet(cluster, window_start, 0.5)

    # ... and a worker restarted while paused starts nothing
    assert worker.stop() == 0
    restarted = cluster.worker("w1")
    restarted.wait_applied(result.generation)
    stays_quiet(cluster, window_start, 2.0)

    # When resumed, every task runs exactly once
    window_end = time.time()
    celery_pause.resume(cluster.app)
    records = cluster.wait_records(len(sent))
    assert not cluster.started_between(window_start, window_end)
    assert sorted(r["id"] for r in records) == sorted(sent)
    assert all(r["started"] >= eta_due for r in records if r["tag"].startswith("eta"))
