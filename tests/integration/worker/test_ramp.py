"""A ramped resume on real workers: a trickle first, the whole backlog by its end, once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import celery_pause
from celery_pause.errors import InvalidInput
from celery_pause.stores import store_for
from support.harness import Cluster, wait_for
from support.holds import ramps
from support.proj import RECORD_TASK

PEAK = 20.0
"""The cluster's start rate at the end of a ramp in these tests (tasks per second)."""


@pytest.fixture
def ramp_cluster(broker: str, tmp_path: Path) -> Iterator[Cluster]:
    cluster = Cluster(broker=broker, tmp=tmp_path, pause_ramp_peak=PEAK)
    yield cluster
    cluster.close()


def starts(cluster: Cluster, tag: str) -> list[float]:
    return sorted(r["started"] for r in cluster.records() if r["tag"].startswith(tag))


def backlog(cluster: Cluster, tag: str, queue: str, count: int) -> list[str]:
    """``count`` tasks sent to the paused ``queue``, each seen held or waiting by a worker."""
    return [cluster.send(f"{tag}{i}", queue=cluster.queue(queue)) for i in range(count)]


def test_a_ramped_resume_starts_a_trickle_then_everything_once(ramp_cluster: Cluster) -> None:
    # Given two workers on queues a and b, both paused with a backlog of 150 tasks each
    cluster = ramp_cluster
    queues = [cluster.queue("a"), cluster.queue("b")]
    workers = [cluster.worker(f"w{i}", queues=queues, concurrency=4) for i in (1, 2)]
    for worker in workers:
        worker.wait_applied()
    celery_pause.pause(cluster.app, queues=queues, wait=True, timeout=20)
    sent = backlog(cluster, "a", "a", 150) + backlog(cluster, "b", "b", 150)

    # When b is resumed plainly, and then a over a 10 s ramp
    plain_at = time.time()
    celery_pause.resume(cluster.app, queues=[queues[1]])
    wait_for(lambda: len(starts(cluster, "b")) == 150, timeout=30, what="b's backlog to run")
    ramp_at = time.time()
    result = celery_pause.resume(cluster.app, queues=[queues[0]], ramp=10)
    (ramp,) = ramps(cluster.app)
    assert (ramp.hold,) == result.ramps
    records = cluster.wait_records(300, timeout=40)

    # Then the plain resume started far more in its first second than the ramp did in its
    plain_first = sum(1 for t in starts(cluster, "b") if t < plain_at + 1)
    ramped_first = sum(1 for t in starts(cluster, "a") if t < ramp_at + 1)
    assert plain_first >= 60, f"a plain resume started only {plain_first} tasks in a second"
    assert ramped_first <= plain_first / 5, (ramped_first, plain_first)
    # ... the ramp's two workers shared its curve through the store: never ahead of it by
    # more than one start (and the clocks' skew)
    assert ramp.peak == PEAK
    for count, started in enumerate(starts(cluster, "a"), start=1):
        if started < ramp.end:
            assert count <= ramp.allowance(started + 0.05) + 1, (count, started - ramp.start)
    # ... nothing waited much longer than the ramp, and every task ran exactly once
    assert starts(cluster, "a")[-1] < ramp.end + 2.0
    assert sorted(r["id"] for r in records) == sorted(sent)


@pytest.mark.parametrize("pool", ["prefork", "gevent"])
def test_a_pause_during_a_ramp_wins_at_once(ramp_cluster: Cluster, pool: str) -> None:
    # Given a worker ramping a backlog back in over 30 s (gevent: tasks blocking on I/O),
    # the backlog held in its gate by a pause of the task (its consumer stays)
    cluster = ramp_cluster
    concurrency = 20 if pool == "gevent" else 2
    worker = cluster.worker("w1", concurrency=concurrency, pool=pool)
    worker.wait_applied()
    celery_pause.pause(cluster.app, tasks=[RECORD_TASK], wait=True, timeout=20)
    sent = [cluster.send(f"t{i}", 0.2) for i in range(60)]
    wait_for(lambda: worker.wait_applied().held == 60, timeout=20, what="the backlog held")
    ramp_at = time.time()
    result = celery_pause.resume(cluster.app, ramp=30)
    wait_for(lambda: worker.wait_applied().waiting >= 1, timeout=10, what="tasks to wait")
    cluster.wait_records(2)
    # (the ramp lets a trickle through: at 1 s, 0.33 of PEAK * 30 s * (1/30)**2 / 2, plus
    # the clocks' skew)
    wait_for(lambda: time.time() > ramp_at + 1, timeout=5, what="a second to pass")
    (ramp,) = ramps(cluster.app)
    assert ramp.hold == result.ramps[0]
    first = cluster.started_between(ramp_at, ramp_at + 1)
    assert len(first) <= ramp.allowance(ramp.start + 1) + 2, len(first)

    # When the cluster is paused during the ramp
    celery_pause.pause(cluster.app, tasks=[RECORD_TASK], wait=True, timeout=20)
    paused_at = time.time()

    # Then nothing starts, and the waiting tasks are held by the pause
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        assert not cluster.started_between(paused_at, float("inf"))
        time.sleep(0.05)
    report = worker.wait_applied()
    assert report.waiting == 0 and report.held >= 1
    # ... and a plain resume runs the rest at once, each exactly once
    celery_pause.resume(cluster.app)
    records = cluster.wait_records(len(sent), timeout=30)
    assert sorted(r["id"] for r in records) == sorted(sent)


def test_a_ramp_needs_a_paused_scope_and_at_most_a_day(redis_cluster: Cluster) -> None:
    app = redis_cluster.app
    store = store_for(app)
    celery_pause.pause(app, queues=["a"])
    before = store.read().state
    for bad in (0, -5, 86401, float("nan"), "10m"):
        with pytest.raises(InvalidInput, match="ramp"):
            celery_pause.resume(app, queues=["a"], ramp=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="nothing to ramp: queue b is not paused"):
        celery_pause.resume(app, queues=["b"], ramp=60)
    assert store.read().state == before

    # A ramp covers what the resume lifted: here queue a only, though all was resumed
    result = celery_pause.resume(app, ramp=86400)
    (ramp,) = ramps(app)
    assert ramp.hold.scope.describe() == "queue a" and ramp.duration == 86400
    assert (ramp.hold,) == result.ramps and ramp.start == result.now
    assert [e.ramp for e in celery_pause.history(app, limit=1)] == [86400]
