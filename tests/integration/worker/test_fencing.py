"""A confirmation that cannot leave out a worker that can still start a task.

Real faults on real workers: a TCP proxy that cuts one worker off from the store (not
from the broker), and SIGSTOP/SIGCONT of a worker's main process. A worker that cannot
read the store for ``pause_lease`` seconds holds every task; a worker that stopped
reporting is shown as lost and keeps a wait from confirming.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import celery_pause
from celery_pause import api
from celery_pause.errors import PauseTimeout
from support.harness import AMQP_BROKER, REDIS_BROKER, Cluster, Worker, wait_for
from support.observe import stays_quiet
from support.proxy import Proxy, through
from support.services import require
from support.stores import ADAPTERS

POLL = 0.5
LEASE = 2.0
SETTINGS = {"pause_worker_ttl": 2.0, "pause_lease": LEASE, "pause_store_timeout": 0.5}
MARGIN = 1.0
"""Seconds past a lease's end by which a task handed to the pool before it has started."""
BACKLOG, DURATION = 300, 0.05


def starts_on(cluster: Cluster, worker: Worker, after: float) -> list[str]:
    """Tags of the tasks ``worker`` started after ``after``."""
    return [
        r["tag"]
        for r in cluster.records()
        if r["worker"] == worker.hostname and r["started"] > after
    ]


def lost(cluster: Cluster, worker: Worker) -> bool:
    """Whether ``pause status`` shows ``worker`` as lost (not dropped)."""
    reports = {r.hostname: r for r in celery_pause.status(cluster.app).workers}
    report = reports.get(worker.hostname)
    return report is not None and report.state_for(0) == "lost"


@pytest.fixture(params=["redis", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, int]]:
    adapter = ADAPTERS[request.param]
    assert adapter.service is not None
    service, port = adapter.service
    require(service, "127.0.0.1", port)
    yield adapter.url(tmp_path), port


def test_a_worker_cut_off_from_the_store_fences_and_the_wait_names_it(
    store_url: tuple[str, int], tmp_path: Path
) -> None:
    require("RabbitMQ", "127.0.0.1", 5672)
    direct, port = store_url
    cluster = Cluster(
        broker=AMQP_BROKER, tmp=tmp_path, store=direct, poll_interval=POLL, **SETTINGS
    )
    try:
        with Proxy(port) as proxy:
            # Given two workers sharing a backlog, one reaching the store through a proxy
            near = cluster.worker("w1", concurrency=2)
            far = cluster.worker("w2", concurrency=2, store=through(direct, proxy.port))
            near.wait_applied()
            far.wait_applied()
            sent = [cluster.send(f"t{i}", DURATION) for i in range(BACKLOG)]
            wait_for(lambda: starts_on(cluster, far, 0), timeout=30, what="w2 to run tasks")

            # When w2 is cut off from the store (not from the broker) and a pause is waited for
            cut = time.time()
            proxy.blackhole()
            called = time.time()
            with pytest.raises(PauseTimeout) as caught:
                celery_pause.pause(cluster.app, wait=True, timeout=3 * LEASE, wait_for_lost=True)
            timed_out = time.time()

            # Then the wait does not confirm without w2: it names it as lost, and so does status
            assert set(caught.value.silent) == {far.hostname}, caught.value
            assert f"{far.hostname}: lost contact" in str(caught.value)
            assert lost(cluster, far)
            # ... and once its lease ran out, w2 started nothing, with work left for it
            fenced = cut + LEASE + MARGIN
            assert starts_on(cluster, far, fenced) == []
            assert len(cluster.records()) < BACKLOG, "the backlog ran out: nothing to fence"
            quiet_since = max(fenced, called + MARGIN)
            assert timed_out > quiet_since
            stays_quiet(cluster, quiet_since, 1.0)

            # When the store is reachable again, w2 applies the pause and the wait confirms
            proxy.forward()
            generation = caught.value.paused.generation if caught.value.paused else 0
            api.wait_until_quiet(cluster.app, generation, timeout=30)
            assert not lost(cluster, far)

            # ... and after the resume, every task ran exactly once
            cluster.resume_and_check(sent, quiet_since)
    finally:
        cluster.close()


def test_a_worker_frozen_past_its_lease_starts_nothing_when_thawed(
    redis_url: str, tmp_path: Path
) -> None:
    cluster = Cluster(broker=REDIS_BROKER, tmp=tmp_path, poll_interval=POLL, **SETTINGS)
    try:
        # Given two workers sharing a backlog
        near = cluster.worker("w1", concurrency=2)
        frozen = cluster.worker("w2", concurrency=2)
        near.wait_applied()
        frozen.wait_applied()
        sent = [cluster.send(f"t{i}", DURATION) for i in range(BACKLOG)]
        wait_for(lambda: starts_on(cluster, frozen, 0), timeout=30, what="w2 to run tasks")

        # When w2's main process is frozen while a pause is waited for
        assert frozen.proc is not None
        os.kill(frozen.proc.pid, signal.SIGSTOP)
        stopped = time.time()
        try:
            with pytest.raises(PauseTimeout) as caught:
                celery_pause.pause(cluster.app, wait=True, timeout=3 * LEASE, wait_for_lost=True)

            # Then the wait names it as lost rather than confirming without it
            assert set(caught.value.silent) == {frozen.hostname}, caught.value
            wait_for(
                lambda: time.time() > stopped + LEASE + MARGIN,
                timeout=2 * LEASE,
                what="w2's lease to run out",
            )
        finally:
            # When it is thawed, past its lease
            thawed = time.time()
            os.kill(frozen.proc.pid, signal.SIGCONT)

        # Then it starts nothing before it has read the pause, nor after
        assert len(cluster.records()) < BACKLOG, "the backlog ran out: nothing to hold"
        generation = caught.value.paused.generation if caught.value.paused else 0
        api.wait_until_quiet(cluster.app, generation, timeout=30)
        stays_quiet(cluster, thawed, 1.0)
        assert starts_on(cluster, frozen, thawed) == []
        cluster.resume_and_check(sent, thawed)
    finally:
        cluster.close()
