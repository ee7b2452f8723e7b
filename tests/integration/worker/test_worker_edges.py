"""Edges of the worker side: long pauses, shutdown, timeouts, a missing store, pools."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import celery_pause
from celery_pause import PauseTimeout
from support.harness import AMQP_BROKER, Cluster, free_port, redis_server, wait_for
from support.holds import wait_restored
from support.observe import held, stays_quiet
from support.services import require


@pytest.fixture
def redelivering_cluster(redis_url: str, tmp_path: Path) -> Iterator[Cluster]:
    # Unacked messages older than 2 s are restored by a sweep every second.
    cluster = Cluster(
        broker=redis_url,
        private_broker_keys=True,
        tmp=tmp_path,
        broker_transport_options={
            "visibility_timeout": 2,
            "unacked_restore_interval": 1,
            "unacked_restore_throttle": 1,
        },
    )
    yield cluster
    cluster.close()


def test_pause_longer_than_visibility_timeout_duplicates_nothing(
    redelivering_cluster: Cluster,
) -> None:
    # Given a Redis visibility timeout of 2 s (so tasks are held at most 0.5 s), and a
    # worker that keeps consuming a second queue, so its restore sweep keeps running
    cluster = redelivering_cluster
    paused_q, open_q = cluster.queue("slow"), cluster.queue("other")
    worker = cluster.worker("w1", queues=[paused_q, open_q])
    worker.wait_applied()
    sent = [cluster.send(f"t{i}", 0.3, queue=paused_q) for i in range(8)]
    cluster.wait_records(1)

    # When its queue is paused for several visibility timeouts and restore sweeps
    celery_pause.pause(cluster.app, queues=[paused_q], wait=True, timeout=20)
    window_start = time.time()
    wait_for(lambda: held(worker) == 0, timeout=15, what="held tasks to go back to the broker")
    stays_quiet(cluster, window_start, 8.0)

    # Then after resume every task ran exactly once
    cluster.resume_and_check(sent, window_start)
    assert worker.log_count("returned") >= 1


def test_resume_after_resumes_with_no_command(cluster: Cluster) -> None:
    # Given a worker paused for 2 seconds
    worker = cluster.worker("w1")
    worker.wait_applied()
    result = celery_pause.pause(cluster.app, resume_after=2, wait=True, timeout=20)
    assert result.hold.resume_at is not None
    sent = [cluster.send(f"t{i}") for i in range(4)]

    # Then the tasks run once the time has come, and not before
    records = cluster.wait_records(len(sent), timeout=30)
    assert sorted(r["id"] for r in records) == sorted(sent)
    assert min(r["started"] for r in records) >= result.hold.resume_at - 0.05
    assert not celery_pause.status(cluster.app).paused


def test_warm_shutdown_while_paused_is_prompt_and_loses_nothing(cluster: Cluster) -> None:
    # Given a paused worker holding prefetched tasks
    worker = cluster.worker("w1")
    worker.wait_applied()
    sent = [cluster.send(f"t{i}", 0.2) for i in range(8)]
    cluster.wait_records(1)
    celery_pause.pause(cluster.app, wait=True, timeout=20)
    assert held(worker) >= 1

    # When it is shut down warm
    began = time.monotonic()
    assert worker.stop(timeout=20) == 0
    took = time.monotonic() - began

    # Then it exited promptly, and a later worker runs every task exactly once after resume
    assert took < 10, f"warm shutdown took {took:.1f}s"
    cluster.worker("w2").wait_applied()
    celery_pause.resume(cluster.app)
    records = cluster.wait_records(len(sent))
    assert sorted(r["id"] for r in records) == sorted(sent)


def test_wait_timeout_names_the_busy_worker_and_task(cluster: Cluster) -> None:
    # Given a worker running a long task
    worker = cluster.worker("w1")
    worker.wait_applied()
    long_task = cluster.send("long", 4.0)
    cluster.wait_records(1)

    # When a pause is waited for with a short timeout
    with pytest.raises(PauseTimeout) as timed_out:
        celery_pause.pause(cluster.app, wait=True, timeout=1.0)

    # Then the error names the worker and the task, and the pause stays
    assert timed_out.value.busy == {worker.hostname: [long_task]}
    assert long_task in str(timed_out.value)
    assert celery_pause.status(cluster.app).paused


def test_worker_starting_without_a_store_holds_everything_until_it_can_read(
    redis_url: str, tmp_path: Path
) -> None:
    # Given a store that is down when the worker starts
    port = free_port()
    cluster = Cluster(broker=redis_url, tmp=tmp_path, store=f"redis://:pw@127.0.0.1:{port}/0")
    try:
        worker = cluster.worker("w1")
        wait_for(
            lambda: worker.log_count("cannot read the pause state"),
            timeout=30,
            what="the worker to report the missing store",
        )
        sent = [cluster.send(f"t{i}") for i in range(3)]

        # Then it starts nothing, and does not print the store's password
        stays_quiet(cluster, 0.0, 2.0)
        worker.check_alive()
        assert ":pw@" not in worker.log.read_text()

        # When the store comes up (empty: nothing paused), the tasks run
        with redis_server(port, "pw"):
            records = cluster.wait_records(len(sent), timeout=30)
            assert sorted(r["id"] for r in records) == sorted(sent)
    finally:
        cluster.close()


def test_store_lost_while_paused_keeps_the_worker_paused(redis_url: str, tmp_path: Path) -> None:
    # Given a paused worker with tasks waiting, whose store (a Redis without persistence) goes away
    port = free_port()
    cluster = Cluster(broker=redis_url, tmp=tmp_path, store=f"redis://:pw@127.0.0.1:{port}/0")
    try:
        with redis_server(port, "pw"):
            worker = cluster.worker("w1")
            worker.wait_applied()
            window_start = time.time()
            paused = celery_pause.pause(
                cluster.app,
                reason="deploy",
                by="alice@ops",
                resume_after=3600,
                wait=True,
                timeout=20,
            )
            sent = [cluster.send(f"t{i}") for i in range(40)]

        # Then it keeps its last known state: alive, logging, starting nothing
        wait_for(
            lambda: worker.log_count("keeping the last known pause state"),
            timeout=30,
            what="the worker to report the lost store",
        )
        stays_quiet(cluster, window_start, 2.0)
        worker.check_alive()
        assert ":pw@" not in worker.log.read_text()

        # When the store comes back empty, as a Redis without persistence restarts
        with redis_server(port, "pw"):
            # Then the worker writes the hold back as placed, says so, and starts nothing
            lost = "the store held no state"
            wait_restored(cluster, paused.hold, by=worker.hostname, lost=lost)
            stays_quiet(cluster, window_start, 3.0)
            assert worker.log_count("restored the 1 hold(s)") == 1, "restored more than once"

            # And the operator's resume lifts it: every task runs exactly once
            cluster.resume_and_check(sent, window_start)
    finally:
        cluster.close()


def test_prefork_without_putlocks_is_refused_with_an_explanation(
    redis_url: str, tmp_path: Path
) -> None:
    # Given prefork with worker_pool_putlocks off: prefetched tasks go to the pool at once
    cluster = Cluster(broker=redis_url, tmp=tmp_path, worker_pool_putlocks=False)
    try:
        # Then the worker refuses to start, and says what to change
        worker = cluster.worker("w1")
        assert worker.proc is not None
        assert worker.proc.wait(60) != 0
        assert "Turn worker_pool_putlocks on" in worker.log.read_text()
    finally:
        cluster.close()


def test_solo_pool_holds_between_tasks(redis_url: str, tmp_path: Path) -> None:
    cluster = Cluster(broker=redis_url, tmp=tmp_path)
    try:
        worker = cluster.worker("w1", pool="solo")
        worker.wait_applied()
        sent = [cluster.send(f"t{i}", 0.2) for i in range(6)]
        cluster.wait_records(1)
        celery_pause.pause(cluster.app, wait=True, timeout=20)
        window_start = time.time()
        stays_quiet(cluster, window_start, 1.5)
        cluster.resume_and_check(sent, window_start)
    finally:
        cluster.close()


def test_file_store_drives_real_workers(redis_url: str, tmp_path: Path) -> None:
    # Given two workers sharing a file store on this host
    cluster = Cluster(broker=redis_url, tmp=tmp_path, store=f"file://{tmp_path}/store")
    try:
        workers = [cluster.worker(name) for name in ("w1", "w2")]
        for worker in workers:
            worker.wait_applied()
        sent = [cluster.send(f"t{i}", 0.3) for i in range(10)]
        cluster.wait_records(2)

        # When paused, both confirm, and nothing starts until resumed
        result = celery_pause.pause(cluster.app, wait=True, timeout=20)
        window_start = time.time()
        assert sorted(w.hostname for w in result.workers) == sorted(w.hostname for w in workers)
        stays_quiet(cluster, window_start, 1.5)
        cluster.resume_and_check(sent, window_start)
    finally:
        cluster.close()


@pytest.mark.parametrize(
    ("store", "expected"),
    [
        (None, "set pause_store_url"),
        ("mongodb://user:hunter2@db/pause", "pause_store_url 'mongodb://user:**@db/pause'"),
    ],
)
def test_worker_without_a_usable_store_refuses_to_start(
    tmp_path: Path, store: str | None, expected: str
) -> None:
    # Given a RabbitMQ app with no store set, or a store of an unknown kind
    require("RabbitMQ", "127.0.0.1", 5672)
    cluster = Cluster(broker=AMQP_BROKER, tmp=tmp_path, store=store or "")
    try:
        # Then the worker exits, naming the setting, with no password in sight
        worker = cluster.worker("w1")
        assert worker.proc is not None
        assert worker.proc.wait(60) != 0
        log = worker.log.read_text()
        assert expected in log
        assert "hunter2" not in log
    finally:
        cluster.close()
