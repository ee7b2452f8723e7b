"""The circuit breaker on real workers, with a real dependency (a Redis key) that fails.

Each test switches the dependency down, lets the breaker trip on real task
failures, and watches what really runs: every run of the ``charge`` task and
every probe call is recorded with its time and worker.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import redis

import celery_pause
from celery_pause.breaker.status import BreakerStatus
from celery_pause.model.scope import Scope, Target
from support.breaker_proj import AUTORETRY_TASK, CHARGE_TASK, DEPENDENCY_URL, keys
from support.harness import AMQP_BROKER, REDIS_BROKER, Cluster, Worker, started_between, wait_for
from support.holds import Curve, ramps
from support.observe import stays_quiet
from support.services import require

DEADLINE = 60.0


class BreakerWorld:
    """A cluster whose tasks call a dependency the test switches."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.app = cluster.app
        self.queue = cluster.queue()
        self.client = redis.Redis.from_url(DEPENDENCY_URL)
        self.keys = keys(cluster.namespace)
        self.sent: list[str] = []

    def dependency(self, state: str) -> None:
        self.client.set(self.keys["dependency"], state)

    def send(
        self, count: int, duration: float = 0.1, tag: str = "t", task: str = CHARGE_TASK
    ) -> list[str]:
        ids = [
            str(self.app.send_task(task, args=(f"{tag}{i}", duration), queue=self.queue).id)
            for i in range(count)
        ]
        self.sent += ids
        return ids

    def runs(self) -> list[dict[str, Any]]:
        return [json.loads(raw) for raw in self.client.lrange(self.keys["runs"], 0, -1)]

    def probes(self) -> list[dict[str, Any]]:
        return [json.loads(raw) for raw in self.client.lrange(self.keys["probes"], 0, -1)]

    def breaker(self) -> BreakerStatus:
        (status,) = celery_pause.breaker_statuses(self.app)
        return status

    def record(self) -> dict[str, Any]:
        store = celery_pause.stores.store_for(self.app)
        return store.read_record("breaker:dep") or {}

    def wait_state(self, state: str, timeout: float = DEADLINE) -> BreakerStatus:
        return wait_for(
            lambda: (s := self.breaker()).state == state and s,
            timeout=timeout,
            what=f"the breaker to be {state}",
        )

    def breaker_holds(self) -> list[celery_pause.Hold]:
        return [h for h in celery_pause.status(self.app).holds if h.source == "breaker:dep"]

    def wait_paused_everywhere(self, workers: list[Worker]) -> float:
        """Wait until every worker applied a state with the breaker's hold; when that was."""
        wait_for(self.breaker_holds, timeout=DEADLINE, what="the breaker's hold")
        state = celery_pause.status(self.app).state
        for worker in workers:
            worker.wait_applied(state.generation)
        return time.time()

    def wait_all_done(self, timeout: float = DEADLINE) -> list[dict[str, Any]]:
        """Wait until every task sent ran successfully; the successful runs."""

        def done() -> list[dict[str, Any]] | None:
            for worker in self.cluster.workers:
                if worker.proc is not None and worker.proc.returncode is None:
                    worker.check_alive()
            ok = [run for run in self.runs() if run["ok"]]
            return ok if {run["id"] for run in ok} >= set(self.sent) else None

        return wait_for(done, timeout=timeout, what="every task to succeed")


@pytest.fixture
def make_breaker_world(tmp_path: Path) -> Iterator[Any]:
    """Makes a world on a broker with the breaker options given (on the default queue),
    and the app settings ``conf``."""
    clusters: list[Cluster] = []

    def make(broker: str, conf: dict[str, Any] | None = None, **breaker: Any) -> BreakerWorld:
        require("Redis", "127.0.0.1", 6379)
        if broker == AMQP_BROKER:
            require("RabbitMQ", "127.0.0.1", 5672)
        options = {"name": "dep", "queues": ["default"], **breaker}
        cluster = Cluster(broker=broker, tmp=tmp_path, test_breaker=options, **(conf or {}))
        clusters.append(cluster)
        return BreakerWorld(cluster)

    yield make
    for cluster in clusters:
        cluster.close()


