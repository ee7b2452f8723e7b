"""``pause(wait=True)`` with lost workers, on real workers: a worker that stopped reporting
counts once it surely fenced itself (silent over ``pause_worker_ttl + pause_lease``, and a
lease into the wait), named in ``PauseResult.lost`` with what it last reported running;
with ``pause_lease = None`` it never fences, and the wait keeps waiting for it."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

import celery_pause
from celery_pause import PauseTimeout, WorkerReport, api
from support.harness import Cluster, Worker, wait_for
from support.observe import stays_quiet

POLL, TTL, LEASE, FORGET = 0.5, 2.0, 2.0, 30.0
SETTINGS = {
    "pause_worker_ttl": TTL,
    "pause_lease": LEASE,
    "pause_forget_worker_after": FORGET,
    "pause_store_timeout": 0.5,
}
BOUND = TTL + LEASE + 10
"""Seconds within which a wait returns once a worker is lost (the issue's bound)."""
LONG = 8.0
"""Seconds the task a frozen worker is finishing runs."""


@pytest.fixture
def lossy_cluster(redis_url: str, tmp_path: Path) -> Iterator[Cluster]:
    """A Redis cluster with short reporting and lease settings."""
    cluster = Cluster(broker=redis_url, tmp=tmp_path, poll_interval=POLL, **SETTINGS)
    yield cluster
    cluster.close()


def report_of(cluster: Cluster, worker: Worker) -> WorkerReport | None:
    reports = {r.hostname: r for r in celery_pause.status(cluster.app).workers}
    return reports.get(worker.hostname)


def finished(cluster: Cluster, task_id: str) -> bool:
    raw = cluster.records_client.lrange(cluster.finished_key, 0, -1)
    return any(json.loads(item)["id"] == task_id for item in raw)


def test_a_frozen_worker_is_named_lost_with_the_task_it_may_still_be_finishing(
    lossy_cluster: Cluster,
) -> None:
    cluster = lossy_cluster
    # Given two workers on queues of their own, w2 running a long task, backlogs behind both
    near_q, far_q = cluster.queue("near"), cluster.queue("far")
    near = cluster.worker("w1", queues=[near_q])
    far = cluster.worker("w2", queues=[far_q])
    near.wait_applied()
    far.wait_applied()
    long = cluster.send("long", LONG, queue=far_q)
    cluster.wait_records(1)
    sent = [long] + [cluster.send(f"t{i}", queue=q) for i in range(10) for q in (near_q, far_q)]
    frozen_at: list[float] = []

    def freeze_once_it_reports_the_task(_: object, workers: Sequence[WorkerReport]) -> None:
        """Freeze w2's main process as soon as it reported the pause applied, the long task
        still running: from the store it looks like a machine cut off right then."""
        mine = [w for w in workers if w.hostname == far.hostname]
        if not frozen_at and mine and mine[0].running == (long,):
            assert far.proc is not None
            os.kill(far.proc.pid, signal.SIGSTOP)
            frozen_at.append(time.monotonic())

    try:
        # When a pause is waited for, and w2 freezes right after it applied it
        result = celery_pause.pause(
            cluster.app, wait=True, timeout=60, progress=freeze_once_it_reports_the_task
        )
        returned, returned_wall = time.monotonic(), time.time()

        # Then the wait returns within the bound, w1 confirmed and w2 named lost, with the
        # task it was running (which may still be finishing there)
        assert frozen_at, "w2 never reported the long task as running"
        assert returned - frozen_at[0] < BOUND
        assert returned - frozen_at[0] > TTL + LEASE - TTL / 3, "counted before it fenced"
        assert [w.hostname for w in result.lost] == [far.hostname]
        assert result.lost[0].running == (long,)
        assert {w.hostname for w in result.workers} == {near.hostname, far.hostname}
        # ... the task goes on on the frozen machine (its pool process is not frozen)
        wait_for(lambda: finished(cluster, long), timeout=LONG + 10, what="the long task")
        # ... and nothing starts, with work left on both queues
        assert len(cluster.records()) < len(sent)
        stays_quiet(cluster, returned_wall, 1.0)
    finally:
        # When w2 is thawed
        assert far.proc is not None
        os.kill(far.proc.pid, signal.SIGCONT)

    # Then it reads the pause and confirms, still starting nothing; after the resume every
    # task ran exactly once
    api.wait_until_quiet(cluster.app, result.generation, timeout=30)
    report = report_of(cluster, far)
    assert report is not None and not report.silent
    stays_quiet(cluster, returned_wall, 1.0)
    cluster.resume_and_check(sent, returned_wall)


def test_a_worker_lost_long_before_the_wait_is_counted_only_a_lease_into_it(
    lossy_cluster: Cluster,
) -> None:
    cluster = lossy_cluster
    # Given a worker killed long enough ago to be silent past pause_worker_ttl + pause_lease
    alive = cluster.worker("w1")
    dead = cluster.worker("w2")
    alive.wait_applied()
    dead.wait_applied()
    dead.kill()

    def silent_long() -> bool:
        report = report_of(cluster, dead)
        return report is not None and report.silent > TTL + LEASE + 0.5

    wait_for(silent_long, timeout=TTL + LEASE + 10, what="w2 to be silent past ttl + lease")

    # When a pause is waited for
    called = time.monotonic()
    result = celery_pause.pause(cluster.app, wait=True, timeout=60)
    took = time.monotonic() - called

    # Then the wait counts it lost, but not before a lease had passed since it began: a
    # worker whose reports fail while its reads work would have read the pause by then
    assert [w.hostname for w in result.lost] == [dead.hostname]
    assert LEASE <= took < LEASE + 5, f"the wait took {took:.2f}s"
    assert [w.hostname for w in result.workers if w not in result.lost] == [alive.hostname]


def test_without_a_lease_a_lost_worker_keeps_the_wait_waiting(
    redis_url: str, tmp_path: Path
) -> None:
    # Given pause_lease = None (a worker cut off from the store never fences) and two
    # workers, one of them killed
    settings = {**SETTINGS, "pause_lease": None}
    cluster = Cluster(broker=redis_url, tmp=tmp_path, poll_interval=POLL, **settings)
    try:
        alive = cluster.worker("w1")
        dead = cluster.worker("w2")
        alive.wait_applied()
        dead.wait_applied()
        dead.kill()

        # When a pause is waited for past the time a lease would have run out
        with pytest.raises(PauseTimeout) as caught:
            celery_pause.pause(cluster.app, wait=True, timeout=TTL + LEASE + 4)

        # Then it times out waiting for the lost worker, naming it
        assert set(caught.value.busy) == {dead.hostname}
        assert caught.value.silent[dead.hostname] > TTL + LEASE
        assert caught.value.paused is not None
    finally:
        cluster.close()
