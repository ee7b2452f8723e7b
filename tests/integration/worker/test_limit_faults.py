"""Limits under real faults: the store cut off from every worker, a worker killed mid-task."""

from __future__ import annotations

import time
from pathlib import Path

import celery_pause
from support.harness import AMQP_BROKER, REDIS_BROKER, Cluster, Worker, wait_for
from support.proxy import Proxy, through
from support.services import require
from support.stores import REDIS_STORE

TTL = 6.0
"""``pause_worker_ttl`` here: a killed worker's slots are free again within it."""


def test_a_store_out_of_reach_never_lifts_a_limit(redis_url: str, tmp_path: Path) -> None:
    require("RabbitMQ", "127.0.0.1", 5672)
    cluster = Cluster(broker=AMQP_BROKER, tmp=tmp_path, pause_lease=30.0, pause_worker_ttl=30.0)
    try:
        with Proxy(6379) as proxy:
            # Given two workers that reach the store through a proxy, under a limit of 5/s
            store = through(REDIS_STORE, proxy.port)
            workers = [cluster.worker(f"w{i}", concurrency=2, store=store) for i in (1, 2)]
            result = celery_pause.throttle(cluster.app, rate="5/s")
            for worker in workers:
                worker.wait_applied(result.generation)
            sent = [cluster.send(f"t{i}") for i in range(60)]
            wait_for(lambda: len(cluster.records()) >= 5, timeout=20, what="limited starts")

            # When the store stops answering every worker for 4 s (the lease is longer)
            proxy.blackhole()
            cut = time.time()
            wait_for(lambda: time.time() >= cut + 4, timeout=10, what="4 s of outage")
            proxy.forward()
            back = time.time()

            # Then once the start times reserved ran out (within a second), nothing started
            during = cluster.started_between(cut + 1.5, back)
            assert during == [], f"{len(during)} tasks started with the store out of reach"
            assert len(cluster.records()) < 60, "the backlog ran out before the cut"

            # ... and once it answers, the rest runs at the limit, each task once
            records = cluster.wait_records(60, timeout=40)
            assert sorted(r["id"] for r in records) == sorted(sent)
            after = sorted(r["started"] for r in records if r["started"] >= back)
            if len(after) > 10:
                pace = (len(after) - 1) / (after[-1] - after[0])
                assert pace <= 5.5, f"{pace:.1f}/s after the store came back"
    finally:
        cluster.close()


def test_a_killed_worker_gives_its_slots_back_within_the_worker_ttl(
    redis_url: str, tmp_path: Path
) -> None:
    cluster = Cluster(broker=REDIS_BROKER, tmp=tmp_path, pause_worker_ttl=TTL)
    try:
        # Given a limit of 2 at once, held by a worker running two long tasks
        doomed = cluster.worker("w1", concurrency=2)
        doomed.wait_applied()
        result = celery_pause.throttle(cluster.app, concurrency=2, wait=True)
        [cluster.send(f"long{i}", 60.0) for i in range(2)]
        wait_for(lambda: len(cluster.records()) == 2, timeout=20, what="the long tasks to start")
        survivor = cluster.worker("w2", concurrency=2, queues=[cluster.queue("other")])
        survivor.wait_applied(result.generation)
        [cluster.send(f"short{i}", queue=cluster.queue("other")) for i in range(4)]

        def survivor_starts() -> list[float]:
            return [r["started"] for r in cluster.records() if r["worker"] == survivor.hostname]

        wait_for(lambda: held_or_waiting(survivor) == 4, timeout=20, what="w2 to hold 4 tasks")
        assert survivor_starts() == [], "w2 started a task beyond the limit"

        # When that worker is killed (SIGKILL: it gives nothing back)
        killed = time.time()
        doomed.kill()

        # Then the other worker gets the slots once they expire, within the worker TTL

        first = min(wait_for(survivor_starts, timeout=TTL + 10, what="w2 to get a slot"))
        assert first - killed <= TTL + 1.5, f"w2 waited {first - killed:.1f} s for a slot"
    finally:
        cluster.close()


def held_or_waiting(worker: Worker) -> int:
    """Requests the worker's gate keeps back (held by a pause, or waiting for a limit)."""
    replies = worker.cluster.app.control.broadcast(
        "pause_state", destination=[worker.hostname], reply=True, timeout=2
    )
    state = replies[0][worker.hostname] if replies else {}
    return sum(state.get("held", {}).values()) + int(state.get("waiting", 0))


def test_a_rate_holds_while_workers_join_and_leave(redis_url: str, tmp_path: Path) -> None:
    cluster = Cluster(broker=REDIS_BROKER, tmp=tmp_path)
    try:
        # Given two workers under a limit of 20/s, and a backlog that outlasts the test
        first = [cluster.worker(f"w{i}", concurrency=2) for i in (1, 2)]
        result = celery_pause.throttle(cluster.app, rate="20/s")
        for worker in first:
            worker.wait_applied(result.generation)
        sent_at = time.time()
        for i in range(500):
            cluster.send(f"t{i}")

        # When two more join 4 s in (starting under the limit), and one leaves at 10 s
        wait_for(lambda: time.time() >= sent_at + 4, timeout=10, what="4 s")
        joined = [cluster.worker(f"w{i}", concurrency=2) for i in (3, 4)]
        wait_for(lambda: time.time() >= sent_at + 10, timeout=20, what="10 s")
        first[0].stop()
        wait_for(lambda: time.time() >= sent_at + 16, timeout=20, what="16 s")

        # Then from 2 s in every 4 s window ran 20/s within 10 %, whoever held the backlog
        starts = sorted(r["started"] for r in cluster.records())
        windows = [
            sum(1 for t in starts if sent_at + a <= t < sent_at + a + 4) for a in range(2, 13)
        ]
        assert all(72 <= w <= 88 for w in windows), f"starts per 4 s window: {windows}"
        # ... and the workers that joined ran their part under the limit from their first task
        hosts = {r["worker"] for r in cluster.records()}
        assert {w.hostname for w in joined} <= hosts, "the new workers ran nothing"
    finally:
        cluster.close()


def test_every_limited_task_runs_once_across_lift_restart_and_max_hold(
    redis_url: str, tmp_path: Path
) -> None:
    cluster = Cluster(broker=AMQP_BROKER, tmp=tmp_path, pause_max_hold=2.0)
    try:
        # Given two workers under a limit of 1 at once, with tasks waiting past pause_max_hold
        workers = [cluster.worker(f"w{i}", concurrency=2) for i in (1, 2)]
        result = celery_pause.throttle(cluster.app, concurrency=1)
        for worker in workers:
            worker.wait_applied(result.generation)
        sent = [cluster.send(f"t{i}", 0.2) for i in range(40)]
        wait_for(lambda: len(cluster.records()) >= 12, timeout=30, what="12 limited starts")

        # When a worker restarts, and the limit is then lifted
        workers[1].stop()
        workers[1].start()
        wait_for(lambda: len(cluster.records()) >= 20, timeout=30, what="20 limited starts")
        celery_pause.resume(cluster.app)

        # Then every task ran exactly once
        records = cluster.wait_records(40, timeout=60)
        assert sorted(r["id"] for r in records) == sorted(sent), "lost or duplicated tasks"
        # ... waiting tasks went back to the broker and came again (pause_max_hold)
        returned = sum(w.log_count("held over 2s to the broker") for w in workers)
        assert returned >= 1, "no waiting task was returned after pause_max_hold"
    finally:
        cluster.close()
