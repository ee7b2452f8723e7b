"""A worker container restarted, or killed and started again, while paused keeps the pause, and
no task is lost (Redis and RabbitMQ brokers)."""

from __future__ import annotations

from typing import Any

from celery_pause.contrib.pytest import PauseSetup, wait_for

from .support import RECORD, all_succeed, runs, send, wait_ready

TASKS = 10


def test_a_worker_restarted_while_paused_keeps_the_pause(
    celery_pause_setup: PauseSetup, celery_setup: Any
) -> None:
    # Given a paused worker container and tasks sent meanwhile
    paused = celery_pause_setup.pause()
    app = celery_pause_setup.app
    results = [send(app, RECORD, f"restart-{i}") for i in range(TASKS)]
    celery_pause_setup.assert_not_started(*results, during=0.5)

    # When its container restarts (docker restart: SIGTERM, a warm shutdown, then a new start)
    worker = celery_setup.worker
    worker.restart()
    wait_ready(worker, starts=2)
    since = celery_pause_setup.status().now

    # Then the new worker process applies the pause (it reports so), and nothing starts
    celery_pause_setup.wait_applied(paused.generation, since=since)
    celery_pause_setup.assert_not_started(*results, during=2.0)

    # When resumed, every task runs exactly once
    celery_pause_setup.resume()
    all_succeed(results)
    assert [runs(app, f"restart-{i}") for i in range(TASKS)] == [1] * TASKS


def test_held_tasks_of_a_killed_worker_are_held_again_after_it_starts(
    celery_pause_setup: PauseSetup, celery_setup: Any
) -> None:
    # Given a worker container holding tasks of a paused type (unacknowledged, in its gate)
    celery_pause_setup.pause(tasks=[RECORD])
    app = celery_pause_setup.app
    results = [send(app, RECORD, f"kill-{i}") for i in range(TASKS)]
    for result in results:
        celery_pause_setup.assert_held(result, during=0)

    # When the container is killed (SIGKILL: no shutdown at all) and started again
    worker = celery_setup.worker
    worker.kill()
    worker.restart()
    wait_ready(worker, starts=2)

    # Then the broker delivers the tasks again, and the new process holds them all
    celery_pause_setup.wait_for_workers()
    celery_pause_setup.assert_not_started(*results, during=0.5)
    wait_for(
        "every task held again",
        lambda: sum(celery_pause_setup.held().values()) == TASKS,
        timeout=60,
    )
    celery_pause_setup.assert_not_started(*results)

    # When resumed, every task runs exactly once: none lost, none doubled
    celery_pause_setup.resume()
    all_succeed(results)
    assert [runs(app, f"kill-{i}") for i in range(TASKS)] == [1] * TASKS
