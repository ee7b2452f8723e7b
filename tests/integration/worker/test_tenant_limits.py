"""Limits per label value on real workers: every tenant its own limit, made on first sight.

Two cells: prefork on Redis and threads (an in-process pool) on RabbitMQ, four workers each,
the state in Redis.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import celery_pause
from celery_pause.model.limit_keys import records_prefix
from celery_pause.model.usage import Usage
from celery_pause.stores import store_for
from support.cells import cell_cluster, four_workers
from support.harness import Cluster, wait_for
from support.observe import most_at_once, per_second

LABELS = {"tenant": "tenant_id"}
CELLS = [
    pytest.param(("redis", "prefork"), id="redis-prefork"),
    pytest.param(("amqp", "threads"), id="amqp-threads"),
]


@pytest.fixture(params=CELLS)
def tenant_cell(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Cluster, str]]:
    """A private cluster whose tasks carry a ``tenant`` label, and the pool its workers run."""
    broker, pool = request.param
    cluster = cell_cluster(broker, "redis", tmp_path, pause_labels=LABELS, pause_worker_ttl=6.0)
    yield cluster, pool
    cluster.close()


def send(cluster: Cluster, tenant: str, tag: str, duration: float = 0.0) -> str:
    return cluster.send(tag, duration, kwargs={"tenant_id": tenant})


def finished(cluster: Cluster, count: int) -> dict[str, float] | None:
    raw = cluster.records_client.lrange(cluster.finished_key, 0, -1)
    ends = {entry["id"]: entry["finished"] for entry in map(json.loads, raw)}
    return ends if len(ends) >= count else None


def records_of_limit(cluster: Cluster, hold_id: str) -> list[str]:
    return store_for(cluster.app).record_keys(records_prefix(hold_id))


def test_every_tenant_runs_one_at_a_time_and_the_tenants_side_by_side(
    tenant_cell: tuple[Cluster, str],
) -> None:
    # Given four workers (eight slots) and every tenant limited to one task at once
    cluster, pool = tenant_cell
    four_workers(cluster, pool)
    result = celery_pause.throttle(
        cluster.app, concurrency=1, per="tenant", reason="one import each", wait=True, timeout=20
    )
    assert result.hold.limit is not None and result.hold.limit.per == "tenant"

    # When 8 tasks of 0.25 s of each of tenants A, B and C are sent interleaved, then, once
    # they run, 8 of a tenant D no command named, whose id is a number (and 4 without a tenant)
    sent = [send(cluster, t, f"{t}{i}", 0.25) for i in range(8) for t in "ABC"]
    wait_for(lambda: cluster.records(), timeout=20, what="a first start")
    sent += [cluster.send(f"D{i}", 0.25, kwargs={"tenant_id": 4}) for i in range(8)]
    sent += [cluster.send(f"none{i}", 0.25) for i in range(4)]

    # Then the status counts the tenants in use and names the busiest, each with one running
    usage = wait_for(
        lambda: (u := celery_pause.status(cluster.app).usage[result.hold.id]).partitions and u,
        timeout=20,
        what="a tenant in use",
    )
    assert isinstance(usage, Usage) and usage.busiest
    assert all(running == 1 for _, running, _ in usage.busiest), usage
    assert {value for value, _, _ in usage.busiest} <= {"A", "B", "C", "4"}

    # And every task ran once; never two of one tenant at once, while tenants ran side by side
    records = cluster.wait_records(len(sent), timeout=60)
    assert sorted(r["id"] for r in records) == sorted(sent), "lost or duplicated tasks"
    ends = wait_for(lambda: finished(cluster, len(sent)), timeout=20, what="every task to end")
    spans: dict[str, list[tuple[float, float]]] = {}
    for r in records:
        spans.setdefault(tag_tenant(r), []).append((r["started"], ends[r["id"]]))
    for tenant in "ABCD":
        assert most_at_once(spans[tenant]) == 1, f"two tasks of {tenant} ran at once"
    everyone = [span for tenant in "ABCD" for span in spans[tenant]]
    assert most_at_once(everyone) >= 3, "the tenants did not run side by side"
    assert most_at_once(spans["none"]) >= 2, "tasks without the label were limited"

    # And once the tenants are idle, the limit's records are gone from the store
    wait_for(
        lambda: not records_of_limit(cluster, result.hold.id),
        timeout=20,
        what="the idle tenants' records to be deleted",
    )


@pytest.mark.parametrize("tenant_cell", [CELLS[0]], indirect=True)
def test_one_tenants_backlog_does_not_keep_the_pool_from_another(
    tenant_cell: tuple[Cluster, str],
) -> None:
    # Given one worker of two slots, every tenant limited to two at once, and a backlog of
    # 30 tasks of tenant A (0.2 s each) that fills the pool
    cluster, pool = tenant_cell
    cluster.worker("w1", pool=pool, concurrency=2).wait_applied()
    celery_pause.throttle(cluster.app, concurrency=2, per="tenant", wait=True)
    a_ids = [send(cluster, "A", f"A{i}", 0.2) for i in range(30)]
    wait_for(lambda: cluster.records(), timeout=20, what="A's first start")

    # When 4 tasks of tenant B come
    b_sent = time.time()
    b_ids = [send(cluster, "B", f"B{i}", 0.2) for i in range(4)]
    records = cluster.wait_records(34, timeout=60)

    # Then B's started within a second, long before A's backlog ran out: A's ended tasks gave
    # the pool's room to B instead of keeping it for A's next
    assert sorted(r["id"] for r in records) == sorted(a_ids + b_ids)
    b_starts = sorted(r["started"] for r in records if r["tag"].startswith("B"))
    a_last = max(r["started"] for r in records if r["tag"].startswith("A"))
    assert b_starts[0] - b_sent < 1.0, f"B waited {b_starts[0] - b_sent:.2f} s for a slot"
    assert b_starts[-1] < a_last, "B's tasks waited for A's whole backlog"


@pytest.mark.parametrize("tenant_cell", [CELLS[0]], indirect=True)
def test_every_tenant_gets_the_rate_on_its_own(tenant_cell: tuple[Cluster, str]) -> None:
    # Given four workers and every tenant limited to 5 starts a second
    cluster, pool = tenant_cell
    four_workers(cluster, pool)
    result = celery_pause.throttle(cluster.app, rate="5/s", per="tenant", wait=True, timeout=20)

    # When 40 tasks of each of three tenants are sent at once
    sent_at = time.time()
    sent = [send(cluster, t, f"{t}{i}", 0.0) for i in range(40) for t in "ABC"]
    records = cluster.wait_records(len(sent), timeout=60)

    # Then every task ran once, and each tenant ran at its own 5/s: every 5 s window from 1 s
    # in within 15 %, no second above twice the rate (the three together: 15/s)
    assert sorted(r["id"] for r in records) == sorted(sent), "lost or duplicated tasks"
    for tenant in "ABC":
        starts = sorted(r["started"] for r in records if r["tag"].startswith(tenant))
        counts = per_second(starts, sent_at + 1, starts[-1])
        assert len(counts) >= 5, f"{tenant}'s backlog ran out too soon: {counts}"
        windows = [sum(counts[i : i + 5]) for i in range(len(counts) - 4)]
        assert all(21 <= w <= 29 for w in windows), f"{tenant}: 5 s windows {windows}"
        assert max(per_second(starts, sent_at, starts[-1])) <= 10, f"{tenant}: {counts}"
    assert len({r["worker"] for r in records}) >= 3, "the workers did not share the rates"
    wait_for(
        lambda: not records_of_limit(cluster, result.hold.id),
        timeout=20,
        what="the idle tenants' records to be deleted",
    )


@pytest.mark.parametrize("tenant_cell", [CELLS[1]], indirect=True)
def test_a_thousand_tenants_keep_the_store_bounded(tenant_cell: tuple[Cluster, str]) -> None:
    # Given two workers and every tenant limited to one at once
    cluster, pool = tenant_cell
    for i in (1, 2):
        cluster.worker(f"w{i}", pool=pool, concurrency=4).wait_applied()
    result = celery_pause.throttle(cluster.app, concurrency=1, per="tenant", wait=True)

    # When one task of each of 1000 tenants is sent
    sent = [send(cluster, f"t{i}", f"t{i}") for i in range(1000)]

    # Then all ran once, the store never held records of more than a few tenants at once
    # (those in use), and none once they are idle
    most = 0

    def done() -> bool:
        nonlocal most
        most = max(most, len(records_of_limit(cluster, result.hold.id)))
        return len(cluster.records()) >= len(sent)

    wait_for(done, timeout=120, what="every tenant's task", interval=0.05)
    assert sorted(r["id"] for r in cluster.records()) == sorted(sent)
    assert most <= 2 * 8, f"{most} records of the limit at once"
    wait_for(
        lambda: not records_of_limit(cluster, result.hold.id),
        timeout=20,
        what="the idle tenants' records to be deleted",
    )


def tag_tenant(record: dict[str, Any]) -> str:
    return str(record["tag"]).rstrip("0123456789")
