"""Limits with a worker in the test's process: a concurrency limit on one task type, kept while
the other type runs side by side. (A rate limit is checked with real workers only: on the memory
broker Celery's consumer starts a limit's waiting tasks only between two of its 2 s waits for
the broker, see docs/testing.rst.)"""

from __future__ import annotations

import celery_pause
from support.inprocess import OTHER, RECORD, Proj, ids, most_at_once


def test_a_concurrency_limit_of_one_never_lets_two_of_its_scope_run_at_once(proj: Proj) -> None:
    # Given a threads worker of four, and one task type limited to one at once
    with proj.worker(pool="threads", concurrency=4) as worker:
        result = celery_pause.throttle(proj.app, tasks=[RECORD], concurrency=1, wait=True)
        assert [w.hostname for w in result.workers] == [worker.hostname]
        assert isinstance(result, celery_pause.ThrottleResult) and result.limit.concurrency == 1

        # When 3 tasks of each type, 0.3 s each, are sent interleaved
        sent = []
        for i in range(3):
            sent.append(proj.send(f"limited{i}", 0.3))
            sent.append(proj.send(f"free{i}", 0.3, task=OTHER))
        records = proj.wait_records(len(sent))

        # Then every task ran once; never two of the limited type at once, while the other
        # type (which the pool lets run side by side) did overlap
        assert ids(records) == sorted(sent), "lost or duplicated tasks"
        limited = proj.spans([r for r in records if r["task"] == RECORD])
        free = proj.spans([r for r in records if r["task"] == OTHER])
        assert most_at_once(limited) == 1, f"{most_at_once(limited)} limited tasks at once"
        assert most_at_once(free) >= 2, "the pool never ran two at once: nothing was limited"
