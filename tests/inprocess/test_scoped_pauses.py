"""Scopes with a worker in the test's process: a queue, a task type, a tenant paused while the
rest flows, and every held task run exactly once after the resume."""

from __future__ import annotations

import time

import celery_pause
from support.inprocess import OTHER, RECORD, Proj, ids


def test_a_paused_queue_holds_its_tasks_while_another_queue_flows(proj: Proj) -> None:
    # Given a worker consuming two queues, one of them paused (and the pause confirmed)
    paused_q, open_q = proj.queue("reports"), proj.queue("emails")
    with proj.worker(queues=[paused_q, open_q]) as worker:
        result = celery_pause.pause(proj.app, queues=[paused_q], wait=True, timeout=20)
        assert [w.hostname for w in result.workers] == [worker.hostname]
        assert proj.wait_applied(worker.hostname).paused == (paused_q,)

        # When tasks are sent to the paused queue first, then to the other one
        held = [proj.send(f"r{i}", queue=paused_q) for i in range(4)]
        flowing = [proj.send(f"e{i}", queue=open_q) for i in range(4)]

        # Then the other queue's tasks all run, and none of the paused queue's
        proj.wait_records(len(flowing), lambda r: r["queue"] == open_q)
        proj.stays_quiet(lambda r: r["queue"] == paused_q, 0.5)

        # When the queue is resumed, Then every held task runs once, none before the resume
        resumed_at = time.time()
        celery_pause.resume(proj.app, queues=[paused_q])
        records = proj.wait_records(len(held) + len(flowing))
        assert ids(records) == sorted(held + flowing), "lost or duplicated tasks"
        assert all(r["started"] >= resumed_at for r in records if r["queue"] == paused_q)


def test_a_paused_task_type_is_held_while_its_queue_flows(proj: Proj) -> None:
    # Given a worker, and one task type of its queue paused
    with proj.worker() as worker:
        result = celery_pause.pause(proj.app, tasks=[OTHER], wait=True, timeout=20)
        assert result.hold.scope.describe() == f"task {OTHER}"

        # When tasks of the paused type, more than the prefetch window (4), arrive first,
        # then tasks of the other type on the same queue
        held = [proj.send(f"held{i}", task=OTHER) for i in range(6)]
        flowing = [proj.send(f"flow{i}") for i in range(6)]

        # Then the other type all runs, and the paused type waits in the gate, none started
        proj.wait_records(len(flowing), lambda r: r["task"] == RECORD)
        proj.wait_held(worker.hostname, len(held))
        assert not proj.records(lambda r: r["task"] == OTHER), "a paused task started"

        # When the task type is resumed, Then each held task runs once, after the resume
        resumed_at = time.time()
        celery_pause.resume(proj.app, tasks=[OTHER])
        records = proj.wait_records(len(held) + len(flowing))
        assert ids(records) == sorted(held + flowing), "lost or duplicated tasks"
        assert all(r["started"] >= resumed_at for r in records if r["task"] == OTHER)


def test_a_paused_tenant_is_held_while_the_others_run(proj: Proj) -> None:
    # Given a worker, and tenant "a" paused by a label mapping
    with proj.worker() as worker:
        result = celery_pause.pause(proj.app, labels={"tenant": "a"}, wait=True, timeout=20)
        assert result.hold.scope.rule.labels == frozenset({"tenant=a"})

        # When tasks of tenants a, b and c are sent interleaved (and some with no tenant)
        sent: dict[str | None, list[str]] = {"a": [], "b": [], "c": [], None: []}
        for i in range(4):
            for tenant, of_tenant in sent.items():
                of_tenant.append(proj.send(f"{tenant}{i}", tenant=tenant))

        # Then every task but a's runs, and a's wait in the gate, none started
        proj.wait_records(12, lambda r: r["labels"].get("tenant_id") != "a")
        proj.wait_held(worker.hostname, len(sent["a"]))
        assert not proj.records(lambda r: r["labels"].get("tenant_id") == "a")

        # When a is resumed by the same mapping, Then each of a's tasks runs once, after it
        resumed_at = time.time()
        celery_pause.resume(proj.app, labels={"tenant": "a"})
        records = proj.wait_records(16)
        assert ids(records) == sorted(i for of_tenant in sent.values() for i in of_tenant)
        assert all(
            r["started"] >= resumed_at for r in records if r["labels"].get("tenant_id") == "a"
        )
        assert not celery_pause.status(proj.app).holds
