"""Tasks of the container tier's workers (copied into every worker container).

Each run counts itself in the pause store's Redis (``runs:<key>``), so a test can tell that a
task ran exactly once. ``call_dependency`` uses a circuit breaker whose dependency is "down"
while the store holds the key ``dependency:down``. Self-contained: a worker container has this
file and pytest-celery's own tasks, nothing else of the tests.
"""

from __future__ import annotations

import os

import redis
from celery import shared_task

from celery_pause import BreakerTask, CircuitBreaker

DOWN = "dependency:down"


def store() -> redis.Redis:
    """The pause store's Redis, as this worker container reaches it."""
    url = os.environ.get("CELERY_PAUSE_STORE_URL") or os.environ["CELERY_BROKER_URL"]
    return redis.Redis.from_url(url)


@shared_task
def record(key: str) -> str:
    """Count a run of ``key``."""
    store().incr(f"runs:{key}")
    return key


def dependency_up() -> bool:
    """The breaker's probe: whether the dependency is back."""
    return not store().exists(DOWN)


dependency = CircuitBreaker(
    "dependency",
    fail_max=3,
    window=60,
    reset_timeout=1,
    exceptions=(ConnectionError,),
    probe=dependency_up,
    requeue_delay=1,
)


@shared_task(base=BreakerTask, breaker=dependency)
def call_dependency(key: str) -> str:
    """Fail with ``ConnectionError`` while the dependency is down; else count a run of ``key``."""
    if not dependency_up():
        raise ConnectionError("dependency down")
    store().incr(f"runs:{key}")
    return key