def deferred_since(workers: list[Worker], since: float) -> list[str]:
    """Log lines of tasks that reached a pool while their breaker was open and went back."""
    lines = []
    for worker in workers:
        for line in worker.log.read_text(errors="replace").splitlines():
            if "not started, waits in" in line:
                stamp = datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                if stamp >= since:
                    lines.append(line)
    return lines


def one_of_each_pool(world: BreakerWorld) -> list[Worker]:
    """Four workers: prefork, threads, gevent and eventlet."""
    pools = {"prefork": 1, "threads": 2, "gevent": 4, "eventlet": 4}
    return [
        world.cluster.worker(f"w{i}", pool=pool, concurrency=concurrency)
        for i, (pool, concurrency) in enumerate(pools.items(), 1)
    ]


@pytest.mark.parametrize("broker", [REDIS_BROKER, AMQP_BROKER], ids=["redis", "amqp"])
def test_breaker_trips_across_workers_pauses_probes_once_and_every_task_completes(
    make_breaker_world: Any, broker: str
) -> None:
    # Given two workers, one prefork and one gevent, and a dependency that is down
    world = make_breaker_world(
        broker, fail_max=3, window=30, reset_timeout=2, requeue_delay=1, max_reset_timeout=4
    )
    world.dependency("down")
    workers = [world.cluster.worker("w1"), world.cluster.worker("w2", pool="gevent", concurrency=4)]
    for worker in workers:
        worker.wait_applied()

    # When a task with Celery's own autoretry (max_retries=1) fails twice against it
    (lone,) = world.send(1, duration=0.3, tag="a", task=AUTORETRY_TASK)
    wait_for(
        lambda: len([r for r in world.runs() if r["id"] == lone]) >= 2,
        timeout=DEADLINE,
        what="the autoretry task to fail twice",
    )
    # ... and more tasks fail against it on both workers
    world.send(9, duration=0.3)
    opened = world.wait_state("open")
    paused_at = world.wait_paused_everywhere(workers)

    # Then the breaker opened after fail_max failures counted across both workers ...
    failed_before = [r for r in world.runs() if not r["ok"] and r["started"] < opened.opened_at]
    assert len(failed_before) >= 3
    assert {r["worker"] for r in failed_before} == {w.hostname for w in workers}
    # ... and paused its queue cluster-wide with a hold of its own
    (hold,) = world.breaker_holds()
    assert hold.scope.queues == {world.queue}
    reason = re.fullmatch(
        r"circuit dep open: (\d+) failures in 30s; last: ConnectionError\('dependency down'\)",
        hold.reason or "",
    )
    assert reason is not None and int(reason[1]) >= 3, hold.reason
    assert celery_pause.status(world.app).paused.covers(Target(queue=world.queue))
    # (tasks of another type in the same queue wait too, and are never taken as trials)
    others = [world.cluster.send(f"other{i}") for i in range(3)]

    # When the first half-open period's trial fails, and the dependency then recovers
    wait_for(
        lambda: [r for r in world.runs() if r["trial"]], timeout=DEADLINE, what="a first trial"
    )
    world.dependency("up")
    world.wait_state("closed")
    record = world.record()

    # Then every task completes, each exactly once, with its retry budget untouched
    ok = world.wait_all_done()
    assert sorted(r["id"] for r in ok) == sorted(world.sent)
    assert all(r["retries"] == 0 for r in world.runs())
    lone_runs = [r for r in world.runs() if r["id"] == lone]
    assert len([r for r in lone_runs if not r["ok"]]) >= 2, "it outlived max_retries=1"
    assert [r["requeues"] for r in lone_runs][:2] == [0, 1], "counted while the queue flowed"
    assert not world.breaker_holds()
    wait_for(lambda: world.breaker().failures == 0, timeout=10, what="the window to be cleared")

    # And while the queue was paused only trials ran: exactly one per half-open period,
    # let through by the gates (not sent back by the pool processes)
    assert not deferred_since(workers, paused_at)
    other_runs = world.cluster.wait_records(len(others))
    assert sorted(r["id"] for r in other_runs) == sorted(others)
    assert all(r["started"] >= record["closed_at"] for r in other_runs)
    during = started_between(world.runs(), paused_at, record["closed_at"])
    assert during, "the trials ran while the hold was in place"
    assert all(r["trial"] for r in during), f"non-trial tasks started while open: {during}"
    per_period = Counter(r["trial"] for r in during)
    assert set(per_period.values()) == {1}, per_period
    assert len(per_period) >= 2 and not during[0]["ok"] and during[-1]["ok"]
    gaps = [b["started"] - a["started"] for a, b in itertools.pairwise(during)]
    assert all(gap >= 2 * 0.9 for gap in gaps), f"probes closer than the backoff: {gaps}"
    print(f"\ntrials per half-open period (2 workers, {broker.split(':')[0]}): {dict(per_period)}")


