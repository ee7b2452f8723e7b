"""Helpers of the container tier's tests."""

from __future__ import annotations

from typing import Any

import redis
from celery import Celery
from celery.result import AsyncResult
from pytest_celery import CeleryBrokerCluster

from celery_pause.contrib.pytest import wait_for

RECORD = "tests.containers.tasks.record"
CALL_DEPENDENCY = "tests.containers.tasks.call_dependency"
ADD = "pytest_celery.vendors.worker.tasks.add"


def store(app: Celery) -> redis.Redis:
    """The pause store's Redis (a container's published port), from the test side."""
    return redis.Redis.from_url(app.conf.get("pause_store_url") or app.conf.broker_url)


def send(app: Celery, task: str, key: str) -> AsyncResult:
    return app.send_task(task, args=[key])


def runs(app: Celery, key: str) -> int:
    """How many times a task counted a run of ``key``."""
    return int(store(app).get(f"runs:{key}") or 0)


def all_succeed(results: list[AsyncResult], timeout: float = 60) -> None:
    wait_for(
        "every task succeeding",
        lambda: all(r.state == "SUCCESS" for r in results),
        timeout=timeout,
        interval=0.2,
    )


def wait_ready(worker: Any, starts: int, timeout: float = 60) -> None:
    """Wait until the worker container's log shows its ``starts``-th "ready." line (the log
    keeps the lines of the container's earlier runs)."""
    wait_for(
        f"{worker.hostname()} ready ({starts} starts)",
        lambda: worker.logs().count(" ready.") >= starts,
        timeout=timeout,
    )


def redis_only(celery_redis_broker: Any) -> CeleryBrokerCluster:
    return CeleryBrokerCluster(celery_redis_broker)
