"""Labels on real workers: one tenant paused or limited while the others flow."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import celery_pause
from support.harness import Cluster, wait_for
from support.observe import most_at_once

LABELS = {"tenant": "tenant_id"}


@pytest.fixture
def tenant_cluster(broker: str, tmp_path: Path) -> Iterator[Cluster]:
    """A private cluster whose tasks carry a ``tenant`` label (keyword ``tenant_id``)."""
    cluster = Cluster(broker=broker, tmp=tmp_path, pause_labels=LABELS)
    yield cluster
    cluster.close()


def send(cluster: Cluster, tenant: str, tag: str, duration: float = 0.0, **how: Any) -> str:
    """A task of ``tenant``: by keyword argument, or with ``header=True`` by message header."""
    if how.get("header"):
        return cluster.send(tag, duration, headers={"tenant": tenant})
    return cluster.send(tag, duration, kwargs={"tenant_id": tenant})


def of(cluster: Cluster, tenant: str) -> list[dict[str, Any]]:
    return [r for r in cluster.records() if r["tag"].startswith(tenant)]


def test_one_tenant_paused_while_the_others_run(tenant_cluster: Cluster) -> None:
    # Given two workers (prefork and threads) on one queue, and tasks of three tenants
    cluster = tenant_cluster
    workers = [cluster.worker("w1", concurrency=2), cluster.worker("w2", pool="threads")]
    for worker in workers:
        worker.wait_applied()

    # When tenant A is paused and waited for, then 30 tasks of each tenant are sent interleaved
    # (a third of A's with the label in a message header)
    result = celery_pause.pause(cluster.app, labels=["tenant=A"], wait=True, timeout=20)
    assert result.hold.scope.rule.labels == {"tenant=A"}
    paused_at = time.time()
    sent: dict[str, list[str]] = {"A": [], "B": [], "C": []}
    for i in range(30):
        for tenant in sent:
            sent[tenant].append(
                send(cluster, tenant, f"{tenant}{i}", header=tenant == "A" and i % 3 == 0)
            )

    # Then B's and C's all ran, and no task of A started: A's are held in the gates
    wait_for(lambda: len(of(cluster, "B")) + len(of(cluster, "C")) >= 60, timeout=30, what="B, C")
    assert not of(cluster, "A"), "a task of the paused tenant started"
    held = wait_for(
        lambda: (n := sum(w.wait_applied().held for w in workers)) >= 30 and n,
        timeout=20,
        what="A's tasks held",
    )
    assert held == 30
    # ... and Celery's inspect shows each worker's holds with the label
    replies = cluster.app.control.broadcast("pause_state", reply=True, timeout=5)
    states = {name: state for reply in replies for name, state in reply.items()}
    assert {w.hostname for w in workers} <= set(states)
    for worker in workers:
        assert [hold["labels"] for hold in states[worker.hostname]["holds"]] == [["tenant=A"]]

    # When A is resumed, Then every task of A ran exactly once, none before the resume
    resumed_at = time.time()
    celery_pause.resume(cluster.app, labels=["tenant=A"])
    records = cluster.wait_records(90)
    assert sorted(r["id"] for r in records) == sorted(i for ids in sent.values() for i in ids)
    assert all(r["started"] >= resumed_at for r in of(cluster, "A")), "A started while paused"
    assert paused_at < resumed_at


def test_a_restarted_worker_holds_the_paused_tenant_from_its_first_task(
    tenant_cluster: Cluster,
) -> None:
    # Given tenant A paused, and a worker that starts after it
    cluster = tenant_cluster
    celery_pause.pause(cluster.app, labels=["tenant=A"])
    worker = cluster.worker("w1", concurrency=2)
    worker.wait_applied()

    # When tasks of A and B are sent, with A's label in a header
    a_ids = [send(cluster, "A", f"A{i}", header=True) for i in range(5)]
    b_ids = [send(cluster, "B", f"B{i}") for i in range(5)]

    # Then B's ran and A's are held; once resumed, A's ran once each
    wait_for(lambda: len(of(cluster, "B")) == 5, timeout=20, what="B's tasks")
    wait_for(lambda: worker.wait_applied().held == 5, timeout=20, what="A's tasks held")
    assert not of(cluster, "A")
    celery_pause.resume(cluster.app)
    records = cluster.wait_records(10)
    assert sorted(r["id"] for r in records) == sorted(a_ids + b_ids)


def test_a_limit_on_one_tenant_leaves_the_others_side_by_side(tenant_cluster: Cluster) -> None:
    # Given two workers of four slots, and tenant A limited to one task at once
    cluster = tenant_cluster
    workers = [cluster.worker(f"w{i}", concurrency=2) for i in (1, 2)]
    for worker in workers:
        worker.wait_applied()
    celery_pause.throttle(cluster.app, labels=["tenant=A"], concurrency=1, wait=True)

    # When 10 tasks of A and 10 of B, 0.3 s each, are sent interleaved
    for i in range(10):
        send(cluster, "A", f"A{i}", 0.3)
        send(cluster, "B", f"B{i}", 0.3)
    cluster.wait_records(20, timeout=60)
    ends = wait_for(lambda: finished(cluster, 20), timeout=20, what="every task to end")

    # Then never two of A ran at once, while B's ran side by side
    spans = {t: [(r["started"], ends[r["id"]]) for r in of(cluster, t)] for t in "AB"}
    assert most_at_once(spans["A"]) == 1
    assert most_at_once(spans["B"]) >= 2


def finished(cluster: Cluster, count: int) -> dict[str, float] | None:
    raw = cluster.records_client.lrange(cluster.finished_key, 0, -1)
    ends = {entry["id"]: entry["finished"] for entry in map(json.loads, raw)}
    return ends if len(ends) >= count else None


@pytest.fixture
def redis_tenant_cluster(redis_url: str, tmp_path: Path) -> Iterator[Cluster]:
    """``tenant_cluster`` on the Redis broker only."""
    cluster = Cluster(broker=redis_url, tmp=tmp_path, pause_labels=LABELS)
    yield cluster
    cluster.close()


def test_a_tenant_paused_by_a_mapping_is_held_while_another_runs(
    redis_tenant_cluster: Cluster,
) -> None:
    # Given a prefork worker and tasks of tenants A and B
    cluster = redis_tenant_cluster
    worker = cluster.worker("w1", concurrency=2)
    worker.wait_applied()

    # When A is paused with its label given as a mapping, and waited for
    result = celery_pause.pause(cluster.app, labels={"tenant": "A"}, wait=True, timeout=20)
    a_ids = [send(cluster, "A", f"A{i}") for i in range(10)]
    b_ids = [send(cluster, "B", f"B{i}") for i in range(10)]

    # Then the hold is A's label, B's tasks all ran and A's are held in the gate, none started
    assert result.hold.scope.rule.labels == {"tenant=A"}
    assert {w.hostname for w in result.workers} == {worker.hostname}
    wait_for(lambda: len(of(cluster, "B")) == 10, timeout=20, what="B's tasks")
    wait_for(lambda: worker.wait_applied().held == 10, timeout=20, what="A's tasks held")
    assert not of(cluster, "A"), "a task of the paused tenant started"

    # When A is resumed by the same mapping, Then each of A's tasks ran once, after it
    resumed_at = time.time()
    celery_pause.resume(cluster.app, labels={"tenant": "A"})
    records = cluster.wait_records(20)
    assert sorted(r["id"] for r in records) == sorted(a_ids + b_ids)
    assert all(r["started"] >= resumed_at for r in of(cluster, "A"))