def test_four_workers_run_exactly_one_probe_per_half_open_period(make_breaker_world: Any) -> None:
    # Given four workers, one of each pool, a probe callable and a dependency that is down
    world = make_breaker_world(
        REDIS_BROKER, probe=True, fail_max=2, window=30, reset_timeout=1, max_reset_timeout=2
    )
    world.dependency("down")
    workers = one_of_each_pool(world)
    for worker in workers:
        worker.wait_applied()

    # When the breaker trips, two probes fail, and the dependency comes back (a probe is
    # recorded before it reads the dependency: the third has started once two have failed)
    world.send(8)
    world.wait_state("open")
    paused_at = world.wait_paused_everywhere(workers)
    wait_for(lambda: len(world.probes()) >= 3, timeout=DEADLINE, what="three probes")
    world.dependency("up")
    world.wait_state("closed")
    record = world.record()
    world.wait_all_done()

    # Then there was exactly one probe per half-open period, cluster-wide ...
    probes = world.probes()
    assert len(probes) == record["period"] >= 3
    gaps = [b["at"] - a["at"] for a, b in itertools.pairwise(probes)]
    assert all(gap >= 0.9 for gap in gaps), f"two probes in one period: {gaps}"
    pids = {w.proc.pid for w in workers if w.proc is not None}
    assert {p["pid"] for p in probes} <= pids
    # ... no task ran while the breaker was open, and none was lost
    assert not started_between(world.runs(), paused_at, record["closed_at"])
    assert sorted(r["id"] for r in world.runs() if r["ok"]) == sorted(world.sent)
    print(f"\nprobes per half-open period (4 workers): {[1 for _ in probes]}")


def test_four_workers_let_exactly_half_open_trials_through_per_period(
    make_breaker_world: Any,
) -> None:
    # Given four workers, one of each pool, two trial tasks per half-open period, and a
    # dependency that is down
    world = make_breaker_world(
        REDIS_BROKER,
        half_open_trials=2,
        success_threshold=2,
        fail_max=2,
        window=30,
        reset_timeout=1.5,
        max_reset_timeout=3,
    )
    world.dependency("down")
    workers = one_of_each_pool(world)
    for worker in workers:
        worker.wait_applied()

    # When the breaker trips, a period of trials fails, and the dependency comes back
    world.send(16)
    world.wait_state("open")
    paused_at = world.wait_paused_everywhere(workers)
    wait_for(
        lambda: any(r["trial"] and not r["ok"] for r in world.runs()),
        timeout=DEADLINE,
        what="a failed trial",
    )
    world.dependency("up")
    world.wait_state("closed")
    record = world.record()
    ok = world.wait_all_done()

    # Then the workers admitted exactly two trials per half-open period, cluster-wide ...
    admitted = Counter(
        int(period)
        for worker in workers
        for period in re.findall(r"is the trial of period (\d+)", worker.log.read_text())
    )
    assert len(admitted) == record["period"] >= 2
    assert set(admitted.values()) == {2}, admitted
    # ... only trials ran while the hold was in place: both of the period that closed it,
    # and in a failed period those that started before its first failure re-opened it
    during = started_between(world.runs(), paused_at, record["closed_at"])
    assert all(r["trial"] for r in during), f"non-trial tasks started while open: {during}"
    ran = Counter(r["trial"] for r in during)
    assert ran[record["period"]] == 2 and all(1 <= n <= 2 for n in ran.values()), ran
    for period in ran:
        runs = [r for r in during if r["trial"] == period]
        failed = [r["started"] + r["duration"] for r in runs if not r["ok"]]  # when it raised
        assert all(r["started"] < min(failed, default=math.inf) for r in runs), (
            f"a trial started after a failed one: {runs}"
        )
    # ... and every task completed exactly once
    assert sorted(r["id"] for r in ok) == sorted(world.sent)
    print(f"\ntrials admitted per half-open period (4 workers): {dict(admitted)}; ran: {dict(ran)}")


