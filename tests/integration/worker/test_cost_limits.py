"""Cost-weighted limits on real workers: a rate of units (tokens), each task spending what it
says it costs, shared by four workers, and combined with a limit that counts tasks.

The accuracy cells cover prefork and threads, Redis and RabbitMQ, the state in Redis and in
PostgreSQL; the combination and bad costs run on one cell (the rule is the worker's, not the
broker's or the store's).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import celery_pause
from support.cells import TWO_CELLS, cell_cluster, four_workers
from support.harness import Cluster
from support.observe import per_second


@pytest.fixture(params=TWO_CELLS)
def cost_cell(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Cluster, str]]:
    """A private cluster on the cell's broker and store, and the pool its workers run."""
    broker, pool, store = request.param
    cluster = cell_cluster(broker, store, tmp_path)
    yield cluster, pool
    cluster.close()


def units_per_second(spent: list[tuple[float, float]], since: float, until: float) -> list[float]:
    """Units spent (by start time) in each whole second from ``since`` to ``until``."""
    counts = [0.0] * int(until - since)
    for at, cost in spent:
        if since <= at < since + len(counts):
            counts[int(at - since)] += cost
    return counts


def test_a_rate_of_units_holds_the_cluster_to_it_whatever_each_task_costs(
    cost_cell: tuple[Cluster, str],
) -> None:
    # Given four workers and 3000 tokens a second, counted from each task's "tokens"
    cluster, pool = cost_cell
    four_workers(cluster, pool)
    result = celery_pause.throttle(cluster.app, rate="3000/s", cost="tokens", wait=True)
    assert result.hold.limit is not None and result.hold.limit.cost == "tokens"

    # When 260 tasks costing from 1 to 500 tokens (65,000 in all) are sent at once
    rng = random.Random(11)
    costs = {cluster.send(f"t{i}", kwargs={"tokens": rng.randint(1, 500)}): 0 for i in range(260)}
    sent_at = time.time()
    records = cluster.wait_records(len(costs), timeout=90)

    # Then every task ran once, and from 2 s in every 10 s window spent 30,000 tokens
    # within 10 %, no second above twice the rate, on every worker
    assert sorted(r["id"] for r in records) == sorted(costs), "lost or duplicated tasks"
    spent = sorted((r["started"], float(r["labels"]["tokens"])) for r in records)
    seconds = units_per_second(spent, sent_at + 2, spent[-1][0])
    assert len(seconds) >= 14, f"the backlog ran out too soon: {len(seconds)} s"
    windows = [sum(seconds[i : i + 10]) for i in range(len(seconds) - 9)]
    assert all(27_000 <= w <= 33_000 for w in windows), f"10 s windows {windows}"
    assert max(units_per_second(spent, sent_at, spent[-1][0])) <= 6000, f"seconds {seconds}"
    assert len({r["worker"] for r in records}) == 4, "the rate was not shared by every worker"


@pytest.mark.parametrize("cost_cell", [("redis", "prefork", "redis")], indirect=True)
def test_tokens_and_requests_on_one_scope_both_apply_and_bad_costs_cost_one(
    cost_cell: tuple[Cluster, str],
) -> None:
    # Given 1000 tokens a second and 10 requests a second on the same task
    cluster, pool = cost_cell
    workers = four_workers(cluster, pool)
    celery_pause.throttle(cluster.app, rate="1000/s", cost="tokens")
    both = celery_pause.throttle(cluster.app, rate="10/s", wait=True)
    assert both.replaced == ()

    # When 160 tasks costing from 1 to 100 tokens (20/s by tokens alone) are sent, and 8
    # whose cost is no number of tokens at all
    bad = ["lots", -5, math.nan, math.inf, [3], {"n": 1}, True, 10**400]
    sent = [cluster.send(f"b{i}", kwargs={"tokens": value}) for i, value in enumerate(bad)]
    sent_at = time.time()
    rng = random.Random(5)
    sent += [cluster.send(f"r{i}", kwargs={"tokens": rng.randint(1, 100)}) for i in range(160)]
    records = cluster.wait_records(len(sent), timeout=60)

    # Then the stricter count decides: every 10 s window started 100 tasks within 10 %; the
    # bad costs ran once each like the rest, and every worker lives on
    assert sorted(r["id"] for r in records) == sorted(sent), "lost or duplicated tasks"
    starts = sorted(r["started"] for r in records)
    counts = per_second(starts, sent_at + 2, starts[-1])
    windows = [sum(counts[i : i + 10]) for i in range(len(counts) - 9)]
    assert windows and all(90 <= w <= 110 for w in windows), f"10 s windows {windows}"
    assert all(worker.proc is not None and worker.proc.poll() is None for worker in workers)


def test_tasks_that_settle_what_they_spent_hold_the_cluster_to_what_they_really_cost(
    cost_cell: tuple[Cluster, str],
) -> None:
    # Given four workers and 3000 tokens a second
    cluster, pool = cost_cell
    four_workers(cluster, pool)
    celery_pause.throttle(cluster.app, rate="3000/s", cost="tokens", wait=True)

    # When 450 tasks whose messages say 50 tokens each really spend 10 to 190 (mean 100),
    # and say so when they start (celery_pause.spend)
    rng = random.Random(13)
    spent = {}
    for i in range(450):
        actual = rng.randint(10, 190)
        spent[cluster.send(f"s{i}", kwargs={"tokens": 50, "spend": {"tokens": actual}})] = actual
    sent_at = time.time()
    records = cluster.wait_records(len(spent), timeout=90)

    # Then every task ran once, and from 2 s in every 5 s window really spent 15,000 tokens
    # within 15 % (by the messages alone, twice that would start)
    assert sorted(r["id"] for r in records) == sorted(spent), "lost or duplicated tasks"
    really = sorted((r["started"], float(spent[r["id"]])) for r in records)
    seconds = units_per_second(really, sent_at + 2, really[-1][0])
    assert len(seconds) >= 8, f"the backlog ran out too soon: {len(seconds)} s"
    windows = [sum(seconds[i : i + 5]) for i in range(len(seconds) - 4)]
    assert all(12_750 <= w <= 17_250 for w in windows), f"5 s windows {windows}"
