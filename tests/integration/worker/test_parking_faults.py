"""Parking under faults: a worker killed while it parks, a broker and a store restarted."""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

import celery_pause
from celery_pause.api.document import overview
from celery_pause.stores import store_for
from support.harness import AMQP_BROKER, REDIS_BROKER, Cluster, Worker, wait_for
from support.redis_server import RedisServer
from support.services import require

MAX_HELD = 10
SETTINGS = {"pause_labels": {"tenant": "tenant_id"}, "pause_max_held": MAX_HELD}
RESTORING = {  # Redis gives a dead worker's unacknowledged messages back after 3 s
    "visibility_timeout": 3,
    "unacked_restore_interval": 1,
    "unacked_restore_throttle": 1,
}


def parked(cluster: Cluster, hold: str) -> int:
    """The tasks parked under ``hold``, as ``pause status`` counts them."""
    return overview(cluster.app).parked.get(hold) or 0


def send_a(cluster: Cluster, count: int) -> list[str]:
    return [cluster.send(f"A{i:04}", kwargs={"tenant_id": "A"}) for i in range(count)]


def parked_backlog(cluster: Cluster, count: int) -> tuple[Worker, str, list[str]]:
    """A worker, and ``count`` tasks of tenant A it parked under a pause: the worker, the
    pause's hold id and the task ids."""
    worker = cluster.worker("w1", concurrency=2)
    worker.wait_applied()
    hold = celery_pause.pause(cluster.app, labels=["tenant=A"], wait=True).hold.id
    ids = send_a(cluster, count)
    wait_for(lambda: parked(cluster, hold) >= count - MAX_HELD, timeout=60, what="parked")
    return worker, hold, ids


def resume_and_check_once(
    cluster: Cluster, hold: str, worker: Worker, ids: list[str], timeout: float = 120
) -> None:
    """Resume; once every task started, nothing is parked and ``worker`` is idle, check that
    each of ``ids`` ran exactly once."""
    celery_pause.resume(cluster.app)
    cluster.wait_records(len(ids), timeout=timeout)
    settle(cluster, hold, worker)
    assert sorted(record["id"] for record in cluster.records()) == sorted(ids)


def fetch_window(cluster: Cluster) -> int:
    """Tasks a SIGKILL may take with it before any worker received them: on Redis, kombu takes
    a message off its list, then records it as unacknowledged in a second round trip, so a
    worker killed between the two loses the one it was fetching (kombu#305; as any Celery worker
    on Redis would). RabbitMQ keeps it until it is acknowledged."""
    return 1 if str(cluster.app.conf.broker_url).startswith("redis") else 0


def check_once_after_kill(
    cluster: Cluster, ids: list[str], workers: Iterable[Worker], timeout: float = 180
) -> None:
    """Wait until each of ``ids`` ran, but for those :func:`fetch_window` allows that no worker
    ever received; then check that none ran twice."""
    window, workers = fetch_window(cluster), list(workers)

    def accounted() -> list[str] | None:
        ran = [record["id"] for record in cluster.records()]
        missing = set(ids) - set(ran)
        if len(missing) > window:
            return None
        logs = "".join(w.log.read_text(errors="replace") for w in workers if w.log.exists())
        return ran if not any(task_id in logs for task_id in missing) else None

    ran = wait_for(accounted, timeout=timeout, what="every task a worker received to run")
    assert ran is not None and len(ran) == len(set(ran)), "a task ran twice"


def settle(cluster: Cluster, hold: str, worker: Worker) -> None:
    """Wait until nothing is parked and ``worker`` has nothing reserved."""
    wait_for(
        lambda: parked(cluster, hold) == 0 and worker.wait_applied().reserved == 0,
        timeout=60,
        what="the parking queue empty and the worker idle",
    )


@pytest.fixture(params=["redis", "amqp"])
def killing_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    """A cluster whose broker gives a killed worker's messages back within seconds."""
    if request.param == "amqp":
        require("RabbitMQ", "127.0.0.1", 5672)
        cluster = Cluster(broker=AMQP_BROKER, tmp=tmp_path, **SETTINGS)
    else:
        require("Redis", "127.0.0.1", 6379)
        cluster = Cluster(
            broker=REDIS_BROKER,
            tmp=tmp_path,
            private_broker_keys=True,
            broker_transport_options=RESTORING,
            **SETTINGS,
        )
    yield cluster
    cluster.close()