def test_holds_are_independent_of_an_operator_and_a_forced_resume_restarts_it_closed(
    make_breaker_world: Any,
) -> None:
    # Given two workers, a breaker with a probe, and a dependency that is down
    world = make_breaker_world(REDIS_BROKER, probe=True, fail_max=2, window=30, reset_timeout=1.5)
    world.dependency("down")
    workers = [world.cluster.worker(name) for name in ("w1", "w2")]
    for worker in workers:
        worker.wait_applied()
    world.send(4)
    world.wait_state("open")
    world.wait_paused_everywhere(workers)
    (first_hold,) = world.breaker_holds()

    # When an operator pauses the same queue, and the dependency recovers
    celery_pause.pause(world.app, queues=[world.queue], reason="maintenance", by="op")
    world.dependency("up")
    world.wait_state("closed")
    closed_at = world.record()["closed_at"]

    # Then the breaker removed its own hold only (a write that follows its closed record):
    # the operator's keeps the queue paused
    def holds() -> list[tuple[str, str | None]]:
        return [(h.source, h.reason) for h in celery_pause.status(world.app).holds]

    wait_for(lambda: len(holds()) == 1, timeout=10, what="the breaker to lift its hold")
    assert holds() == [("manual", "maintenance")]
    stays_quiet(world.cluster, closed_at, 1.5, records=world.runs)

    # When the operator resumes, every task completes
    celery_pause.resume(world.app)
    world.wait_all_done()

    # Given the breaker open again
    world.dependency("down")
    world.send(4, tag="u")
    world.wait_state("open")
    (second_hold,) = wait_for(world.breaker_holds, timeout=DEADLINE, what="a second hold")
    assert second_hold.id != first_hold.id

    # When an operator's plain resume leaves it alone, and a forced one removes it
    assert not celery_pause.resume(world.app).removed
    assert world.breaker_holds() == [second_hold]
    forced_at = time.time()
    removed = celery_pause.resume(world.app, force=True).removed
    assert [h.id for h in removed] == [second_hold.id]

    # Then the breaker starts closed, counts afresh and trips again on new failures
    (third_hold,) = wait_for(world.breaker_holds, timeout=DEADLINE, what="a third hold")
    assert third_hold.id != second_hold.id
    reopened = world.breaker()
    assert reopened.state in ("open", "half-open") and reopened.opened_at is not None
    assert reopened.opened_at >= forced_at
    # (a failure counts when it is raised, at the end of the run, not when the run starts)
    failed_after = [
        r for r in world.runs() if not r["ok"] and r["started"] + r["duration"] >= forced_at
    ]
    assert len(failed_after) >= 2

    # And once the dependency is back, every task completes exactly once
    world.dependency("up")
    world.wait_state("closed")
    ok = world.wait_all_done()
    assert sorted(r["id"] for r in ok) == sorted(world.sent)
    assert not celery_pause.status(world.app).holds


