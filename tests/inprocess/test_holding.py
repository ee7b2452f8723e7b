"""The hold itself with a worker in the test's process: a waited pause returns with the worker
quiet, a pause recorded before a worker starts holds it from its start, and a hold with
``resume_after`` ends by itself."""

from __future__ import annotations

import time

import celery_pause
from support.inprocess import Proj, ids


def test_a_waited_pause_returns_with_the_worker_quiet(proj: Proj) -> None:
    # Given a threads worker of four running a backlog of 0.4 s tasks
    with proj.worker(pool="threads", concurrency=4) as worker:
        sent = [proj.send(f"t{i}", 0.4) for i in range(12)]
        proj.wait_records(1)

        # When the app is paused with wait=True
        called_at = time.time()
        result = celery_pause.pause(proj.app, wait=True, timeout=20)
        returned_at = time.time()
        assert [w.hostname for w in result.workers] == [worker.hostname]

        # Then it returned only once every task started before it had ended ...
        before = proj.records(lambda r: r["started"] < returned_at)
        spans = proj.spans(before)
        assert any(end > called_at for _, end in spans), "nothing was running to wait for"
        assert all(end <= returned_at for _, end in spans), "returned while a task ran"
        # ... and nothing starts after it: the rest of the backlog waits, in the gate or
        # still in the broker
        assert len(before) < len(sent), "nothing left to hold"
        proj.wait_waiting(worker.hostname, len(sent) - len(before))
        proj.stays_quiet(lambda r: r["started"] >= returned_at, 1.0)

        # When resumed, Then the rest runs, each task exactly once
        resumed_at = time.time()
        celery_pause.resume(proj.app)
        records = proj.wait_records(len(sent))
        assert ids(records) == sorted(sent), "lost or duplicated tasks"
        assert not [r for r in records if returned_at <= r["started"] < resumed_at]


def test_a_worker_started_under_a_pause_starts_none_of_the_waiting_tasks(proj: Proj) -> None:
    # Given a pause recorded while no worker runs, and tasks sent meanwhile
    result = celery_pause.pause(proj.app, reason="maintenance")
    sent = [proj.send(f"t{i}") for i in range(3)]

    # When a worker starts
    with proj.worker() as worker:
        # Then it applies the pause it finds in the store, holding every queue, and starts
        # none of the tasks waiting for it
        report = proj.wait_applied(worker.hostname, result.generation)
        assert report.paused is None, f"holds only {report.paused}"
        proj.stays_quiet(lambda r: True, 1.0)

        # When resumed, Then each task runs once
        celery_pause.resume(proj.app)
        assert ids(proj.wait_records(len(sent))) == sorted(sent)


def test_a_hold_with_resume_after_ends_by_itself(proj: Proj) -> None:
    # Given a worker, and a pause that resumes by itself 5 s after it is placed (the wait
    # for its confirmation takes up to one 2 s cycle of Celery's consumer loop)
    with proj.worker() as worker:
        result = celery_pause.pause(proj.app, resume_after=5.0, wait=True, timeout=20)
        resume_at = result.hold.resume_at
        assert resume_at is not None and resume_at - time.time() > 2.5

        # When tasks are sent while it holds
        sent = [proj.send(f"t{i}") for i in range(3)]

        # Then none starts until the hold's end, and each runs once after it, with no
        # resume called
        assert proj.wait_applied(worker.hostname).paused is None
        proj.stays_quiet(lambda r: True, resume_at - time.time() - 0.1)
        records = proj.wait_records(len(sent))
        assert ids(records) == sorted(sent)
        assert all(r["started"] >= resume_at for r in records)
        assert not celery_pause.status(proj.app).holds
