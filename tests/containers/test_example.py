"""The example of docs/testing.rst, "Testing your app in containers": run by the tier as is."""

from __future__ import annotations

from types import ModuleType

import pytest

from celery_pause.contrib.pytest import PauseSetup

from . import tasks  # your app's tasks: the worker containers import this module


@pytest.fixture
def default_worker_tasks(default_worker_tasks: set[ModuleType]) -> set[ModuleType]:
    return default_worker_tasks | {tasks}


def test_a_task_is_held_while_paused_and_runs_after_resume(
    celery_pause_setup: PauseSetup,
) -> None:
    # Given the workers confirmed a pause of one task
    celery_pause_setup.pause(tasks=[tasks.record.name], reason="example")

    # When it is sent, it reaches a worker and waits there: held, not started
    result = tasks.record.s("example").delay()
    celery_pause_setup.assert_held(result)

    # Then it runs after the resume
    celery_pause_setup.resume()
    assert result.get(timeout=30) == "example"