def test_a_crashed_probers_lease_expires_and_another_worker_probes(make_breaker_world: Any) -> None:
    # Given two workers on RabbitMQ, a probe that hangs, and a breaker that tripped
    world = make_breaker_world(
        AMQP_BROKER, probe=True, fail_max=2, window=30, reset_timeout=2, lease_ttl=3
    )
    world.dependency("down")
    workers = [world.cluster.worker(name) for name in ("w1", "w2")]
    for worker in workers:
        worker.wait_applied()
    world.send(6)
    world.wait_state("open")
    world.dependency("hang")

    # When the worker running the probe is killed in the middle of it
    (first,) = wait_for(world.probes, timeout=DEADLINE, what="the first probe")
    (prober,) = [w for w in workers if w.proc is not None and w.proc.pid == first["pid"]]
    (survivor,) = [w for w in workers if w is not prober]
    killed_at = time.time()
    prober.kill()
    world.dependency("up")

    # Then its lease expires and the other worker runs a new half-open period
    world.wait_state("closed")
    probes = world.probes()
    assert len(probes) == 2, probes
    assert survivor.proc is not None and probes[1]["pid"] == survivor.proc.pid
    # (a live holder renews its 3 s lease every second: it lapsed over 1.75 s after the kill)
    assert probes[1]["at"] >= killed_at + 1.5
    assert world.record()["period"] == 2

    # And every task completes, those the dead worker held included
    ok = world.wait_all_done()
    assert {r["id"] for r in ok} == set(world.sent)


def test_a_breaker_opens_only_where_a_worker_runs_its_agent(make_breaker_world: Any) -> None:
    # Given a dependency that is down and one worker without the pause step: nothing in
    # the cluster could ever probe the breaker and close it again
    world = make_breaker_world(
        REDIS_BROKER, fail_max=2, window=30, reset_timeout=1, requeue_delay=0.2, max_requeues=2
    )
    world.dependency("down")
    bare = world.cluster.worker("bare", install=False)

    # When more tasks fail against it than fail_max
    world.send(3, duration=0.05)
    wait_for(
        lambda: bare.log_count("no live worker runs its agent") >= 1,
        timeout=DEADLINE,
        what="the breaker to refuse to open",
    )

    # Then the failures are counted, but the breaker stays closed and pauses nothing
    assert len([r for r in world.runs() if not r["ok"]]) >= 2
    assert world.breaker().state == "closed"
    assert not world.breaker_holds()

    # When that worker is replaced by one with the pause step, the one line of set-up
    bare.stop()
    worker = world.cluster.worker("w1")
    worker.wait_applied()
    wait_for(
        lambda: any(r.breakers == ("dep",) for r in celery_pause.status(world.app).workers),
        timeout=DEADLINE,
        what="the worker to report the breaker's agent",
    )
    world.send(3, duration=0.05)

    # Then the breaker opens (its hold follows its record), half-opens and closes once the
    # dependency is back
    world.wait_state("open")
    wait_for(world.breaker_holds, timeout=DEADLINE, what="the breaker's hold")
    world.dependency("up")
    world.wait_state("closed")
    assert world.record()["period"] >= 1, "it closed through a half-open period"
    # (its closer removes the hold in a write that follows the closed record)
    wait_for(lambda: not world.breaker_holds(), timeout=DEADLINE, what="the hold to go")


