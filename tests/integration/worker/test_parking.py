"""Parking on real workers: a paused tenant's backlog leaves the workers and comes back once."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import celery_pause
from celery_pause.api.document import overview
from celery_pause.cli.render import status_lines
from celery_pause.http.backlog import render_backlog
from celery_pause.model.parking import PARKED_HEADER, Marker, value_queue
from celery_pause.settings import config_for
from celery_pause.worker.parking import copy_connection, parked_queue, publish_copy
from support.cells import TWO_CELLS, cell_cluster
from support.harness import Cluster, Worker, wait_for

LABELS = {"tenant": "tenant_id"}
MAX_HELD = 10


@pytest.fixture(params=TWO_CELLS)
def cell(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Cluster, str]]:
    broker, pool, store = request.param
    cluster = cell_cluster(broker, store, tmp_path, pause_labels=LABELS, pause_max_held=MAX_HELD)
    yield cluster, pool
    cluster.close()


def send(cluster: Cluster, tenant: str, tag: str, **options: Any) -> str:
    return cluster.send(tag, kwargs={"tenant_id": tenant}, **options)


def parked(cluster: Cluster, hold: str) -> int:
    """The tasks parked under ``hold``, as ``pause status`` counts them."""
    return overview(cluster.app).parked.get(hold) or 0


def accounted(cluster: Cluster, hold: str, workers: list[Worker], sent: int) -> list[int] | None:
    """What each worker holds, once those and the parked ones are every task ``sent``."""
    held = [worker.wait_applied().held for worker in workers]
    return held if parked(cluster, hold) + sum(held) == sent else None


def test_a_paused_tenants_backlog_is_parked_and_comes_back_in_order_once(
    cell: tuple[Cluster, str],
) -> None:
    # Given two workers that hold at most 10 tasks each, and tenant A paused
    cluster, pool = cell
    workers = [cluster.worker(f"w{i}", pool=pool, concurrency=2) for i in (1, 2)]
    for worker in workers:
        worker.wait_applied()
    hold = celery_pause.pause(cluster.app, labels=["tenant=A"], wait=True, timeout=20).hold.id

    # When 300 tasks of A and 30 of B are sent into the shared queue
    a_ids = [send(cluster, "A", f"A{i:03}") for i in range(300)]
    b_ids = [send(cluster, "B", f"B{i:03}") for i in range(30)]

    # Then B's ran, no A started, and the workers hold at most 10 each: the rest is parked
    wait_for(lambda: len(cluster.records()) >= 30, timeout=60, what="B's tasks")
    held = wait_for(lambda: accounted(cluster, hold, workers, 300), timeout=60, what="A parked")
    assert max(held) <= MAX_HELD
    assert {record["id"] for record in cluster.records()} == set(b_ids)

    # When A is resumed
    celery_pause.resume(cluster.app, labels=["tenant=A"])

    # Then every task ran exactly once, the parking queue is empty, and A's ran in the order sent
    records = cluster.wait_records(330, timeout=120)
    assert sorted(record["id"] for record in records) == sorted(a_ids + b_ids)
    assert parked(cluster, hold) == 0
    a_starts = {r["tag"]: r["started"] for r in records if r["tag"].startswith("A")}
    first, last = (
        [a_starts[f"A{i:03}"] for i in range(100)],
        [a_starts[f"A{i:03}"] for i in range(200, 300)],
    )
    assert max(first) <= min(last), "a task sent late started before one sent early"


def test_a_pause_of_two_tenants_counts_each_ones_parked_tasks_and_brings_both_back(
    cell: tuple[Cluster, str],
) -> None:
    # Given a worker that holds at most 10 tasks, and tenants A and C paused together
    cluster, pool = cell
    worker = cluster.worker("w1", pool=pool, concurrency=2)
    worker.wait_applied()
    hold = celery_pause.pause(cluster.app, labels=["tenant=A", "tenant=C"], wait=True).hold.id

    # When 120 tasks of A, 40 of C and 5 of B are sent
    a_ids = [send(cluster, "A", f"A{i:03}") for i in range(120)]
    c_ids = [send(cluster, "C", f"C{i:03}") for i in range(40)]
    b_ids = [send(cluster, "B", f"B{i}") for i in range(5)]

    # Then status counts what is parked of each tenant, in text, JSON and metrics alike
    wait_for(lambda: len(cluster.records()) >= 5, timeout=60, what="B's tasks")
    wait_for(lambda: accounted(cluster, hold, [worker], 160), timeout=60, what="A and C parked")
    view = overview(cluster.app)
    values = dict(view.parked_values[hold])
    assert set(values) == {"A", "C"} and sum(n or 0 for n in values.values()) == view.parked[hold]
    assert values["A"] >= 120 - MAX_HELD and values["C"] >= 40 - MAX_HELD
    entry = next(e for e in view.to_json()["parked"] if e["hold"] == hold)
    assert entry["values"] == [{"value": v, "tasks": n} for v, n in values.items()]
    text = "\n".join(status_lines(view))
    assert f"{view.parked[hold]} task(s) of hold {hold} parked" in text
    assert f'"A" {values["A"]}, "C" {values["C"]}' in text
    metrics = render_backlog(view)[0].decode()
    assert f'celery_pause_parked{{hold="{hold}"}} {float(view.parked[hold])}' in metrics
    assert f'celery_pause_parked_value{{hold="{hold}",value="C"}} {float(values["C"])}' in metrics

    # When both are resumed, Then every task ran once, each tenant's in the order sent
    celery_pause.resume(cluster.app)
    records = cluster.wait_records(165, timeout=120)
    assert sorted(r["id"] for r in records) == sorted(a_ids + c_ids + b_ids)
    assert parked(cluster, hold) == 0
    for tenant, count in (("A", 120), ("C", 40)):
        starts = [
            r["started"] for r in sorted(records, key=lambda r: r["tag"]) if r["tag"][0] == tenant
        ]
        assert len(starts) == count
        assert max(starts[: count // 3]) <= min(starts[-(count // 3) :]), f"{tenant} out of order"


def test_a_task_id_moved_twice_runs_once(cell: tuple[Cluster, str]) -> None:
    # Given tenant A paused, and a worker that holds at most 10 tasks
    cluster, pool = cell
    worker = cluster.worker("w1", pool=pool, concurrency=2)
    worker.wait_applied()
    hold = celery_pause.pause(cluster.app, labels=["tenant=A"], wait=True, timeout=20).hold.id

    # When 30 tasks of A are parked, and a second copy of one of them is parked too (as a move
    # cut short between the copy and the acknowledgement leaves it)
    ids = [send(cluster, "A", f"A{i:03}") for i in range(30)]
    wait_for(lambda: parked(cluster, hold) >= 30 - MAX_HELD, timeout=60, what="A parked")
    twin = copy_parked(cluster, hold)

    # Then, resumed, each task ran exactly once, the twin's too, and the worker said it dropped one
    celery_pause.resume(cluster.app)
    records = cluster.wait_records(30, timeout=60)
    wait_for(
        lambda: worker.log_count("another copy of it has started") >= 1, timeout=20, what="drop"
    )
    assert sorted(record["id"] for record in records) == sorted(ids)
    assert twin in ids
    assert len(cluster.records()) == 30


def copy_parked(cluster: Cluster, hold: str) -> str:
    """Publish a second copy (a new copy id) of the oldest message of tenant A parked; its
    task id."""
    name = value_queue(config_for(cluster.app).key_prefix, hold, "A")
    with copy_connection(cluster.app) as conn:
        queue = parked_queue(name)(conn.channel())
        message = queue.get(no_ack=False)
        assert message is not None
        marker = Marker.from_header(message.headers[PARKED_HEADER])
        assert marker is not None
        producer = conn.Producer()
        for copy in (marker.copy, uuid.uuid4().hex):  # the message back, and its twin
            twin = Marker(copy, marker.hold, marker.exchange, marker.routing_key)
            publish_copy(producer, message, twin, name, name)
        message.ack()
        return str(message.headers["id"])


def test_a_producer_with_the_hook_sends_a_paused_tenants_tasks_straight_to_parking(
    cell: tuple[Cluster, str],
) -> None:
    # Given a producer that parks at send, a worker, and tenant A paused
    cluster, pool = cell
    cluster.app.conf.pause_park_at_send = True
    celery_pause.install(cluster.app)
    worker = cluster.worker("w1", pool=pool, concurrency=2)
    worker.wait_applied()
    hold = celery_pause.pause(cluster.app, labels=["tenant=A"], wait=True, timeout=20).hold.id

    # When 50 tasks of A (one with a countdown, each with a header of its own) and 5 of B are sent
    sent_at = time.time()
    a_ids = [
        send(cluster, "A", f"A{i:03}", headers={"trace": f"t{i}"}, countdown=3 if i == 0 else None)
        for i in range(50)
    ]
    b_ids = [send(cluster, "B", f"B{i}") for i in range(5)]

    # Then B's ran, and A's went to the parking queue without passing through the worker
    wait_for(lambda: len(cluster.records()) == 5, timeout=30, what="B's tasks")
    assert parked(cluster, hold) == 50
    assert worker.wait_applied().held == 0

    # When A is resumed, Then each ran once, seeing its headers as sent, the countdown kept
    celery_pause.resume(cluster.app)
    records = cluster.wait_records(55, timeout=60)
    assert sorted(r["id"] for r in records) == sorted(a_ids + b_ids)
    a_records = {r["tag"]: r for r in records if r["tag"].startswith("A")}
    assert all(r["seen"]["trace"] == f"t{int(tag[1:])}" for tag, r in a_records.items())
    assert not any(r["seen"]["parked_header"] for r in records)
    assert all(r["seen"]["retries"] == 0 for r in records)
    assert a_records["A000"]["started"] >= sent_at + 3


def test_a_ramped_resume_brings_the_parked_tasks_back_at_the_ramps_pace(
    cell: tuple[Cluster, str],
) -> None:
    # Given 60 tasks of a paused tenant parked (a worker holds 10), and a ramp peak of 20/s
    cluster, pool = cell
    cluster.app.conf.pause_ramp_peak = 20.0
    worker = cluster.worker("w1", pool=pool, concurrency=2, extra={"pause_ramp_peak": 20.0})
    worker.wait_applied()
    hold = celery_pause.pause(cluster.app, labels=["tenant=A"], wait=True, timeout=20).hold.id
    ids = [send(cluster, "A", f"A{i:03}") for i in range(60)]
    wait_for(lambda: accounted(cluster, hold, [worker], 60), timeout=60, what="A parked")

    # When A is resumed with a 4 s ramp
    resumed = time.time()
    celery_pause.resume(cluster.app, labels=["tenant=A"], ramp=4)

    # Then every task ran once, the parked ones too, and no faster than the ramp lets them:
    # in its first second, at most what a rate rising to 20/s over 4 s allows (with slack)
    records = cluster.wait_records(60, timeout=60)
    assert sorted(r["id"] for r in records) == sorted(ids)
    assert parked(cluster, hold) == 0
    early = [r for r in records if r["started"] < resumed + 1.0]
    assert len(early) <= 5, f"{len(early)} started in the ramp's first second"


def test_a_consumer_an_operator_adds_to_a_paused_queue_fetches_no_more_than_the_bound(
    cell: tuple[Cluster, str],
) -> None:
    # Given a worker whose whole queue is paused, and an operator who adds its consumer back
    cluster, pool = cell
    worker = cluster.worker("w1", pool=pool, concurrency=2)
    worker.wait_applied()
    hold = celery_pause.pause(cluster.app, wait=True, timeout=20).hold.id
    replies = cluster.app.control.add_consumer(
        cluster.queue(), destination=[worker.hostname], reply=True, timeout=5
    )
    assert replies, "the worker did not answer add_consumer"

    # When 200 tasks are sent to it
    ids = [cluster.send(f"t{i:03}") for i in range(200)]

    # Then it holds at most 10, the rest parked, none started; resumed, each runs once
    held = wait_for(lambda: accounted(cluster, hold, [worker], 200), timeout=60, what="parked")
    assert held[0] <= MAX_HELD
    assert cluster.records() == []
    celery_pause.resume(cluster.app)
    records = cluster.wait_records(200, timeout=60)
    assert sorted(r["id"] for r in records) == sorted(ids)
