"""Fair share on real workers: a tenant's flood no longer makes the others wait for its drain."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import celery_pause
from celery_pause.api.depths import queue_depths
from celery_pause.api.document import overview
from celery_pause.model.fair import FAIR_REGISTRY, fair_queues
from celery_pause.stores import store_for
from support.cells import TWO_CELLS, cell_cluster
from support.harness import Cluster, wait_for
from support.observe import most_at_once

LABELS = {"tenant": "tenant_id"}


@pytest.fixture(params=TWO_CELLS)
def cell(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Cluster, str]]:
    broker, pool, store = request.param
    cluster = cell_cluster(broker, store, tmp_path, pause_labels=LABELS)
    yield cluster, pool
    cluster.close()


def send(cluster: Cluster, tenant: str, tag: str, duration: float) -> str:
    return cluster.send(tag, duration, kwargs={"tenant_id": tenant})


def waiting_for_turns(cluster: Cluster, hold: str) -> int:
    """Tasks in the fair limit's value queues."""
    queues = fair_queues(store_for(cluster.app).read_record(FAIR_REGISTRY), hold)
    depths = queue_depths(cluster.app, list(queues.values())) if queues else {}
    return sum(depth or 0 for depth in depths.values())


def starts_in_order(records: list[dict[str, Any]]) -> list[str]:
    return [r["labels"]["tenant_id"] for r in sorted(records, key=lambda r: r["started"])]


def test_a_tenant_sent_behind_a_flood_starts_within_its_turns_and_resume_lifts_them(
    cell: tuple[Cluster, str],
) -> None:
    # Given one worker (2 at once) and starts shared fairly by tenant
    cluster, pool = cell
    worker = cluster.worker("w1", pool=pool, concurrency=2)
    worker.wait_applied()
    hold = celery_pause.throttle(cluster.app, fair="tenant", wait=True, timeout=20).hold.id

    # When tenant A floods 300 tasks of 50 ms into the shared queue, then B sends 20
    a_ids = [send(cluster, "A", f"A{i:03}", 0.05) for i in range(300)]
    b_ids = [send(cluster, "B", f"B{i:03}", 0.05) for i in range(20)]

    # Then B's 20 start long before A's flood is drained (FIFO: after all 300 of A), A's
    # waiting for their turns outside the worker
    def b_done() -> list[dict[str, Any]] | None:
        records = cluster.records()
        return records if sum(r["id"] in set(b_ids) for r in records) == 20 else None

    order = starts_in_order(wait_for(b_done, timeout=60, what="B's 20 tasks"))
    a_before_last_b = order[: len(order) - order[::-1].index("B")].count("A")
    assert a_before_last_b < 150, f"{a_before_last_b} of A started before B's last"
    assert waiting_for_turns(cluster, hold) > 0
    shown = overview(cluster.app).to_json()
    assert [t["value"] for t in shown["turns"] if t["hold"] == hold] == ["A"]
    assert shown["totals"]["turns"] > 0

    # When the fair limit is lifted
    celery_pause.resume(cluster.app)

    # Then every task ran exactly once, and no task waits for a turn any more
    records = cluster.wait_records(320, timeout=120)
    assert sorted(r["id"] for r in records) == sorted(a_ids + b_ids)
    wait_for(lambda: waiting_for_turns(cluster, hold) == 0, timeout=30, what="turns emptied")
    assert len(cluster.records()) == 320


def test_weights_share_the_starts_under_a_concurrency(cell: tuple[Cluster, str]) -> None:
    # Given two workers (4 at once each), fair turns by tenant weighing A 3 to B's 1, and at
    # most 2 tasks running across the cluster
    cluster, pool = cell
    workers = [cluster.worker(f"w{i}", pool=pool, concurrency=4) for i in (1, 2)]
    for worker in workers:
        worker.wait_applied()
    celery_pause.throttle(
        cluster.app, fair="tenant", weights={"A": 3}, concurrency=2, wait=True, timeout=20
    )

    # When both send 150 tasks of 20 ms at once
    ids = [send(cluster, t, f"{t}{i:03}", 0.02) for i in range(150) for t in ("A", "B")]

    # Then while both wait, A takes 3 of every 4 starts, and never more than 2 run at once
    records = cluster.wait_records(160, timeout=90)
    order = starts_in_order(records)
    window = order[40:160]  # past the first stock of the queue, while both have a backlog
    share = window.count("A") / len(window)
    assert 0.65 <= share <= 0.85, f"A's share of the starts was {share:.2f}"
    spans = cluster.spans(len(ids), timeout=120)
    assert most_at_once(list(spans.values())) <= 2
    assert sorted(r["id"] for r in cluster.records()) == sorted(ids)


def test_a_producer_with_the_hook_sends_a_flood_straight_to_its_turns(
    cell: tuple[Cluster, str],
) -> None:
    # Given a producer that parks at send, and starts shared fairly by tenant
    cluster, pool = cell
    cluster.app.conf.pause_park_at_send = True
    celery_pause.install(cluster.app)
    hold = celery_pause.throttle(cluster.app, fair="tenant").hold.id

    # When tenant A floods 300 tasks before any worker runs
    a_ids = [send(cluster, "A", f"A{i:03}", 0.02) for i in range(300)]

    # Then none of them is in the shared queue: all wait for their turns
    queue = cluster.queue()
    assert waiting_for_turns(cluster, hold) == 300
    assert queue_depths(cluster.app, [queue])[queue] == 0

    # When a worker starts, and B sends 10 once A's tasks are running
    worker = cluster.worker("w1", pool=pool, concurrency=2)
    worker.wait_applied()
    cluster.wait_records(20, timeout=60)
    b_ids = [send(cluster, "B", f"B{i:03}", 0.02) for i in range(10)]

    # Then B's 10 start long before A's flood is drained, and every task runs exactly once
    records = cluster.wait_records(310, timeout=120)
    order = starts_in_order(records)
    a_before_last_b = order[: len(order) - order[::-1].index("B")].count("A")
    assert a_before_last_b < 150, f"{a_before_last_b} of A started before B's last"
    assert sorted(r["id"] for r in records) == sorted(a_ids + b_ids)
