"""The circuit breaker opening and closing in a worker container (Redis broker)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pytest_celery import CeleryBrokerCluster

from celery_pause.contrib.pytest import PauseSetup, wait_for

from .support import CALL_DEPENDENCY, all_succeed, runs, send, store
from .tasks import DOWN, dependency


@pytest.fixture
def celery_broker_cluster(celery_redis_broker: Any) -> Iterator[CeleryBrokerCluster]:
    cluster = CeleryBrokerCluster(celery_redis_broker)
    yield cluster
    cluster.teardown()


def breaker_holds(setup: PauseSetup) -> list[Any]:
    return [h for h in setup.status().state.holds if h.source == f"breaker:{dependency.name}"]


def test_the_breaker_opens_on_failures_and_closes_when_its_probe_passes(
    celery_pause_setup: PauseSetup,
) -> None:
    # Given a worker container with the breaker's agent and the dependency down
    app = celery_pause_setup.app
    store(app).set(DOWN, 1)
    celery_pause_setup.wait_for_workers()

    # When its tasks fail fail_max times
    failed = [send(app, CALL_DEPENDENCY, f"breaker-{i}") for i in range(dependency.fail_max)]

    # Then the breaker opens: its hold pauses its tasks, and one sent now is held, not started
    wait_for("the breaker's hold", lambda: breaker_holds(celery_pause_setup), timeout=30)
    later = send(app, CALL_DEPENDENCY, "breaker-later")
    celery_pause_setup.assert_held(later)

    # When the dependency is back
    store(app).delete(DOWN)

    # Then the probe closes the breaker, which removes its hold, and every task runs once
    wait_for("the breaker closing", lambda: not breaker_holds(celery_pause_setup), timeout=30)
    all_succeed([*failed, later])
    keys = [f"breaker-{i}" for i in range(dependency.fail_max)] + ["breaker-later"]
    assert [runs(app, key) for key in keys] == [1] * len(keys)
