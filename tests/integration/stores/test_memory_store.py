"""The memory store as users test their own apps with it: an in-process worker
(``start_worker``) on the memory broker, paused and resumed from the test code.

This is the example of ``docs/testing.rst``, step for step.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from celery import Celery
from celery.contrib.testing import worker as testing
from celery.contrib.testing.worker import start_worker
from celery.exceptions import TimeoutError as ResultTimeout

import celery_pause
from celery_pause.stores import store_for
from celery_pause.stores.memory import MemoryStore, forget_all

app = Celery("proj", broker="memory://", backend="cache+memory://", set_as_current=False)
app.conf.pause_store_url = "memory://"
app.conf.pause_poll_interval = 0.1
celery_pause.install(app)


@app.task(shared=False)
def add(x: int, y: int) -> int:
    return x + y


@pytest.fixture
def worker() -> Iterator[testing.TestWorkController]:
    with start_worker(app, pool="solo", perform_ping_check=False) as running:
        yield running
    forget_all()


def test_a_task_waits_while_paused_and_runs_after_resume(
    worker: testing.TestWorkController,
) -> None:
    # Given a paused app (the in-process worker confirmed it)
    paused = celery_pause.pause(app, wait=True, timeout=10)
    assert [w.hostname for w in paused.workers] == [worker.hostname]

    # When a task is sent, Then it does not run while paused
    result = add.delay(2, 2)
    with pytest.raises(ResultTimeout):
        result.get(timeout=1)

    # When resumed, Then it runs
    celery_pause.resume(app)
    assert result.get(timeout=10) == 4


def test_stores_of_one_url_and_prefix_share_one_state() -> None:
    # Given the app's store and another opened on the same URL and prefix
    other = MemoryStore("memory://", store_for(app).prefix)
    elsewhere = MemoryStore("memory://other", store_for(app).prefix)
    try:
        # When the app is paused, Then the second store sees it, a different URL does not
        celery_pause.pause(app)
        assert other.read().state.paused(other.now()).everything
        assert not elsewhere.read().state.holds
    finally:
        forget_all()
    assert not other.read().state.holds
