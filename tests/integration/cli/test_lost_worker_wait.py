"""``celery -A proj pause --wait`` with a worker lost: SIGKILLed (a dead pod) or SIGSTOPped
(frozen, as a partitioned node looks from the store). The wait returns once the lost worker
surely fenced itself, names it, and exits 4; ``--wait-for-lost`` keeps waiting for it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import celery_pause
from celery_pause import cli
from support.cli import invoke, pause, status_doc
from support.harness import ROOT, Cluster, Worker, wait_for
from support.observe import stays_quiet

POLL, TTL, LEASE, FORGET = 0.5, 2.0, 2.0, 15.0
SETTINGS = {
    "pause_worker_ttl": TTL,
    "pause_lease": LEASE,
    "pause_forget_worker_after": FORGET,
    "pause_store_timeout": 0.5,
}
BOUND = TTL + LEASE + 10
"""Seconds within which a wait returns once a worker is lost (the issue's bound)."""
EXIT_LOST, EXIT_UNCONFIRMED, EXIT_USAGE = 4, 3, 2


@pytest.fixture
def lossy_cluster(redis_url: str, tmp_path: Path) -> Iterator[Cluster]:
    """A Redis cluster with short reporting and lease settings (the bound about 14 s)."""
    cluster = Cluster(broker=redis_url, tmp=tmp_path, poll_interval=POLL, **SETTINGS)
    yield cluster
    cluster.close()


def celery(cluster: Cluster, *args: str) -> subprocess.Popen[str]:
    """``celery -A support.proj ARGS`` started as an operator's shell would, output captured."""
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "support.proj", *args],
        cwd=ROOT, env=cluster.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def workers_in_status(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """The workers of ``celery pause status --json``, by hostname."""
    return {w["hostname"]: w for w in status_doc(cluster)["workers"]}


def start(cluster: Cluster, *names: str) -> list[Worker]:
    workers = [cluster.worker(name, concurrency=2) for name in names]
    for worker in workers:
        worker.wait_applied()
    return workers


def test_a_killed_worker_ends_the_wait_within_the_bound_named_and_with_exit_4(
    lossy_cluster: Cluster,
) -> None:
    cluster = lossy_cluster
    # Given three prefork workers, one of them SIGKILLed (a lost node)
    w1, w2, w3 = start(cluster, "w1", "w2", "w3")
    w3.kill()

    # When the operator pauses and waits, at once, with a long timeout
    called = time.monotonic()
    waiting = celery(cluster, "pause", "--wait", "--timeout", "90")
    out, err = waiting.communicate(timeout=120)
    took = time.monotonic() - called
    returned = time.time()

    # Then the wait returns within the bound, with the distinct exit code
    assert waiting.returncode == EXIT_LOST, (out, err)
    assert took < BOUND, f"pause --wait took {took:.1f}s"
    # ... counts the lost worker apart, naming it with what it last reported running
    assert "Confirmed by 2 of 3 workers, 1 lost contact and fenced itself" in out
    assert f"  {w3.hostname}  lost contact " in err
    assert "before it applied the pause; it last reported 0 tasks running" in err
    assert "--wait-for-lost" in err
    # ... status shows the lost worker
    shown = workers_in_status(cluster)
    assert shown[w3.hostname]["state"] == "lost"
    assert {shown[w.hostname]["state"] for w in (w1, w2)} == {"paused"}
    # ... and nothing starts anywhere after it
    sent = [cluster.send(f"t{i}") for i in range(6)]
    stays_quiet(cluster, returned, 1.0)

    # When pause_forget_worker_after has passed, status no longer shows it
    wait_for(
        lambda: w3.hostname not in workers_in_status(cluster),
        timeout=FORGET + 10,
        what=f"{w3.hostname} to be forgotten",
    )

    # ... and a wait then is confirmed by the two workers left, exit 0
    again = celery(cluster, "pause", "--force", "--wait")
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, (out, err)
    assert out.rstrip().endswith("Confirmed by 2 workers: nothing in scope is running.")
    cluster.resume_and_check(sent, returned)


def test_wait_for_lost_keeps_waiting_until_the_frozen_worker_reports_again(
    lossy_cluster: Cluster,
) -> None:
    cluster = lossy_cluster
    # Given two workers, one of them frozen (its main process SIGSTOPped)
    _, frozen = start(cluster, "w1", "w2")
    assert frozen.proc is not None
    os.kill(frozen.proc.pid, signal.SIGSTOP)
    try:
        # When a pause is waited for with --wait-for-lost
        waiting = celery(cluster, "pause", "--wait", "--wait-for-lost", "--timeout", "60")

        # Then it still waits well after the worker would count as fenced
        past_fence = time.time() + TTL + LEASE + 3
        wait_for(
            lambda: time.time() > past_fence or waiting.poll() is not None,
            timeout=TTL + LEASE + 30,
            what="the wait to run past the fence point",
        )
        assert waiting.poll() is None, waiting.communicate()
    finally:
        # When the worker is thawed
        os.kill(frozen.proc.pid, signal.SIGCONT)

    # Then it reports again, confirms, and the wait ends with exit 0, nobody lost
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, (out, err)
    assert out.rstrip().endswith("Confirmed by 2 workers: nothing in scope is running.")
    assert "lost contact with" not in err


def test_wait_for_lost_needs_wait(lossy_cluster: Cluster) -> None:
    # When --wait-for-lost is given without --wait, to pause or to throttle
    paused = pause(lossy_cluster, "--wait-for-lost")
    throttled = invoke(lossy_cluster.app, cli.throttle, "--rate", "5/s",
                            "--wait-for-lost")  # fmt: skip

    # Then each is a usage error naming the option, and nothing is recorded
    for result in (paused, throttled):
        assert result.exit_code == EXIT_USAGE, result.output
        assert "--wait-for-lost applies only with --wait" in result.output
    assert celery_pause.status(lossy_cluster.app).state.generation == 0


def test_a_lost_worker_past_a_short_timeout_still_times_out_with_exit_3(
    lossy_cluster: Cluster,
) -> None:
    # Given two workers, one SIGKILLed and shown as lost
    _, gone = start(lossy_cluster, "w1", "w2")
    gone.kill()
    wait_for(
        lambda: workers_in_status(lossy_cluster)[gone.hostname]["state"] == "lost",
        timeout=TTL + 10,
        what=f"{gone.hostname} to be shown as lost",
    )

    # When a pause is waited for with a timeout shorter than a lease (the least a wait
    # waits before it counts a lost worker as fenced)
    result = pause(lossy_cluster, "--wait", "--timeout", "1")

    # Then it times out (exit 3) naming it as lost, as before
    assert result.exit_code == EXIT_UNCONFIRMED, result.output
    assert f"{gone.hostname} lost contact" in result.output


def test_a_throttle_wait_counts_a_killed_worker_as_lost_too(lossy_cluster: Cluster) -> None:
    # Given two workers, one SIGKILLed
    _, gone = start(lossy_cluster, "w1", "w2")
    gone.kill()

    # When a limit is waited for
    called = time.monotonic()
    result = invoke(lossy_cluster.app, cli.throttle, "--rate", "5/s", "--wait", "--timeout", "60")
    took = time.monotonic() - called

    # Then it is in force on the worker left, the lost one named, with exit 4, in the bound
    assert result.exit_code == EXIT_LOST, result.output
    assert took < BOUND, f"throttle --wait took {took:.1f}s"
    assert (
        "Confirmed by 1 of 2 workers, 1 lost contact and fenced itself: the limit is in force."
        in result.stdout
    )
    assert "before it confirmed the limit" in result.stderr
    assert f"  {gone.hostname}  lost contact " in result.stderr