def test_a_worker_killed_while_it_parks_loses_nothing_and_runs_nothing_twice(
    killing_cluster: Cluster,
) -> None:
    # Given two workers parking a paused tenant's backlog of 1500 tasks
    cluster = killing_cluster
    doomed, survivor = (cluster.worker(f"w{i}", concurrency=2) for i in (1, 2))
    for worker in (doomed, survivor):
        worker.wait_applied()
    hold = celery_pause.pause(cluster.app, labels=["tenant=A"], wait=True, timeout=20).hold.id
    ids = send_a(cluster, 1500)

    # When one of them is killed (SIGKILL) while they move it
    wait_for(lambda: parked(cluster, hold) >= 200, timeout=60, what="parking to start")
    doomed.kill()

    # Then the other parks the rest, the dead worker's messages too, once the broker gives
    # them back
    most = 1500 - MAX_HELD - fetch_window(cluster)
    wait_for(lambda: parked(cluster, hold) >= most, timeout=90, what="all parked")

    # And, resumed, every task ran exactly once (but one a SIGKILL took in kombu's fetch)
    celery_pause.resume(cluster.app)
    check_once_after_kill(cluster, ids, (doomed, survivor))
    settle(cluster, hold, survivor)
    check_once_after_kill(cluster, ids, (doomed, survivor), timeout=1)


def test_parked_tasks_outlive_a_rabbitmq_restart(tmp_path: Path) -> None:
    # Given a backlog parked on RabbitMQ (a durable queue, persistent messages)
    require("RabbitMQ", "127.0.0.1", 5672)
    cluster = Cluster(broker=AMQP_BROKER, tmp=tmp_path, **SETTINGS)
    try:
        worker, hold, ids = parked_backlog(cluster, 200)

        # When RabbitMQ restarts under the running worker, and the tenant is resumed
        restart_rabbitmq()
        wait_for(lambda: parked(cluster, hold) >= 200 - MAX_HELD, timeout=60, what="recovered")
        # Then every task ran exactly once
        resume_and_check_once(cluster, hold, worker, ids)
    finally:
        cluster.close()


def test_parked_tasks_outlive_a_redis_restart(tmp_path: Path) -> None:
    # Given a Redis broker that writes every change to disk (AOF), and a backlog parked on it
    durable = ("--appendonly", "yes", "--appendfsync", "always", "--dir", str(tmp_path))
    with RedisServer(args=durable) as broker:
        cluster = Cluster(broker=broker.url(), tmp=tmp_path, **SETTINGS)
        try:
            worker, hold, ids = parked_backlog(cluster, 200)

            # When the worker stops, the broker restarts, a worker starts again, and the tenant
            # is resumed (Celery 5.7 exits a worker holding unacknowledged messages when its
            # Redis broker restarts, so the worker is restarted here as its supervisor would)
            worker.stop()
            broker.restart()
            assert parked(cluster, hold) >= 200 - MAX_HELD
            worker = cluster.worker("w2", concurrency=2)
            worker.wait_applied()
            # Then every task ran exactly once
            resume_and_check_once(cluster, hold, worker, ids)
        finally:
            cluster.close()


def restart_rabbitmq() -> None:
    """Stop and start the RabbitMQ application (its durable queues are read back from disk)."""
    for command in (["stop_app"], ["start_app"], ["await_startup"]):
        subprocess.run(["rabbitmqctl", "-q", *command], check=True, timeout=120)
    require("RabbitMQ", "127.0.0.1", 5672)


def test_parked_tasks_come_back_after_the_store_forgot_their_records(tmp_path: Path) -> None:
    # Given a store without persistence, and a backlog parked while a tenant is paused
    require("Redis", "127.0.0.1", 6379)
    with RedisServer() as store:
        cluster = Cluster(broker=REDIS_BROKER, tmp=tmp_path, store=store.url(), **SETTINGS)
        try:
            _, hold, ids = parked_backlog(cluster, 100)

            # When the store restarts empty (the worker restores the pause it knew), and the
            # tenant is resumed
            store.restart()
            wait_for(
                lambda: any(h.id == hold for h in celery_pause.status(cluster.app).holds),
                timeout=30,
                what="the pause restored",
            )
            celery_pause.resume(cluster.app)

            # Then every parked task came back and ran exactly once
            cluster.wait_records(100, timeout=60)
            assert sorted(record["id"] for record in cluster.records()) == sorted(ids)
        finally:
            cluster.close()


