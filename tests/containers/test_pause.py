"""Pause and resume across two worker containers, on a Redis and on a RabbitMQ broker."""

from __future__ import annotations

from typing import Any

import pytest

from celery_pause.contrib.pytest import PauseSetup, wait_for

from .support import ADD, RECORD, all_succeed, runs, send

TASKS = 20


@pytest.fixture
def celery_worker_cluster(two_workers: Any) -> Any:
    return two_workers


def test_a_pause_stops_every_worker_until_resume(celery_pause_setup: PauseSetup) -> None:
    # Given two worker containers that confirmed a pause
    paused = celery_pause_setup.pause(reason="container tier")
    assert {w.hostname for w in paused.workers} == celery_pause_setup.nodenames()

    # When tasks are sent
    app = celery_pause_setup.app
    results = [send(app, RECORD, f"pause-{i}") for i in range(TASKS)]

    # Then none starts
    celery_pause_setup.assert_not_started(*results, during=2.0)

    # When resumed, every task runs exactly once
    celery_pause_setup.resume()
    all_succeed(results)
    assert [runs(app, f"pause-{i}") for i in range(TASKS)] == [1] * TASKS


def test_a_paused_task_type_is_held_while_others_run(celery_pause_setup: PauseSetup) -> None:
    # Given two worker containers that confirmed a pause of one task type
    celery_pause_setup.pause(tasks=[RECORD])

    # When tasks of that type and another are sent
    app = celery_pause_setup.app
    results = [send(app, RECORD, f"held-{i}") for i in range(TASKS)]
    other = app.send_task(ADD, args=[2, 2])

    # Then the other runs, and each paused one reaches a worker and is held there, not started
    assert other.get(timeout=30) == 4
    for result in results:
        celery_pause_setup.assert_held(result, during=0)
    wait_for(
        "every task held",
        lambda: sum(celery_pause_setup.held().values()) == TASKS,
        timeout=30,
    )
    celery_pause_setup.assert_not_started(*results)

    # When resumed, every held task runs exactly once
    celery_pause_setup.resume()
    all_succeed(results)
    assert [runs(app, f"held-{i}") for i in range(TASKS)] == [1] * TASKS
