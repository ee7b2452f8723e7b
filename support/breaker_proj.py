"""Breaker tasks for the test app: a real dependency in Redis that the tests switch.

The dependency is the key ``celery-pause-test:<namespace>:dependency``: ``up``
(or missing), ``down`` (calls raise ConnectionError) or ``hang`` (the probe
blocks while it lasts). Every run of ``charge`` and every probe call is recorded
in Redis, so the tests see what really ran, where, and when.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import redis
from celery import Celery

import celery_pause
from celery_pause.breaker.task import REQUEUES_HEADER

CHARGE_TASK = "support.proj.charge"
AUTORETRY_TASK = "support.proj.charge_autoretry"
DEPENDENCY_URL = "redis://127.0.0.1:6379/14"
HANG_LIMIT = 120.0


def keys(namespace: str) -> dict[str, str]:
    base = f"celery-pause-test:{namespace}"
    return {
        "dependency": f"{base}:dependency",
        "runs": f"{base}:runs",
        "probes": f"{base}:probes",
    }


def register(app: Celery, namespace: str, options: dict[str, Any]) -> celery_pause.CircuitBreaker:
    """Add the breaker described by ``options`` and the ``charge`` task that uses it."""
    client = redis.Redis.from_url(DEPENDENCY_URL)
    names = keys(namespace)

    def dependency() -> str:
        raw = client.get(names["dependency"])
        return raw.decode() if raw else "up"

    def probe() -> bool:
        client.rpush(names["probes"], json.dumps({"pid": os.getpid(), "at": time.time()}))
        deadline = time.monotonic() + HANG_LIMIT
        while dependency() == "hang" and time.monotonic() < deadline:
            time.sleep(0.05)
        if dependency() != "up":
            raise ConnectionError("dependency down (probe)")
        return True

    settings = dict(options)
    use_probe = settings.pop("probe", False)
    if settings.get("queues") is not None:  # short names, as Cluster.queue() takes them
        settings["queues"] = [f"{namespace}.{name}" for name in settings["queues"]]
    breaker = celery_pause.CircuitBreaker(
        settings.pop("name", "dep"), probe=probe if use_probe else None, **settings
    )

    def charge(self: Any, tag: str, duration: float = 0.1) -> str:
        """Call the dependency: record the run, then fail if it is down."""
        state = dependency()
        run = {
            "id": self.request.id,
            "tag": tag,
            "worker": self.request.hostname,
            "started": time.time(),
            "duration": duration,
            "trial": self.request.breaker_trial,
            "retries": self.request.retries,
            "requeues": (self.request.headers or {}).get(REQUEUES_HEADER, 0),
            "ok": state == "up",
        }
        client.rpush(names["runs"], json.dumps(run))
        time.sleep(duration)
        if state != "up":
            raise ConnectionError("dependency down")
        return tag

    base = {"bind": True, "base": celery_pause.BreakerTask, "breaker": breaker, "shared": False}
    app.task(name=CHARGE_TASK, **base)(charge)
    # The same, with Celery's own retries on the same exception: one retry at most.
    app.task(
        name=AUTORETRY_TASK,
        autoretry_for=(ConnectionError,),
        max_retries=1,
        default_retry_delay=0,
        **base,
    )(charge)
    return breaker
