"""Chaos: random pauses and resumes while workers are killed, frozen (SIGSTOP) and cut
off from the store (a proxy that forwards nothing), store connections dropped and a push
notification lost, on four workers of four pools (prefork, threads, gevent, eventlet).
Run it alone with ``pytest -m chaos``; ``CHAOS_SEED=n`` replays a run.

It runs once with Redis and once with RabbitMQ as the broker. The store, and the
Redis broker, are a private ``redis-server``: the test shortens the visibility
timeout, and kombu's unacked-message bookkeeping is shared by every client of a
Redis database, so on a shared server it would redeliver other people's messages.
RabbitMQ redelivers a killed worker's messages when its connection closes.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis

import celery_pause
from celery_pause.errors import InvalidInput, PauseTimeout
from celery_pause.model.scope import NOTHING, Scope, Target
from support.harness import AMQP_BROKER, Cluster, Worker, wait_for
from support.proxy import Proxy, through
from support.redis_server import RedisServer
from support.services import require

pytestmark = pytest.mark.chaos

SEED = int(os.environ.get("CHAOS_SEED") or random.randrange(2**32))
TASKS = 1000
CHAOS_SECONDS = 45.0
POOLS = ("prefork", "threads", "gevent", "eventlet")
"""One worker of each: tasks wait for a process, in the executor's queue, or in a full
greenlet pool (the consumer blocked) when a pause lands; on the green pools the store
greenlet hands held tasks on while the consumer waits for the broker."""
VISIBILITY = 8  # seconds before kombu redelivers the messages of a killed worker
STORE_DB = 1
LEASE = 3.0
FAULT_SECONDS = LEASE + 2.0
"""How long a worker stays frozen, or cut off from the store: past its lease and its TTL."""
CUT = 1
"""The worker (threads) that reaches the store through a proxy, to be cut off."""


@dataclass
class AcknowledgedPause:
    """An acknowledged pause of a queue: from ``pause(wait=True)`` returning to the resume call."""

    queue: str
    start: float
    end: float = float("inf")


@pytest.fixture
def server() -> Iterator[RedisServer]:
    if not RedisServer.available():
        if os.environ.get("CI"):
            pytest.fail("redis-server is needed for the chaos test")
        pytest.skip("redis-server is not installed")
    with RedisServer() as running:
        yield running


@pytest.fixture(params=["redis", "amqp"])
def chaos_cluster(
    request: pytest.FixtureRequest, server: RedisServer, tmp_path: Path
) -> Iterator[Cluster]:
    broker_conf: dict[str, Any] = {
        "broker": server.url(0),
        "broker_transport_options": {
            "visibility_timeout": VISIBILITY,
            "unacked_restore_interval": 1,
            "unacked_restore_throttle": 1,
        },
    }
    if request.param == "amqp":
        require("RabbitMQ", "127.0.0.1", 5672)
        broker_conf = {"broker": AMQP_BROKER}
    cluster = Cluster(
        store=server.url(STORE_DB),
        tmp=tmp_path,
        poll_interval=1.0,
        task_acks_late=True,
        pause_worker_ttl=LEASE,
        pause_lease=LEASE,
        pause_store_timeout=0.5,
        **broker_conf,
    )
    yield cluster
    cluster.close()


class Chaos:
    """Drives the cluster and keeps a model of the holds and the acknowledged windows."""

    def __init__(
        self, cluster: Cluster, server: RedisServer, proxy: Proxy, rng: random.Random
    ) -> None:
        self.cluster = cluster
        self.server = server
        self.proxy = proxy
        self.rng = rng
        self.queues = [cluster.queue(f"q{i}") for i in range(4)]
        self.workers: list[Worker] = []
        self.holds: list[Scope] = []
        self.open: dict[str, AcknowledgedPause] = {}
        self.windows: list[AcknowledgedPause] = []
        self.sent: list[str] = []
        self.killed: dict[int, float] = {}  # pid: when it was killed
        self.counts: Counter[str] = Counter()
        self.swallow_pause = self.swallow_resume = False

    # -- the model ------------------------------------------------------------------------
    def paused(self) -> Scope:
        scope = NOTHING
        for hold in self.holds:
            scope = scope | hold
        return scope

    def check_status(self) -> None:
        """The store agrees with the model after every operation."""
        actual = celery_pause.status(self.cluster.app).paused
        assert actual == self.paused(), f"status {actual} but the model says {self.paused()}"

    # -- operations -------------------------------------------------------------------------
    def pause(self, queues: list[str] | None) -> None:
        notify = not self.swallow_pause
        self.swallow_pause = False
        try:
            celery_pause.pause(
                self.cluster.app, queues=queues, wait=True, timeout=30, notify=notify
            )
            acknowledged: float | None = time.time()
        except PauseTimeout:
            acknowledged = None
            self.counts["pauses not confirmed in time"] += 1
        scope = Scope.of(queues)
        self.holds.append(scope)
        self.counts["pauses" if notify else "pauses with the push swallowed"] += 1
        if acknowledged is not None:
            for queue in self.queues:
                if scope.covers(Target(queue=queue)) and queue not in self.open:
                    self.open[queue] = AcknowledgedPause(queue, acknowledged)
        self.check_status()

    def resume(self, queues: list[str] | None, *, force: bool = False) -> None:
        notify = not self.swallow_resume
        self.swallow_resume = False
        before = self.paused()
        called = time.time()
        lifted = Scope.of(queues)
        if not lifted.everything and any(hold.everything for hold in self.holds):
            # Some queues out of a hold on every queue: refused, and nothing changes
            with pytest.raises(InvalidInput, match="Resume its whole scope"):
                celery_pause.resume(self.cluster.app, queues=queues, force=force, notify=notify)
            self.counts["partial resumes of an all-queue hold refused"] += 1
            self.check_status()
            return
        celery_pause.resume(self.cluster.app, queues=queues, force=force, notify=notify)
        kept = []
        for hold in self.holds:
            rest = NOTHING if lifted.everything else Scope.of(hold.queues - lifted.queues)
            if rest:
                kept.append(rest)
        self.holds = kept
        after = self.paused()
        for queue in self.queues:
            if (
                before.covers(Target(queue=queue))
                and not after.covers(Target(queue=queue))
                and queue in self.open
            ):
                window = self.open.pop(queue)
                window.end = called
                self.windows.append(window)
        self.counts["resumes" if notify else "resumes with the push swallowed"] += 1
        self.check_status()

    def random_operation(self) -> None:
        paused = self.paused()
        unpaused = [q for q in self.queues if not paused.covers(Target(queue=q))]
        if unpaused and (not paused or self.rng.random() < 0.5):
            if not paused and self.rng.random() < 0.2:
                self.pause(None)
            else:
                self.pause(self.rng.sample(unpaused, self.rng.randint(1, min(2, len(unpaused)))))
        elif self.rng.random() < 0.25:
            self.resume(None)
        else:
            self.resume(self.rng.sample(self.queues, self.rng.randint(1, 2)))

    def send(self, count: int) -> None:
        for _ in range(count):
            queue = self.rng.choice(self.queues)
            self.sent.append(self.cluster.send("chaos", self.rng.uniform(0, 0.05), queue=queue))

    # -- faults ---------------------------------------------------------------------------
    def kill_a_busy_worker(self) -> None:
        """SIGKILL a worker while it runs a task, and start it again under the same name."""
        unpaused = [q for q in self.queues if not self.paused().covers(Target(queue=q))]
        if not unpaused:
            self.resume(None)
            unpaused = list(self.queues)
        queue = self.rng.choice(unpaused)
        long = {self.cluster.send("long", 1.5, queue=queue) for _ in range(2)}
        self.sent += sorted(long)
        record = wait_for(
            lambda: next((r for r in self.cluster.records() if r["id"] in long), None),
            timeout=30,
            what="a long task to start",
        )
        index = next(i for i, w in enumerate(self.workers) if w.hostname == record["worker"])
        victim = self.workers[index]
        assert victim.proc is not None and record["worker_pid"] == victim.proc.pid
        self.killed[victim.proc.pid] = time.time()
        victim.kill()
        self.workers[index] = self.start_worker(index)
        self.counts["workers killed while running a task"] += 1

    def drop_a_store_connection(self) -> None:
        """CLIENT KILL one worker's store connection(s), found by their local ports (not the
        proxied worker's: the server sees the proxy's)."""
        worker = self.rng.choice([w for i, w in enumerate(self.workers) if i != CUT])
        admin: redis.Redis = self.server.client()

        def store_clients() -> list[str]:
            # A worker started again a moment ago may not have connected yet.
            worker.check_alive()
            assert worker.proc is not None
            ports = {
                conn.laddr.port
                for conn in psutil.Process(worker.proc.pid).net_connections(kind="tcp")
                if conn.raddr and conn.raddr.port == self.server.port
            }
            return [
                client["id"]
                for client in admin.client_list()
                if int(client["addr"].rsplit(":", 1)[1]) in ports and int(client["db"]) == STORE_DB
            ]

        found = wait_for(store_clients, timeout=30, what=f"{worker.hostname}'s store connection")
        dropped = sum(int(admin.client_kill_filter(_id=client_id)) for client_id in found)
        assert dropped, f"could not drop the store connection of {worker.hostname}"
        self.counts["store connections dropped"] += dropped

    def freeze_a_worker(self) -> None:
        """SIGSTOP a worker's main process; SIGCONT it ``FAULT_SECONDS`` later."""
        worker = self.rng.choice(self.workers)
        assert worker.proc is not None
        pid = worker.proc.pid
        os.kill(pid, signal.SIGSTOP)
        threading.Timer(FAULT_SECONDS, thaw, (pid,)).start()
        self.counts["workers frozen"] += 1

    def cut_the_store(self) -> None:
        """Cut worker ``CUT`` off from the store (not from the broker) for ``FAULT_SECONDS``."""
        self.proxy.blackhole()
        threading.Timer(FAULT_SECONDS, self.proxy.forward).start()
        self.counts["workers cut off from the store"] += 1

    def start_worker(self, index: int) -> Worker:
        """Worker ``w<index>``, on the pool ``POOLS[index]``, concurrency 2; worker ``CUT``
        reaches the store through the proxy."""
        store = through(self.cluster.store_url, self.proxy.port) if index == CUT else None
        return self.cluster.worker(
            f"w{index}", queues=self.queues, concurrency=2, pool=POOLS[index], store=store
        )


