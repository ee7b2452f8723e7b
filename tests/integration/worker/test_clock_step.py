"""A step of a worker's wall clock (an NTP step, a VM resume) changes no decision: the
worker extrapolates the store's clock from a monotonic one. Stepped mid-run with
libfaketime, monotonic clock untouched, as a real step leaves it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import celery_pause
from support.harness import REDIS_BROKER, Cluster, wait_for
from support.observe import held, stays_quiet

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")


@pytest.mark.skipif(not LIBFAKETIME.exists(), reason="needs libfaketime: apt-get install faketime")
@pytest.mark.parametrize("shift", ["+1h", "-1h"])
def test_a_wall_clock_step_on_a_worker_neither_lifts_nor_moves_a_pause(
    redis_url: str, shift: str, tmp_path: Path
) -> None:
    # Given a worker whose wall clock libfaketime can step, paused with an auto-resume in
    # ten minutes, holding a backlog
    fake = tmp_path / "faketime"
    fake.write_text("+0\n")
    environ = {
        "LD_PRELOAD": str(LIBFAKETIME),
        "FAKETIME_TIMESTAMP_FILE": str(fake),
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }
    cluster = Cluster(broker=REDIS_BROKER, tmp=tmp_path, poll_interval=0.5)
    try:
        worker = cluster.worker("w1", concurrency=2, pool="threads", environ=environ)
        worker.wait_applied()
        celery_pause.pause(cluster.app, resume_after=600, wait=True, timeout=20)
        paused_since = time.time()
        sent = [cluster.send(f"t{i}") for i in range(6)]
        wait_for(lambda: held(worker) == len(sent), timeout=15, what="the backlog to be held")

        # When its wall clock steps by an hour, past the auto-resume (or back before the pause)
        fake.write_text(f"{shift}\n")

        # Then it keeps holding them for several polls: nothing starts (its tasks would record
        # their start on the stepped clock, so watch from an hour before the pause)
        stays_quiet(cluster, paused_since - 3600 - 60, 3.0)
        assert held(worker) == len(sent)

        # When its clock is right again and the pause is lifted, every task runs once
        fake.write_text("+0\n")
        cluster.resume_and_check(sent, paused_since)
    finally:
        cluster.close()