def test_a_worker_killed_while_it_feeds_fair_turns_loses_nothing_and_runs_nothing_twice(
    killing_cluster: Cluster,
) -> None:
    # Given starts shared fairly by tenant, a worker that feeds the turns but consumes another
    # queue (so the SIGKILL takes nothing kombu is fetching: only the feeding is cut), another
    # that runs the tasks, and 600 tasks of A and 200 of B
    cluster = killing_cluster
    hold = celery_pause.throttle(cluster.app, fair="tenant").hold.id
    feeder = cluster.worker("w1", queues=[cluster.queue("aside")])
    feeder.wait_applied()
    store = store_for(cluster.app)
    wait_for(lambda: store.lease_owner(f"feed:{hold}") == feeder.hostname, timeout=20, what="feed")
    runner = cluster.worker("w2", concurrency=2)
    runner.wait_applied()
    ids = [
        cluster.send(f"{t}{i:04}", 0.01, kwargs={"tenant_id": t})
        for t, n in (("A", 600), ("B", 200))
        for i in range(n)
    ]

    # When the feeding worker is killed (SIGKILL) while it feeds them
    cluster.wait_records(100, timeout=60)
    feeder.kill()

    # Then the other takes the feeding over, and every task ran exactly once
    cluster.wait_records(len(ids), timeout=180)
    wait_for(lambda: runner.wait_applied().reserved == 0, timeout=60, what="the worker idle")
    assert store.lease_owner(f"feed:{hold}") == runner.hostname
    assert sorted(record["id"] for record in cluster.records()) == sorted(ids)


def feeding_turns(cluster: Cluster) -> tuple[Worker, list[str]]:
    """A worker feeding fair turns by tenant, once 50 of 300 tasks of A and 100 of B ran: the
    worker and the task ids."""
    worker = cluster.worker("w1", concurrency=2)
    worker.wait_applied()
    celery_pause.throttle(cluster.app, fair="tenant", wait=True, timeout=20)
    ids = [
        cluster.send(f"{t}{i:04}", 0.02, kwargs={"tenant_id": t})
        for t, n in (("A", 300), ("B", 100))
        for i in range(n)
    ]
    cluster.wait_records(50, timeout=60)
    return worker, ids


def test_tasks_waiting_for_fair_turns_outlive_a_rabbitmq_restart_under_the_feeder(
    tmp_path: Path,
) -> None:
    # Given a worker feeding fair turns by tenant on RabbitMQ, and 300 tasks of A and 100 of B
    # waiting for their turns
    require("RabbitMQ", "127.0.0.1", 5672)
    cluster = Cluster(broker=AMQP_BROKER, tmp=tmp_path, **SETTINGS)
    try:
        worker, ids = feeding_turns(cluster)

        # When RabbitMQ restarts while the worker feeds them
        cut = time.time()
        restart_rabbitmq()
        back = time.time()

        # Then the worker and its feeder reconnect, and every task runs, once: but for a task
        # whose acknowledgement the restart cut off as it started, which RabbitMQ delivers again
        # (Celery's at-least-once, for any task; at most one per pool process)
        cluster.wait_records(len(ids), timeout=180)
        wait_for(lambda: worker.wait_applied().reserved == 0, timeout=60, what="the worker idle")
        records = cluster.records()
        assert sorted(set(record["id"] for record in records)) == sorted(ids)
        runs = Counter(record["id"] for record in records)
        first = {task: min(r["started"] for r in records if r["id"] == task) for task in runs}
        twice = {task: first[task] for task, count in runs.items() if count > 1}
        assert len(twice) <= 2 and max(runs.values()) <= 2, twice
        assert all(cut <= started <= back for started in twice.values()), (cut, back, twice)
    finally:
        cluster.close()


def test_tasks_waiting_for_fair_turns_outlive_a_redis_restart(tmp_path: Path) -> None:
    # Given a Redis broker that writes every change to disk (AOF), a worker feeding fair turns
    # by tenant on it, and 300 tasks of A and 100 of B waiting for their turns
    durable = ("--appendonly", "yes", "--appendfsync", "always", "--dir", str(tmp_path))
    with RedisServer(args=durable) as broker:
        cluster = Cluster(broker=broker.url(), tmp=tmp_path, **SETTINGS)
        try:
            worker, ids = feeding_turns(cluster)

            # When the worker stops while it feeds them, the broker restarts, and a worker
            # starts again (as its supervisor would start it: see the parking test above)
            worker.stop()
            waiting = overview(cluster.app).to_json()["totals"]["turns"]
            broker.restart()
            assert overview(cluster.app).to_json()["totals"]["turns"] == waiting > 0
            worker = cluster.worker("w2", concurrency=2)
            worker.wait_applied()

            # Then the new worker feeds the rest, and every task ran exactly once
            cluster.wait_records(len(ids), timeout=180)
            wait_for(lambda: worker.wait_applied().reserved == 0, timeout=60, what="idle")
            assert sorted(record["id"] for record in cluster.records()) == sorted(ids)
        finally:
            cluster.close()