def test_a_breaker_without_queues_pauses_its_tasks_and_not_its_queue(
    make_breaker_world: Any,
) -> None:
    # Given a breaker created without queues, and a dependency that is down
    world = make_breaker_world(REDIS_BROKER, queues=None, fail_max=2, window=30, reset_timeout=2)
    world.dependency("down")
    worker = world.cluster.worker("w1", concurrency=2)
    worker.wait_applied()

    # When its tasks fail and it opens
    world.send(3, duration=0.05)
    world.wait_state("open")

    # Then its hold (placed right after its record opens) covers exactly the tasks that use it,
    # in every queue
    (hold,) = wait_for(world.breaker_holds, timeout=DEADLINE, what="the breaker's hold")
    assert hold.scope == Scope.of(tasks=[AUTORETRY_TASK, CHARGE_TASK])
    # And other tasks of the same queue keep running while it is open
    others = [world.cluster.send(f"other{i}") for i in range(4)]
    records = world.cluster.wait_records(len(others), timeout=30)
    assert sorted(r["id"] for r in records) == sorted(others)
    assert world.breaker().state in ("open", "half-open")

    # When the dependency is back, it closes and its tasks complete
    world.dependency("up")
    world.wait_state("closed")
    world.wait_all_done()


def breaker_ramp(world: BreakerWorld) -> Curve | None:
    return next(iter(ramps(world.app, "breaker:dep")), None)


def test_a_breaker_with_a_ramp_closes_gradually_and_one_failure_in_it_reopens_it(
    make_breaker_world: Any,
) -> None:
    # Given two workers, a breaker that closes over a 10 s ramp to 20 tasks/s, and a
    # dependency that is down
    fail_max, peak = 4, 20.0
    world = make_breaker_world(
        REDIS_BROKER,
        conf={"pause_ramp_peak": peak},
        probe=True,
        fail_max=fail_max,
        window=30,
        reset_timeout=1,
        max_reset_timeout=2,
        requeue_delay=1,
        ramp=10,
    )
    world.dependency("down")
    workers = [world.cluster.worker(f"w{i}", concurrency=4) for i in (1, 2)]
    for worker in workers:
        worker.wait_applied()
    world.send(fail_max + 2, duration=0.05, tag="f")
    world.wait_state("open")
    world.wait_paused_everywhere(workers)
    (hold,) = world.breaker_holds()
    # ... and a backlog in its paused queue
    world.send(80, duration=0.05, tag="b")

    # When the dependency is back and the probe closes the breaker
    world.dependency("up")
    ramp = wait_for(lambda: breaker_ramp(world), timeout=DEADLINE, what="the breaker's ramp")
    record = world.record()

    # Then its hold went in the same update that recorded the ramp on the hold's scope,
    # and its status says it ramps
    assert record["state"] == "closed" and not world.breaker_holds()
    assert ramp.hold.scope == hold.scope
    assert (ramp.start, ramp.end, ramp.peak) == (record["closed_at"], record["ramp_until"], peak)
    status = world.breaker()
    assert status.state == "closed" and status.ramp_until == ramp.end
    assert "ramping until" in status.describe()
    # ... and the backlog's first second starts only a trickle, then follows the curve
    wait_for(
        lambda: started_between(world.runs(), ramp.start + 2, float("inf")),
        timeout=DEADLINE,
        what="tasks to start in the ramp's third second",
    )
    ramped = sorted(r["started"] for r in started_between(world.runs(), ramp.start, ramp.end))
    first = [t for t in ramped if t < ramp.start + 1]
    assert len(first) <= ramp.allowance(ramp.start + 1) + 5, first
    for count, started in enumerate(ramped, start=1):
        slack = 2 * (1 + max(1.0, ramp.rate(started) / 2)) + 1
        assert count <= ramp.allowance(started) + slack, (count, started - ramp.start)

    # When the dependency fails again during the ramp
    world.dependency("down")
    down_at = time.time()
    reopened = wait_for(
        lambda: [h for h in world.breaker_holds() if h.id != hold.id],
        timeout=DEADLINE,
        what="the breaker's hold again",
    )
    paused_at = world.wait_paused_everywhere(workers)

    # Then the first counted failure re-opened it, well before fail_max, and the hold
    # replaced the ramp: nothing more starts
    record = world.record()
    assert record["opened_at"] >= down_at and record["opened_at"] < ramp.end
    assert record["failures"] < fail_max and record["ramp_until"] is None
    assert "during its ramp" in (reopened[0].reason or "")
    assert breaker_ramp(world) is None and world.breaker().ramp_until is None
    stays_quiet(world.cluster, paused_at, 1.0, records=world.runs)

    # And once the dependency is back, it closes (ramping again) and every task completes
    world.dependency("up")
    wait_for(lambda: breaker_ramp(world), timeout=DEADLINE, what="a second ramp")
    ok = world.wait_all_done()
    assert sorted(r["id"] for r in ok) == sorted(world.sent)
    print(
        f"\nstarts in the ramp's first second: {len(first)}; failures at re-open: "
        f"{record['failures']}"
    )


