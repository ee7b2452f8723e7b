"""One tenant paused: the other tenants' rate beside their rate with nothing paused, one run.

    python -m bench.tenants               # one JSON object on stdout

Starts two private ``redis-server`` processes (broker, store) and 4 real prefork ``celery
worker`` processes (concurrency 2) of ``support/proj.py`` with ``pause_labels = {"tenant":
"tenant_id"}``. One queue, one task name, three tenants interleaved: 600 tasks of B and C (and
300 of A) are drained twice, once with nothing paused, once with tenant A paused by label (its
tasks held in the gates), in alternating rounds; the figure is B's and C's tasks per second.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import celery_pause
from bench.stats import median
from bench.world import World, conditions, log, settle
from support.harness import wait_for
from support.processes import raise_on_sigterm
from support.proj import RECORD_TASK

ROUNDS = 3
OTHERS = 600
"""Tasks of tenants B and C per drain."""


def run() -> dict[str, Any]:
    started, load_before = time.monotonic(), os.getloadavg()
    world = World(poll_interval=1.0, pause_labels={"tenant": "tenant_id"})
    try:
        queue = world.queue("tenants")
        world.start_workers([f"w{i}" for i in range(4)], queue=queue, concurrency=2)
        settle(1.0)
        rates: dict[str, list[float]] = {"none_paused": [], "a_paused": []}
        for round_ in range(ROUNDS):
            for case in rates:
                hold = None
                if case == "a_paused":
                    hold = celery_pause.pause(world.app, labels=["tenant=A"], wait=True).hold
                log(f"round {round_ + 1}: {case}")
                rates[case].append(drain(world, queue))
                if hold is not None:
                    celery_pause.resume(world.app, hold=hold.id)
                wait_for(lambda: world.backlog(queue) == 0, timeout=60, what="A's backlog")
    finally:
        world.close()
    return {
        "rates_per_s": rates,
        "median_none_paused": median(rates["none_paused"]),
        "median_a_paused": median(rates["a_paused"]),
        "ratio": round(median(rates["a_paused"]) / median(rates["none_paused"]), 3),
        "conditions": conditions(load_before, started),
    }


def drain(world: World, queue: str) -> float:
    """B's and C's tasks per second, 600 of them interleaved with 300 of A."""
    before = world.record_count()
    sent = time.time()
    with world.app.producer_or_acquire() as producer:
        for _ in range(OTHERS // 2):
            for tenant in ("A", "B", "C"):
                world.app.send_task(
                    RECORD_TASK,
                    args=(tenant, 0.0),
                    kwargs={"tenant_id": tenant},
                    queue=queue,
                    producer=producer,
                )

    def others() -> list[float] | None:
        raw = world.records.lrange(world.record_key, before, -1)
        starts = [e["started"] for e in map(json.loads, raw) if e["tag"] in ("B", "C")]
        return starts if len(starts) >= OTHERS else None

    starts = wait_for(others, timeout=120, what="B's and C's tasks")
    return round(len(starts) / (max(starts) - sent), 1)


if __name__ == "__main__":
    raise_on_sigterm()
    print(json.dumps(run(), indent=1))
