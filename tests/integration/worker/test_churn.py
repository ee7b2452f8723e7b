"""Churn under a pause, with real workers on each broker: workers SIGKILLed while their gates
hold prefetched tasks, a scale-down from 6 workers to 2, then a rolling deploy that replaces
each worker by one with a new hostname (SIGTERM, a short grace period, then SIGKILL).

Nothing in scope starts, nothing is lost or run twice, ``pause status`` stays readable (the
lost workers shown, then forgotten), and a ``pause --wait`` right after returns within
``pause_worker_ttl + pause_lease + 10`` seconds, naming the lost workers (exit 4).
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

import celery_pause
from support.cli import pause
from support.harness import AMQP_BROKER, REDIS_BROKER, Cluster, Worker, wait_for
from support.observe import stays_quiet
from support.services import require

POLL, TTL, LEASE, FORGET = 0.5, 2.0, 2.0, 30.0
BOUND = TTL + LEASE + 10
"""Seconds within which a wait returns once workers are lost (the issue's bound)."""
GRACE = 1.0
"""Seconds a deploy lets a worker's warm shutdown run before it SIGKILLs it."""
VISIBILITY = 20
"""Redis: seconds before kombu redelivers a killed worker's messages (held ones go back to
the broker after a quarter of it)."""
BACKLOG, DURATION = 800, 0.1
"""Some 7 s of work for six workers of two processes: left over when they all run."""
EXIT_LOST = 4


@pytest.fixture(params=["redis", "amqp"])
def churn_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    """A cluster with short reporting and lease settings, on each broker; on Redis a short
    visibility timeout, so that a killed worker's messages come back within the test."""
    require("Redis", "127.0.0.1", 6379)
    broker: dict[str, Any] = {
        "broker": REDIS_BROKER,
        "private_broker_keys": True,
        "broker_transport_options": {
            "visibility_timeout": VISIBILITY,
            "unacked_restore_interval": 1,
            "unacked_restore_throttle": 1,
        },
    }
    if request.param == "amqp":
        require("RabbitMQ", "127.0.0.1", 5672)
        broker = {"broker": AMQP_BROKER}
    cluster = Cluster(
        tmp=tmp_path,
        poll_interval=POLL,
        pause_worker_ttl=TTL,
        pause_lease=LEASE,
        pause_forget_worker_after=FORGET,
        pause_store_timeout=0.5,
        **broker,
    )
    yield cluster
    cluster.close()


def deploy_stop(worker: Worker) -> bool:
    """Stop ``worker`` as a deploy does: SIGTERM, then SIGKILL after :data:`GRACE` seconds;
    whether it had to be killed."""
    assert worker.proc is not None
    worker.proc.send_signal(signal.SIGTERM)
    try:
        worker.proc.wait(GRACE)
        return False
    except subprocess.TimeoutExpired:
        worker.kill()
        return True


def hostnames(workers: Iterable[Worker]) -> set[str]:
    return {worker.hostname for worker in workers}


def states(cluster: Cluster) -> dict[str, str]:
    """Each known worker's state in ``pause status``, by hostname."""
    status = celery_pause.status(cluster.app)
    return {w.hostname: w.state_for(status.state.generation) for w in status.workers}


def status_text(cluster: Cluster) -> str:
    """``celery pause status``, which must stay readable through the churn."""
    result = pause(cluster, "status")
    assert result.exit_code == 0, result.output
    return result.stdout


def test_churn_under_a_pause_starts_nothing_loses_nothing_and_the_wait_returns(
    churn_cluster: Cluster,
) -> None:
    cluster = churn_cluster
    # Given six workers sharing a backlog, each of them running tasks
    first = [cluster.worker(f"v1-{i}", concurrency=2) for i in range(1, 7)]
    for worker in first:
        worker.wait_applied()
    sent = [cluster.send(f"t{i}", DURATION) for i in range(BACKLOG)]
    wait_for(
        lambda: hostnames(first) <= {r["worker"] for r in cluster.records()},
        timeout=60,
        what="every worker to run tasks",
    )

    # When the cluster is paused and waited for
    result = celery_pause.pause(cluster.app, wait=True, timeout=60)
    paused_at = time.time()
    assert not result.lost and len(result.workers) == 6
    assert len(cluster.records()) < BACKLOG, "the backlog ran out: nothing held"

    # ... and it scales down to 2: the two workers holding the most prefetched tasks are
    # SIGKILLed, two more stopped as a deploy stops them
    reports = {r.hostname: r for r in celery_pause.status(cluster.app).workers}
    by_held = sorted(first, key=lambda w: reports[w.hostname].held, reverse=True)
    killed, scaled_away, kept = by_held[:2], by_held[2:4], by_held[4:]
    assert all(reports[w.hostname].held > 0 for w in killed), reports
    for worker in killed:
        worker.kill()
    cut_short = [w for w in scaled_away if deploy_stop(w)]

    # Then status stays readable and shows the killed workers as lost
    wait_for(
        lambda: all(states(cluster).get(h) == "lost" for h in hostnames(killed)),
        timeout=TTL + 10,
        what="the killed workers to be shown as lost",
    )
    text = status_text(cluster)
    assert all(f"{w.hostname}" in text for w in killed)
    assert text.count("lost contact") >= len(killed)

    # When every worker left is replaced by one with a new hostname (a rolling deploy)
    second = [cluster.worker(f"v2-{i}", concurrency=4) for i in range(1, 3)]
    for new, old in zip(second, kept, strict=True):
        new.wait_applied(result.generation)
        if deploy_stop(old):
            cut_short.append(old)
    status_text(cluster)

    # ... and a pause is waited for right after, from the CLI
    called = time.monotonic()
    again = pause(cluster, "--force", "--wait", "--timeout", "60")
    took = time.monotonic() - called

    # Then it returns within the bound, confirmed by the new workers, the lost ones named
    assert again.exit_code == EXIT_LOST, again.output
    assert took < BOUND, f"pause --wait took {took:.1f}s"
    assert "Confirmed by 2 of " in again.stdout
    lost = {line.split()[0] for line in again.stderr.splitlines() if "lost contact " in line}
    lost.discard("Warning:")
    assert hostnames(killed) <= lost <= hostnames(first), again.stderr
    # ... nothing started since the first pause, and status forgets the lost workers
    stays_quiet(cluster, paused_at, 1.0)
    wait_for(
        lambda: not hostnames(first) & set(states(cluster)),
        timeout=FORGET + 15,
        what="the stopped workers to be forgotten",
    )
    assert set(states(cluster)) == hostnames(second)
    assert "lost" not in status_text(cluster)

    # When the cluster is resumed, every task ran exactly once, none while paused
    cluster.resume_and_check(sent, paused_at)
    for worker in second:
        worker.check_alive()
    print(f"cut short by SIGKILL after {GRACE}s: {sorted(hostnames(cut_short))}")
