"""A lease shorter than three poll intervals is stretched: a real worker says so, once, at
its start."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import celery_pause
from support.harness import Cluster, wait_for

SAID = (
    "celery-pause: pause_lease 1 s is shorter than three poll intervals "
    "(pause_poll_interval 2 s): 6 s is in force"
)


@pytest.fixture
def slow_poll_cluster(redis_url: str, tmp_path: Path) -> Iterator[Cluster]:
    """A private app on the Redis broker whose workers poll every 2 s."""
    cluster = Cluster(broker=redis_url, tmp=tmp_path, poll_interval=2.0)
    yield cluster
    cluster.close()


def test_a_worker_warns_once_of_a_lease_stretched_to_three_poll_intervals(
    slow_poll_cluster: Cluster,
) -> None:
    # Given a worker (prefork, two pool processes) started with pause_lease=1 and a poll
    # interval of 2 s
    cluster = slow_poll_cluster
    worker = cluster.worker("w1", concurrency=2, extra={"pause_lease": 1})
    worker.wait_applied()

    # When it has started, and applied a pause and a resume since
    done = celery_pause.pause(cluster.app, wait=True, timeout=20)
    celery_pause.resume(cluster.app)
    worker.wait_applied(done.generation + 1)

    # Then its log says once, as a warning, which setting, the value given and the value in
    # force, and nothing of the worker TTL (10 s, above three polls)
    wait_for(lambda: worker.log_count(SAID) >= 1, timeout=10, what="the warning")
    lines = [line for line in worker.log.read_text().splitlines() if SAID in line]
    assert len(lines) == 1 and "WARNING" in lines[0], lines
    assert worker.log_count("pause_worker_ttl") == 0