def thaw(pid: int) -> None:
    with suppress(ProcessLookupError):  # killed meanwhile
        os.kill(pid, signal.SIGCONT)


def test_pauses_hold_under_chaos(
    chaos_cluster: Cluster, server: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    with capsys.disabled():
        broker = chaos_cluster.broker.split(":", 1)[0]  # the scheme only: the URL has a password
        print(f"\nchaos on {broker}, seed {SEED} (CHAOS_SEED={SEED} replays it)")
    rng = random.Random(SEED)
    proxy = Proxy(server.port)
    with proxy:
        run_chaos(Chaos(chaos_cluster, server, proxy, rng), rng, capsys)


def run_chaos(chaos: Chaos, rng: random.Random, capsys: pytest.CaptureFixture[str]) -> None:
    chaos_cluster = chaos.cluster

    # Given four workers (prefork, threads, gevent, eventlet) on four queues, acks late, and tasks
    # arriving steadily
    chaos.workers = [chaos.start_worker(i) for i in range(len(POOLS))]
    for worker in chaos.workers:
        worker.wait_applied()
    faults = {
        "kill": sorted(rng.uniform(0.2, 0.75) * CHAOS_SECONDS for _ in range(2)),
        "drop": [rng.uniform(0.1, 0.9) * CHAOS_SECONDS],
        "swallow": [rng.uniform(0.1, 0.8) * CHAOS_SECONDS],
        "freeze": [rng.uniform(0.1, 0.8) * CHAOS_SECONDS],
        "cut": [rng.uniform(0.1, 0.8) * CHAOS_SECONDS],
    }
    act = {
        "kill": chaos.kill_a_busy_worker,
        "drop": chaos.drop_a_store_connection,
        "freeze": chaos.freeze_a_worker,
        "cut": chaos.cut_the_store,
    }

    # When queues are paused and resumed at random every 0.2-1 s, workers are killed, frozen
    # and cut off from the store, a store connection is dropped and a push notification is lost
    began = time.monotonic()
    while (elapsed := time.monotonic() - began) < CHAOS_SECONDS:
        chaos.send(min(TASKS - 10, int(TASKS * elapsed / CHAOS_SECONDS)) - len(chaos.sent))
        for fault, action in act.items():
            if faults[fault] and elapsed >= faults[fault][0]:
                faults[fault].pop(0)
                action()
        if faults["swallow"] and elapsed >= faults["swallow"][0]:
            faults["swallow"].pop(0)
            chaos.swallow_pause = chaos.swallow_resume = True
        chaos.random_operation()
        for worker in chaos.workers:
            worker.check_alive()
        time.sleep(rng.uniform(0.2, 1.0))
    chaos.send(TASKS - len(chaos.sent))
    chaos.resume(None, force=True)

    # Then every task completes ...
    finished_key = chaos_cluster.finished_key

    def all_finished() -> list[dict[str, Any]] | None:
        raw = chaos_cluster.records_client.lrange(finished_key, 0, -1)
        done = [json.loads(item) for item in raw]
        return done if {d["id"] for d in done} >= set(chaos.sent) else None

    finished = wait_for(all_finished, timeout=120, what=f"{len(chaos.sent)} tasks to finish")
    starts = chaos_cluster.records()
    assert not any(faults.values())
    report = check_invariants(chaos, starts, finished)

    # ... no worker crashed, and the final status is consistent
    status = wait_for(lambda: consistent(chaos), timeout=30, what="every worker to resume")
    for worker in chaos.workers:
        worker.check_alive()
        log = worker.log.read_text(errors="replace")
        assert "Traceback" not in log and "CRITICAL" not in log, worker.tail()
    report.update(
        {
            "final generation": status.state.generation,
            "live workers": len(status.workers),
        }
    )
    with capsys.disabled():
        print("chaos counts: " + json.dumps({**report, **chaos.counts}, indent=1))


def check_invariants(
    chaos: Chaos, starts: list[dict[str, Any]], finished: list[dict[str, Any]]
) -> dict[str, Any]:
    """No start in an acknowledged window; every task completes, once unless its worker
    was killed while running it (or after it ran, before the late ack)."""
    windows = chaos.windows + [AcknowledgedPause(q, w.start, w.end) for q, w in chaos.open.items()]
    by_queue: dict[str, list[AcknowledgedPause]] = {}
    for window in windows:
        by_queue.setdefault(window.queue, []).append(window)
    inside = [
        r
        for r in starts
        if any(w.start <= r["started"] < w.end for w in by_queue.get(r["queue"], []))
    ]
    assert not inside, f"{len(inside)} task(s) started inside an acknowledged pause: {inside[:3]}"

    runs: dict[str, list[dict[str, Any]]] = {}
    for record in starts:
        runs.setdefault(record["id"], []).append(record)
    ends: dict[str, list[dict[str, Any]]] = {}
    for record in finished:
        ends.setdefault(record["id"], []).append(record)
    interrupted = 0
    for task in chaos.sent:
        assert ends.get(task), f"task {task} never completed"
        if any(killed_while_running(chaos, run, ends[task]) for run in runs[task]):
            interrupted += 1
            survivors = [r for r in runs[task] if r["worker_pid"] not in chaos.killed]
            assert len(survivors) <= 1, f"task {task} ran twice on live workers: {runs[task]}"
        else:
            assert len(runs[task]) == len(ends[task]) == 1, f"task {task} ran {runs[task]}"
    return {
        "tasks sent": len(chaos.sent),
        "task starts": len(starts),
        "tasks run twice": sum(1 for r in runs.values() if len(r) > 1),
        "tasks interrupted by a kill": interrupted,
        "acknowledged pause windows": len(windows),
        "seconds paused (sum over queues)": round(
            sum(min(w.end, time.time()) - w.start for w in windows), 1
        ),
        "starts checked against windows": len(starts),
    }


def killed_while_running(chaos: Chaos, run: dict[str, Any], ends: list[dict[str, Any]]) -> bool:
    """Whether ``run`` was on a killed process that died before the task's late ack."""
    killed_at = chaos.killed.get(run["worker_pid"])
    if killed_at is None:
        return False
    finish = next((e for e in ends if e["worker_pid"] == run["worker_pid"]), None)
    if finish is None:
        return True  # it never finished there
    others = [e for e in ends if e is not finish]
    return bool(others) and finish["finished"] > killed_at - 1.0  # ran again: ack was lost


def consistent(chaos: Chaos) -> celery_pause.ClusterStatus | None:
    """The final status: no hold, and every worker (its current process) applied it, idle."""
    status = celery_pause.status(chaos.cluster.app)
    pids = {w.hostname: w.proc.pid if w.proc else None for w in chaos.workers}
    reports = {r.hostname: r for r in status.workers}
    ok = (
        not status.holds
        and status.paused == NOTHING
        and set(reports) == set(pids)
        and all(
            r.pid == pids[h]
            and r.status == "applied"
            and r.generation == status.state.generation
            and r.paused == ()
            and not r.running
            and r.held == 0
            for h, r in reports.items()
        )
    )
    return status if ok else None
