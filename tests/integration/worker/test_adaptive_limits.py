"""Adaptive limits on real workers, against a real HTTP downstream that answers 429 with
Retry-After above its capacity (:mod:`support.downstream`).

The cells cover prefork and threads, Redis and RabbitMQ, the state in Redis and in
PostgreSQL; the task outside any adaptive limit and a cut concurrency run on one cell each
(the rules are the pool process's and the keeper's, not the broker's or the store's).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import celery_pause
from celery_pause.model.adaptive import adapt_key, overload
from celery_pause.stores import store_for
from support.cells import TWO_CELLS, cell_cluster, four_workers
from support.downstream import Call, Downstream
from support.harness import Cluster
from support.observe import most_at_once
from support.proj import CALL_TASK

GRACE = 0.25
"""Seconds after a 429 a call may still come: its task started before the Retry-After's
pause reached its worker."""


@pytest.fixture(params=TWO_CELLS)
def adaptive_cell(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Cluster, str]]:
    """A private cluster on the cell's broker and store, and the pool its workers run."""
    broker, pool, store = request.param
    cluster = cell_cluster(broker, store, tmp_path)
    yield cluster, pool
    cluster.close()


def calls_inside_retry_after(calls: list[Call], retry_after: float) -> list[tuple[float, float]]:
    """Each call that came inside a 429's Retry-After more than :data:`GRACE` after it, as
    (seconds after the 429, the 429's time)."""
    refused = [c.at for c in calls if not c.ok]
    return [
        (call.at - t, t)
        for call in calls
        for t in refused
        if t + GRACE <= call.at < t + retry_after
    ]


def test_overloads_cut_the_cluster_and_its_retry_after_stops_every_worker(
    adaptive_cell: tuple[Cluster, str],
) -> None:
    # Given four workers, an adaptive limit of 50 calls a second on their queue, and a
    # downstream that takes 10 a second and answers 429 with Retry-After: 1 above it
    cluster, pool = adaptive_cell
    four_workers(cluster, pool)
    hold = celery_pause.throttle(cluster.app, rate="50/s", adaptive=True, wait=True).hold
    with Downstream([(0.0, 10.0)], retry_after=1.0) as downstream:
        # When 100 tasks that call it once each are sent
        sent = [
            str(
                cluster.app.send_task(
                    CALL_TASK, args=(downstream.url,), queue=cluster.queue(), headers={"probe": i}
                ).id
            )
            for i in range(100)
        ]
        records = cluster.wait_records(len(sent), timeout=90)
        calls = downstream.answered()

    # Then every task succeeded once, without spending a retry (each 429 went back unchanged,
    # its headers too)
    assert sorted(r["id"] for r in records) == sorted(sent), "lost or duplicated tasks"
    assert all(r["retries"] == 0 for r in records), [r["retries"] for r in records]
    assert sorted(r["probe"] for r in records) == list(range(100))
    assert sum(c.ok for c in calls) == len(sent)
    # and the downstream was overloaded, but nothing came inside a Retry-After once its
    # pause reached the workers; the 429s stayed a minority of the calls
    refused = sum(not c.ok for c in calls)
    assert refused >= 1, "the downstream was never overloaded: the test checked nothing"
    assert not calls_inside_retry_after(calls, 1.0)
    assert refused <= len(calls) * 0.3, f"{refused} of {len(calls)} calls refused"
    # and the status says how far the limit was cut, and why
    usage = celery_pause.status(cluster.app).usage[hold.id]
    assert usage.cut is not None and usage.cut.why == "429 from the downstream"
    assert usage.level is not None and usage.level < 1.0
    assert "cut" in usage.describe(hold.limit)  # type: ignore[arg-type]


@pytest.mark.parametrize("adaptive_cell", [("redis", "prefork", "redis")], indirect=True)
def test_an_overloaded_task_no_adaptive_limit_covers_runs_again_after_its_retry_after(
    adaptive_cell: tuple[Cluster, str],
) -> None:
    # Given one worker and no limit, and a downstream that takes nothing for 2 s
    cluster, pool = adaptive_cell
    cluster.worker("w1", pool=pool, concurrency=2).wait_applied()
    with Downstream([(0.0, 0.0), (2.0, 50.0)], retry_after=0.5) as downstream:
        # When 5 tasks call it
        sent_at = time.time()
        sent = [
            str(cluster.app.send_task(CALL_TASK, args=(downstream.url,), queue=cluster.queue()).id)
            for _ in range(5)
        ]
        records = cluster.wait_records(len(sent), timeout=30)
        calls = downstream.answered()

    # Then each was refused, ran again after its Retry-After (not at once, not failed),
    # and succeeded once it could, its retries untouched
    assert sorted(r["id"] for r in records) == sorted(sent), "lost or duplicated tasks"
    assert all(r["retries"] == 0 for r in records)
    assert all(r["started"] >= sent_at + 2.0 for r in records)
    for task in sent:
        tries = [c.at for c in calls if c.task == task]
        assert len(tries) >= 2 and all(b - a >= 0.45 for a, b in itertools.pairwise(tries)), tries


@pytest.mark.parametrize("adaptive_cell", [("amqp", "prefork", "redis")], indirect=True)
def test_a_cut_concurrency_holds_every_worker_to_its_level(
    adaptive_cell: tuple[Cluster, str],
) -> None:
    # Given four workers (eight slots) under an adaptive concurrency of 4, cut once (the
    # level a task's overload leaves: 85 % of 4 is 3 at once)
    cluster, pool = adaptive_cell
    four_workers(cluster, pool)
    hold = celery_pause.throttle(cluster.app, concurrency=4, adaptive=True, wait=True).hold
    store_for(cluster.app).update_record(
        adapt_key(hold.id),
        lambda record, now: overload(record, now, why="503 from the API", retry_after=None),
    )

    # When 24 tasks of 0.4 s are sent at once
    sent = [cluster.send(f"t{i}", 0.4) for i in range(24)]
    ran = cluster.spans(len(sent))

    # Then every task ran once, and the cluster ran 3 at once: no more, and not fewer
    assert sorted(ran) == sorted(sent), "lost or duplicated tasks"
    assert most_at_once(list(ran.values())) == 3
