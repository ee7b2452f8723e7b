"""Workers with ``worker_enable_remote_control = False`` (large fleets), on Redis and RabbitMQ:
Celery's broadcast never reaches them, the store's notifications or its poll do."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import celery_pause
from support.harness import Cluster
from support.observe import held, stays_quiet

NO_REMOTE_CONTROL = {"worker_enable_remote_control": False}
SAID = "remote control is off (or the broker has no broadcast): pauses arrive by polling the store"


@pytest.fixture
def slow_poll_cluster(broker: str, tmp_path: Path) -> Iterator[Cluster]:
    """An app on each broker whose workers poll the store every 5 s, remote control off."""
    cluster = Cluster(broker=broker, tmp=tmp_path, poll_interval=5.0, **NO_REMOTE_CONTROL)
    yield cluster
    cluster.close()


def test_store_notifications_push_a_pause_without_remote_control(
    slow_poll_cluster: Cluster,
) -> None:
    cluster = slow_poll_cluster
    # Given a prefork worker with remote control off, polling every 5 s, busy with a backlog
    worker = cluster.worker("w1", concurrency=2)
    worker.wait_applied()
    assert worker.log_count(f"{SAID} every 5 s or by the store's notifications") == 1
    sent = [cluster.send(f"t{i}", 0.2) for i in range(30)]
    cluster.wait_records(2)

    # When paused with --wait
    started = time.monotonic()
    result = celery_pause.pause(cluster.app, reason="fleet", wait=True, timeout=20)
    confirmed_after = time.monotonic() - started
    paused_since = time.time()

    # Then the worker confirms it long before its next poll (Redis pub/sub pushed it), ...
    assert [w.hostname for w in result.workers] == [worker.hostname]
    assert confirmed_after < 2.5, f"confirmed after {confirmed_after:.2f}s: not pushed"
    # ... holds its prefetched tasks and starts nothing
    assert held(worker) >= 1
    stays_quiet(cluster, paused_since, 1.0)

    # When resumed (pushed the same way), every task runs exactly once
    cluster.resume_and_check(sent, paused_since)
    assert worker.log_count(SAID) == 1, "said once, at start only"


@pytest.fixture
def polling_cluster(broker: str, tmp_path: Path) -> Iterator[Cluster]:
    """An app on each broker, remote control off and the store's notifications off."""
    cluster = Cluster(
        broker=broker,
        tmp=tmp_path,
        poll_interval=1.0,
        pause_store_notify=False,
        **NO_REMOTE_CONTROL,
    )
    yield cluster
    cluster.close()


def test_without_any_push_a_pause_lands_on_the_poll_and_wait_confirms(
    polling_cluster: Cluster,
) -> None:
    cluster = polling_cluster
    # Given a worker with remote control and store notifications off (poll every 1 s)
    worker = cluster.worker("w1")
    worker.wait_applied()
    assert worker.log_count(f"{SAID} every 1 s") == 1
    assert worker.log_count("or by the store's notifications") == 0
    sent = [cluster.send(f"t{i}", 0.2) for i in range(20)]
    cluster.wait_records(1)

    # When paused with --wait
    started = time.monotonic()
    result = celery_pause.pause(cluster.app, reason="poll", wait=True, timeout=20)
    confirmed_after = time.monotonic() - started
    paused_since = time.time()

    # Then --wait confirms once the poll brought it (within one poll interval and the report)
    assert [w.hostname for w in result.workers] == [worker.hostname]
    assert confirmed_after < 1.0 + 1.5, f"confirmed after {confirmed_after:.2f}s"
    stays_quiet(cluster, paused_since, 1.0)

    # When resumed, every task runs exactly once
    cluster.resume_and_check(sent, paused_since)
