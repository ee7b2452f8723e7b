"""A step of a worker's wall clock (an NTP step, a VM resume) changes no decision: the
worker extrapolates the store's clock from a monotonic one. Stepped mid-run with
libfaketime, monotonic clock untouched, as a real step leaves it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import celery_pause
from support.harness import REDIS_BROKER, Cluster, Worker, wait_for
from support.observe import held, stays_quiet
from support.proj import RECORD_TASK

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
BACKLOG = 6

pytestmark = pytest.mark.skipif(
    not LIBFAKETIME.exists(), reason="needs libfaketime: apt-get install faketime"
)


class SteppedWorker:
    """A cluster with one worker whose wall clock :meth:`step` moves."""

    def __init__(self, tmp_path: Path) -> None:
        self.fake = tmp_path / "faketime"
        self.fake.write_text("+0\n")
        self.cluster = Cluster(broker=REDIS_BROKER, tmp=tmp_path, poll_interval=0.5)
        environ = {
            "LD_PRELOAD": str(LIBFAKETIME),
            "FAKETIME_TIMESTAMP_FILE": str(self.fake),
            "FAKETIME_NO_CACHE": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        }
        self.worker: Worker = self.cluster.worker(
            "w1", concurrency=2, pool="threads", environ=environ
        )

    def step(self, shift: str) -> None:
        self.fake.write_text(f"{shift}\n")


@pytest.fixture
def stepped(redis_url: str, tmp_path: Path) -> Iterator[SteppedWorker]:
    setup = SteppedWorker(tmp_path)
    setup.worker.wait_applied()
    yield setup
    setup.cluster.close()


def test_a_step_forward_past_an_auto_resume_does_not_lift_the_pause(
    stepped: SteppedWorker,
) -> None:
    # Given a worker paused with an auto-resume in ten minutes, holding a backlog (a pause
    # of the task, not of its queue: the worker goes on receiving and holds what comes)
    cluster, worker = stepped.cluster, stepped.worker
    celery_pause.pause(cluster.app, tasks=[RECORD_TASK], resume_after=600, wait=True, timeout=20)
    paused_since = time.time()
    sent = [cluster.send(f"t{i}") for i in range(BACKLOG)]
    wait_for(lambda: held(worker) == BACKLOG, timeout=15, what="the backlog to be held")

    # When its wall clock steps an hour forward, past the auto-resume
    stepped.step("+1h")

    # Then it keeps holding them for several polls (its tasks would record their start on
    # the stepped clock: anything after the pause counts)
    stays_quiet(cluster, paused_since, 3.0)
    assert held(worker) == BACKLOG

    # When its clock is right again and the pause is lifted, every task runs once
    stepped.step("+0")
    cluster.resume_and_check(sent, paused_since)


def test_a_step_back_does_not_delay_a_scheduled_pause(stepped: SteppedWorker) -> None:
    # Given a pause of the task scheduled to start in 2 s
    cluster, worker = stepped.cluster, stepped.worker
    start = time.time() + 2.0
    celery_pause.pause(cluster.app, tasks=[RECORD_TASK], start_at=start)

    # When the worker's wall clock steps an hour back before it starts
    stepped.step("-1h")

    # Then the pause takes hold on time: what comes after its start is held, nothing starts
    wait_for(lambda: time.time() > start + 1.0, timeout=10, what="the pause to start")
    sent = [cluster.send(f"t{i}") for i in range(BACKLOG)]
    wait_for(lambda: held(worker) == BACKLOG, timeout=15, what="the backlog to be held")
    stays_quiet(cluster, start - 3600 - 60, 1.0)

    # When its clock is right again and the pause is lifted, every task runs once
    stepped.step("+0")
    cluster.resume_and_check(sent, start)
