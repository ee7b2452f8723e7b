"""The pause guarantee on the threads, gevent and eventlet pools, with real workers.

Each cell CI runs catches a failure the others would not (see docs/testing.rst):
tasks already in the threads pool's executor queue, a full gevent pool blocking the
consumer, eventlet with late acks, RabbitMQ under a green pool's ``synloop`` and the
threads pool, one-at-a-time prefetch with ``-O fair``, and ``worker_disable_prefetch``.
``PAUSE_POOL_MATRIX=all`` runs every pool, broker and setting instead, each cell
reconnected and restarted while paused.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

import celery_pause
from celery_pause import api
from celery_pause.api.document import overview
from celery_pause.cli.render import status_lines
from support.harness import AMQP_BROKER, REDIS_BROKER, Cluster, Worker, wait_for
from support.observe import held, scheduled, stays_quiet
from support.services import require
from support.webclient import call, metric, probe_url


@dataclass(frozen=True)
class Cell:
    """One way to run a worker, and what happens to it while paused."""

    pool: str
    broker: str
    concurrency: int
    backlog: int
    duration: float = 0.3
    conf: dict[str, Any] = field(default_factory=dict)
    args: tuple[str, ...] = ()
    then: tuple[str, ...] = ()
    """``reconnect`` and ``restart`` while paused, in the order given, or nothing."""
    eta_in: float = 8.0
    """Seconds from sending the ETA task to its falling due, after the pause."""

    @property
    def prefetches_more(self) -> bool:
        """Whether the worker receives more tasks than it has slots (some wait in it)."""
        return self.conf.get("worker_prefetch_multiplier", 4) > 1 and not self.conf.get(
            "worker_disable_prefetch"
        )


CELLS = {
    # the executor queues every prefetched task at once; a restart while paused
    "threads-redis": Cell("threads", "redis", 2, 12, then=("restart",)),
    # as users run it: more tasks than greenlets, so the consumer blocks in a full pool
    "gevent-c100-redis": Cell("gevent", "redis", 100, 150, duration=1.0, then=("reconnect",)),
    # late acks: the held message stays unacknowledged in the worker
    "eventlet-redis-acks-late": Cell("eventlet", "redis", 4, 16, conf={"task_acks_late": True}),
    # py-amqp under the green synloop, one task prefetched per greenlet; a reconnect
    "gevent-amqp-prefetch1": Cell(
        "gevent", "amqp", 4, 12, conf={"worker_prefetch_multiplier": 1}, then=("reconnect",)
    ),
    # RabbitMQ, late acks, prefetch 1 and -O fair; tasks queued in the executor on reconnect
    "threads-amqp-fair": Cell(
        "threads",
        "amqp",
        2,
        10,
        conf={"task_acks_late": True, "worker_prefetch_multiplier": 1},
        args=("-O", "fair"),
        then=("reconnect",),
    ),
    # Redis fetches only for free slots: held tasks count as reserved
    "threads-redis-no-prefetch": Cell(
        "threads", "redis", 2, 10, conf={"worker_disable_prefetch": True}
    ),
}


def every_cell() -> dict[str, Cell]:
    """Every pool on both brokers with each setting the guarantee covers."""
    settings: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
        "defaults": ({}, ()),
        "acks-late": ({"task_acks_late": True}, ()),
        "prefetch1": ({"worker_prefetch_multiplier": 1}, ()),
        "fair": ({}, ("-O", "fair")),
        "no-prefetch": ({"worker_disable_prefetch": True}, ()),  # Redis only (Celery 5.6+)
    }
    sizes = {"threads": (2, 12, 0.3), "gevent": (100, 150, 1.0), "eventlet": (100, 150, 1.0)}
    cells = {}
    for pool, (concurrency, backlog, duration) in sizes.items():
        for broker in ("redis", "amqp"):
            for name, (conf, args) in settings.items():
                if name == "no-prefetch" and broker == "amqp":
                    continue
                if broker == "redis":
                    # kombu's default of 10 connections per channel is too few for 100
                    # greenlets acknowledging at once ("Couldn't ack: Too many connections")
                    conf = {**conf, "broker_transport_options": {"max_connections": 200}}
                cells[f"{pool}-{broker}-{name}"] = Cell(
                    pool, broker, concurrency, backlog, duration, conf, args,
                    then=("reconnect", "restart"), eta_in=8 + 4 * duration,
                )  # fmt: skip
    return cells


if os.environ.get("PAUSE_POOL_MATRIX") == "all":
    CELLS = every_cell()


@pytest.fixture(params=list(CELLS), ids=list(CELLS))
def cell(request: pytest.FixtureRequest) -> Cell:
    found = CELLS[request.param]
    require("Redis", "127.0.0.1", 6379)
    if found.broker == "amqp":
        require("RabbitMQ", "127.0.0.1", 5672)
    return found


@pytest.fixture
def pool_cluster(cell: Cell, tmp_path: Path) -> Iterator[Cluster]:
    broker = AMQP_BROKER if cell.broker == "amqp" else REDIS_BROKER
    cluster = Cluster(broker=broker, tmp=tmp_path, **cell.conf)
    yield cluster
    cluster.close()


def start(cluster: Cluster, cell: Cell) -> Worker:
    return cluster.worker("w1", pool=cell.pool, concurrency=cell.concurrency, args=cell.args)


def finished(cluster: Cluster) -> dict[str, float]:
    """Task id: when its body ended."""
    raw = cluster.records_client.lrange(cluster.finished_key, 0, -1)
    return {entry["id"]: entry["finished"] for entry in map(json.loads, raw)}


def reconnect(worker: Worker) -> None:
    connected = worker.log_count("Connected to")
    assert worker.drop_connections() >= 1
    wait_for(
        lambda: worker.log_count("Connected to") > connected,
        timeout=30,
        what="the worker to reconnect",
    )


def test_nothing_in_a_paused_scope_starts_on_any_pool(pool_cluster: Cluster, cell: Cell) -> None:
    # Given a worker of the cell's pool, an ETA task it received, and a backlog larger
    # than its concurrency of tasks that block on I/O
    cluster = pool_cluster
    worker = start(cluster, cell)
    worker.wait_applied(timeout=60)
    eta_due = time.time() + cell.eta_in
    sent = [cluster.send("eta", eta=datetime.fromtimestamp(eta_due, tz=timezone.utc))]
    wait_for(lambda: scheduled(cluster, worker) == 1, timeout=15, what="the ETA task to arrive")
    sent += [cluster.send(f"t{i}", cell.duration) for i in range(cell.backlog)]
    cluster.wait_records(min(cell.concurrency, cell.backlog) // 2 or 1)

    # When the pause is confirmed
    called = time.time()
    result = celery_pause.pause(cluster.app, wait=True, timeout=30)
    window_start = time.time()

    # Then every task that started before had ended, and the confirmation came at once
    ended = finished(cluster)
    starts = cluster.records()
    assert all(r["id"] in ended and ended[r["id"]] <= window_start for r in starts), "still running"
    assert window_start - max(ended.values()) < 1.0, "the pause was confirmed late"
    assert len(starts) < cell.backlog, "the backlog ran out before the pause: nothing to hold"
    # ... and what waited in the pool did not start: at most a slot's worth started
    # while the pause reached the worker
    late = [r["tag"] for r in starts if r["started"] > called]
    assert len(late) <= cell.concurrency + 2, f"started after the pause was called: {late}"
    if cell.prefetches_more:
        # a green pool's consumer waits for a free greenlet before it fetches more
        wait_for(lambda: held(worker) >= 1, timeout=10, what="tasks beyond the slots to be held")

    # ... the ETA task falling due is held too, and nothing starts
    assert eta_due > window_start + 1, "the pause came too late to test the ETA task"
    held_before = held(worker)
    wait_for(
        lambda: held(worker) > held_before and scheduled(cluster, worker) == 0,
        timeout=20,
        what="the ETA task to fall due and be held",
    )
    stays_quiet(cluster, window_start, 1.0)

    # ... also after a restart or a broker reconnect while paused
    for event in cell.then:
        if event == "restart":
            assert worker.stop() == 0
            worker = start(cluster, cell)
        else:
            reconnect(worker)
        worker.wait_applied(result.generation, timeout=60)
        stays_quiet(cluster, window_start, 1.5)

    # When resumed, every task runs exactly once, the held ones at once
    resumed_at = time.time()
    records = cluster.resume_and_check(sent, window_start)
    first = min(r["started"] for r in records if r["started"] >= resumed_at)
    assert first - resumed_at < 1.0, f"held tasks started {first - resumed_at:.2f}s after resume"


def test_wait_names_only_tasks_really_running_on_threads(redis_cluster: Cluster) -> None:
    # Given a threads worker (concurrency 2) running two long tasks, six more in its pool
    worker = redis_cluster.worker("w1", pool="threads", concurrency=2)
    worker.wait_applied()
    long = [redis_cluster.send(f"long{i}", 2.0) for i in range(2)]
    redis_cluster.wait_records(2)
    short = [redis_cluster.send(f"s{i}") for i in range(6)]

    def reserved() -> int:
        replies = redis_cluster.app.control.inspect([worker.hostname], timeout=1).reserved() or {}
        return len(replies.get(worker.hostname, []))

    wait_for(lambda: reserved() == 6, timeout=15, what="six tasks queued in the pool")

    # When paused without waiting, and the worker applied the pause
    result = celery_pause.pause(redis_cluster.app)

    def report() -> celery_pause.WorkerReport | None:
        for found in celery_pause.status(redis_cluster.app).workers:
            if found.hostname == worker.hostname and found.generation >= result.generation:
                return found
        return None

    applied = wait_for(report, timeout=15, what="the pause to be applied")

    # Then its report names exactly the two long tasks, not the six queued ones
    assert sorted(applied.running) == sorted(long)

    # ... and waiting returns as soon as they end, the six held, none started
    api.wait_until_quiet(redis_cluster.app, result.generation, timeout=30)
    returned = time.time()
    ended = finished(redis_cluster)
    assert returned - max(ended[task] for task in long) < 0.5
    assert wait_for(lambda: held(worker) == 6, timeout=10, what="the six to be held")
    window_start = max(ended[task] for task in long)
    stays_quiet(redis_cluster, window_start, 0.5)
    redis_cluster.resume_and_check(long + short, returned)


def test_tasks_queued_in_the_threads_pool_at_a_reconnect_run_once(redis_cluster: Cluster) -> None:
    # Given a threads worker (concurrency 1) running a long task, four more in its pool
    worker = redis_cluster.worker("w1", pool="threads", concurrency=1)
    worker.wait_applied()
    sent = [redis_cluster.send("long", 1.5)]
    redis_cluster.wait_records(1)
    sent += [redis_cluster.send(f"q{i}") for i in range(4)]

    def in_worker() -> list[Any]:
        replies = redis_cluster.app.control.inspect([worker.hostname], timeout=1).reserved() or {}
        return replies.get(worker.hostname, [])

    wait_for(lambda: len(in_worker()) == 4, timeout=15, what="four tasks queued in the pool")

    # When its broker connection is lost while they wait (nothing is paused)
    reconnect(worker)

    # Then each runs exactly once: the copies the broker delivers again, not the ones
    # received on the lost connection
    redis_cluster.wait_records(len(sent), timeout=60)
    wait_for(
        lambda: set(finished(redis_cluster)) >= set(sent) and not in_worker(),
        timeout=30,
        what="every task to end",
    )
    assert sorted(r["id"] for r in redis_cluster.records()) == sorted(sent)


def test_a_third_party_pool_runs_and_says_the_pause_is_not_guaranteed(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a worker on a pool from outside Celery, serving its probes
    monkeypatch.setenv("CELERY_CUSTOM_WORKER_POOL", "support.custom_pool:TaskPool")
    cluster = Cluster(broker=redis_url, tmp=tmp_path, pause_http_port=0)
    try:
        worker = cluster.worker("w1", pool="custom", concurrency=2)

        # Then it starts, and logs one clear error
        worker.wait_applied()
        problem = "cannot be guaranteed on the third-party pool support.custom_pool:TaskPool"
        assert worker.log_count(problem) == 1

        # ... its report, pause status (text and JSON), /readyz and /metrics say so
        (report,) = celery_pause.status(cluster.app).workers
        assert report.pool == "support.custom_pool:TaskPool" and not report.guaranteed
        view = overview(cluster.app)
        assert any(line.startswith(f"  WARNING {worker.hostname}: ") for line in status_lines(view))
        (doc,) = view.to_json()["workers"]
        assert doc["pause_guaranteed"] is False and problem in doc["pool_problem"]
        assert view.to_json()["totals"]["not_guaranteed"] == 1
        base = probe_url(worker)
        ready = call(base + "/readyz").json()
        assert ready["pause_guaranteed"] is False and problem in ready["pool_problem"]
        metrics = call(base + "/metrics").body.decode()
        assert metric(metrics, "celery_pause_guaranteed", pool=report.pool) == 0

        # When paused, Then tasks sent afterwards still wait for the resume
        celery_pause.pause(cluster.app, wait=True, timeout=30)
        window_start = time.time()
        sent = [cluster.send(f"t{i}") for i in range(3)]
        stays_quiet(cluster, window_start, 1.0)
        cluster.resume_and_check(sent, window_start)
        assert worker.log_count(problem) == 1
    finally:
        cluster.close()


@pytest.mark.parametrize("pool", ["gevent", "eventlet"])
def test_a_green_worker_confirms_a_pause_without_waiting_for_its_loop(
    pool: str, redis_url: str, tmp_path: Path
) -> None:
    # Given a green worker whose consumer loop waits for the broker 2 s at a time
    cluster = Cluster(broker=redis_url, tmp=tmp_path, pause_green_loop_wait=2.0)
    try:
        worker = cluster.worker("w1", pool=pool, concurrency=10)
        worker.wait_applied()
        sent = [cluster.send("long", 1.0)]
        cluster.wait_records(1)

        # When paused while a task runs, Then the pause is confirmed as soon as it ends
        result = celery_pause.pause(cluster.app, wait=True, timeout=30)
        window_start = time.time()
        assert window_start - finished(cluster)[sent[0]] < 0.5

        # ... and when resumed and paused again while idle, at once each time
        took = []
        for _ in range(4):
            celery_pause.resume(cluster.app)
            called = time.monotonic()
            result = celery_pause.pause(cluster.app, wait=True, timeout=30)
            took.append(time.monotonic() - called)
        assert max(took) < 0.5, f"pauses confirmed after {took}"

        # ... and what the confirmation says holds: nothing sent afterwards starts
        window_start = time.time()
        sent += [cluster.send(f"t{i}") for i in range(3)]
        stays_quiet(cluster, window_start, 2.5)
        worker.wait_applied(result.generation, timeout=10)
        cluster.resume_and_check(sent, window_start)
    finally:
        cluster.close()
