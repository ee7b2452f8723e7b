"""The core promise on real brokers and real prefork workers: a pause holds."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest

import celery_pause
from celery_pause import PauseTimeout, WorkerReport
from celery_pause.model.outcome import Outcome
from celery_pause.model.scope import EVERYTHING
from celery_pause.model.state import Hold, PauseState
from celery_pause.stores import store_for
from support.harness import Cluster, Worker, wait_for
from support.observe import held, scheduled, stays_quiet


def test_nothing_starts_while_paused_even_prefetched_eta_or_after_restart(cluster: Cluster) -> None:
    # Given a prefork worker (concurrency 1, prefetch multiplier 4) with a backlog
    worker = cluster.worker("w1")
    worker.wait_applied()
    eta_due = time.time() + 3
    eta = datetime.fromtimestamp(eta_due, tz=timezone.utc)
    sent = [cluster.send(f"eta{i}", eta=eta) for i in range(2)]
    wait_for(lambda: scheduled(cluster, worker) == 2, timeout=10, what="ETA tasks to be received")
    sent += [cluster.send(f"t{i}", 0.4) for i in range(12)]
    cluster.wait_records(1)

    # When the cluster is paused and the pause confirmed
    result = celery_pause.pause(cluster.app, reason="maintenance", wait=True, timeout=20)
    window_start = time.time()
    assert [w.hostname for w in result.workers] == [worker.hostname]

    # Then prefetched tasks are held, ETA tasks falling due are held too, ...
    held_at_pause = held(worker)
    assert held_at_pause >= 1, "prefetched tasks should wait in the gate"
    wait_for(lambda: held(worker) >= held_at_pause + 2, timeout=15, what="ETA tasks to fall due")
    stays_quiet(cluster, window_start, 0.5)

    # ... and a worker restarted while paused starts nothing
    assert worker.stop() == 0
    restarted = cluster.worker("w1")
    restarted.wait_applied(result.generation)
    stays_quiet(cluster, window_start, 2.0)

    # When resumed, every task runs exactly once
    records = cluster.resume_and_check(sent, window_start)
    assert all(r["started"] >= eta_due for r in records if r["tag"].startswith("eta"))


def active_queues(cluster: Cluster, worker: Worker) -> list[str]:
    replies = cluster.app.control.inspect([worker.hostname], timeout=2).active_queues() or {}
    return sorted(q["name"] for q in replies.get(worker.hostname, []))


def test_per_queue_pause_leaves_other_queues_flowing(cluster: Cluster) -> None:
    # Given a worker consuming two queues
    paused_q, open_q = cluster.queue("reports"), cluster.queue("emails")
    worker = cluster.worker("w1", queues=[paused_q, open_q], concurrency=2)
    worker.wait_applied()

    # When one queue is paused
    result = celery_pause.pause(cluster.app, queues=[paused_q], wait=True, timeout=20)
    window_start = time.time()
    assert active_queues(cluster, worker) == [open_q]
    held_ids = [cluster.send(f"r{i}", queue=paused_q) for i in range(5)]
    open_ids = [cluster.send(f"e{i}", queue=open_q) for i in range(5)]

    # Then the other queue's tasks all run, and none of the paused queue's
    records = cluster.wait_records(5)
    assert sorted(r["id"] for r in records) == sorted(open_ids)
    stays_quiet_on(cluster, paused_q, window_start, 1.0)

    # When resumed, the worker consumes exactly its queues again and the held tasks run once
    window_end = time.time()
    celery_pause.resume(cluster.app)
    records = cluster.wait_records(10)
    assert sorted(r["id"] for r in records) == sorted(held_ids + open_ids)
    assert not [
        r for r in cluster.started_between(window_start, window_end) if r["queue"] == paused_q
    ]
    worker.wait_applied(result.generation + 1)
    assert active_queues(cluster, worker) == sorted([paused_q, open_q])


def stays_quiet_on(cluster: Cluster, queue: str, since: float, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = [r for r in cluster.started_between(since, float("inf")) if r["queue"] == queue]
        assert not started, f"tasks of paused {queue} started: {started}"
        time.sleep(0.05)


def test_broker_connection_dropped_while_paused_stays_paused(cluster: Cluster) -> None:
    # Given a paused worker holding prefetched tasks
    worker = cluster.worker("w1")
    worker.wait_applied()
    sent = [cluster.send(f"t{i}", 0.3) for i in range(8)]
    cluster.wait_records(1)
    celery_pause.pause(cluster.app, wait=True, timeout=20)
    window_start = time.time()
    connected = worker.log_count("Connected to")

    # When its broker connection is cut from the server side
    assert worker.drop_connections() >= 1
    wait_for(
        lambda: worker.log_count("Connected to") > connected,
        timeout=30,
        what="the worker to reconnect",
    )

    # Then it is still paused after the reconnect, and nothing was lost
    worker.wait_applied()
    stays_quiet(cluster, window_start, 2.0)
    cluster.resume_and_check(sent, window_start)


def test_a_lost_push_is_caught_up_by_polling(cluster: Cluster) -> None:
    # Given a worker, and a pause recorded without any broadcast (as if the push was lost)
    worker = cluster.worker("w1")
    worker.wait_applied()

    def add_hold(state: PauseState, now: float) -> Outcome[PauseState, None]:
        return Outcome(
            state.with_holds([*state.holds, Hold(scope=EVERYTHING, paused_at=now)]), None
        )

    snapshot = store_for(cluster.app).update(add_hold).snapshot
    began = time.monotonic()

    # Then the worker applies it by polling, within a poll interval or so
    worker.wait_applied(snapshot.state.generation, timeout=cluster.poll_interval * 5)
    assert time.monotonic() - began < cluster.poll_interval * 5
    window_start = time.time()
    sent = cluster.send("t")
    stays_quiet(cluster, window_start, 1.0)
    celery_pause.resume(cluster.app)
    assert [r["id"] for r in cluster.wait_records(1)] == [sent]


def test_wait_counts_a_worker_that_is_still_starting(cluster: Cluster) -> None:
    # Given a worker that registered itself but has not applied any state yet
    store = store_for(cluster.app)
    store.put_worker(WorkerReport(hostname="booting@host", pid=1, seen=store.now()))

    # Then a waited pause does not call the cluster quiet without it
    with pytest.raises(PauseTimeout) as timed_out:
        celery_pause.pause(cluster.app, wait=True, timeout=0.5)
    assert timed_out.value.busy == {"booting@host": []}
    assert "has not applied the pause" in str(timed_out.value)


def test_a_worker_starting_on_a_backlog_runs_it(cluster: Cluster) -> None:
    # Given tasks already waiting before any worker starts
    sent = [cluster.send(f"t{i}") for i in range(20)]

    # When a worker starts on them (nothing paused)
    worker = cluster.worker("w1")

    # Then it runs every one of them, and keeps running
    records = cluster.wait_records(len(sent))
    assert sorted(r["id"] for r in records) == sorted(sent)
    worker.check_alive()