def test_a_throttling_breaker_slows_its_tasks_while_open_and_closes_on_its_probe(
    make_breaker_world: Any,
) -> None:
    # Given two workers, a breaker that throttles to 4/s while open, and a dependency that
    # answers errors
    world = make_breaker_world(
        REDIS_BROKER, probe=True, fail_max=3, window=30, reset_timeout=3, throttle="4/s"
    )
    world.dependency("down")
    workers = [world.cluster.worker(name, concurrency=2) for name in ("w1", "w2")]
    for worker in workers:
        worker.wait_applied()

    # When tasks fail against it until it opens
    world.send(60, duration=0.0)
    world.wait_state("open")
    limited_at = world.wait_paused_everywhere(workers)

    # Then its hold limits its queue instead of pausing it ...
    (hold,) = world.breaker_holds()
    assert hold.limit is not None and hold.limit.rate == 4.0
    assert not celery_pause.status(world.app).paused
    # ... and its tasks keep running while it is open (once those handed to the pools before
    # the limit came have run), at no more than 4/s
    since = limited_at + 1.0
    wait_for(
        lambda: len(started_between(world.runs(), since, time.time())) >= 12,
        timeout=DEADLINE,
        what="tasks to run while the breaker is open",
    )
    during = sorted(r["started"] for r in started_between(world.runs(), since, time.time()))
    pace = (len(during) - 1) / (during[-1] - during[0])
    assert pace <= 4.4, f"{pace:.1f}/s while the breaker throttled to 4/s"

    # When the dependency recovers, Then the probe closes it, the hold goes, every task runs
    world.dependency("up")
    world.wait_state("closed")
    wait_for(lambda: not world.breaker_holds(), timeout=10, what="the breaker to lift its hold")
    ok = world.wait_all_done()
    assert sorted(r["id"] for r in ok) == sorted(world.sent)


def test_an_adaptive_throttling_breaker_cuts_its_limit_with_each_failure_while_open(
    make_breaker_world: Any,
) -> None:
    # Given two workers and a breaker that throttles adaptively below 8/s while open
    world = make_breaker_world(
        REDIS_BROKER, probe=True, fail_max=3, window=30, reset_timeout=3, throttle="8/s",
        adaptive=True,
    )  # fmt: skip
    world.dependency("down")
    workers = [world.cluster.worker(name, concurrency=2) for name in ("w1", "w2")]
    for worker in workers:
        worker.wait_applied()

    # When tasks fail against it until it opens, and go on failing under its limit
    world.send(40, duration=0.0)
    world.wait_state("open")
    world.wait_paused_everywhere(workers)
    (hold,) = world.breaker_holds()
    assert hold.limit is not None and hold.limit.adaptive and hold.limit.rate == 8.0

    # Then each failure while open cuts the limit's level (once a second at most), the cut
    # saying which failure
    def cut_twice() -> Any:
        usage = celery_pause.status(world.app).usage.get(hold.id)
        return usage if usage is not None and usage.cut and usage.cut.count >= 2 else None

    usage = wait_for(cut_twice, timeout=DEADLINE, what="the failures to cut the limit")
    assert usage.level is not None and usage.level < 0.85
    assert "dependency down" in usage.cut.why

    # When the dependency recovers, Then the probe closes it and every task runs once
    world.dependency("up")
    world.wait_state("closed")
    ok = world.wait_all_done()
    assert sorted(r["id"] for r in ok) == sorted(world.sent)
