"""A limit per tenant, measured beside no limit in one run.

    python -m bench.tenant_limits                      # one JSON object on stdout
    python -m bench.tenant_limits --tenants 10000      # the many-tenants phase's size

Starts two private ``redis-server`` processes (broker, store) and 4 real prefork ``celery
worker`` processes (concurrency 2: 8 slots) of ``support/proj.py`` with ``pause_labels =
{"tenant": "tenant_id"}``. Two phases, each run with no limit and with ``throttle --per
tenant`` in force:

- **worst concurrency**: 6 tenants, 20 tasks of 0.1 s each, interleaved, under ``--per tenant
  --concurrency 1``: the most tasks of one tenant that ran at once (worst tenant), the most
  of all tenants at once, and how much of the 6 slots the tenants could fill was used;
- **many tenants**: one task (0 s) of each of ``--tenants`` distinct tenants under ``--per
  tenant --concurrency 1``: tasks per second, the most records the limit held in the store at
  once (sampled every 20 ms), and how many are left once the tenants are idle.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import celery_pause
from bench.world import World, conditions, log, settle
from celery_pause.model.limit_keys import records_prefix
from celery_pause.stores import store_for
from support.harness import wait_for
from support.observe import most_at_once
from support.processes import raise_on_sigterm
from support.proj import RECORD_TASK

TENANTS, EACH, DURATION = 6, 20, 0.1
"""The worst-concurrency phase: tenants, tasks of each, seconds per task."""


def run(many: int) -> dict[str, Any]:
    started, load_before = time.monotonic(), os.getloadavg()
    world = World(poll_interval=1.0, pause_labels={"tenant": "tenant_id"})
    try:
        queue = world.queue("tenants")
        world.start_workers([f"w{i}" for i in range(4)], queue=queue, concurrency=2)
        settle(1.0)
        result: dict[str, Any] = {}
        for case in ("no_limit", "per_tenant"):
            hold = None
            if case == "per_tenant":
                limited = celery_pause.throttle(world.app, concurrency=1, per="tenant", wait=True)
                hold = limited.hold
            log(f"{case}: worst concurrency")
            worst = worst_concurrency(world, queue)
            log(f"{case}: {many} tenants")
            result[case] = {**worst, **many_tenants(world, queue, many, hold and hold.id)}
            if hold is not None:
                celery_pause.resume(world.app, hold=hold.id)
    finally:
        world.close()
    return {**result, "conditions": conditions(load_before, started)}


def send(world: World, queue: str, tenants: list[str], duration: float) -> None:
    with world.app.producer_or_acquire() as producer:
        for tenant in tenants:
            world.app.send_task(
                RECORD_TASK,
                args=(tenant, duration),
                kwargs={"tenant_id": tenant},
                queue=queue,
                producer=producer,
            )


def finished_since(world: World, done_before: int, count: int) -> dict[str, float]:
    finished_key = world.record_key.replace(":records", ":finished")
    wait_for(
        lambda: world.records.llen(finished_key) >= done_before + count,
        timeout=300,
        what="every task to finish",
        interval=0.05,
    )
    raw = world.records.lrange(finished_key, done_before, -1)
    return {e["id"]: e["finished"] for e in map(json.loads, raw)}


def worst_concurrency(world: World, queue: str) -> dict[str, Any]:
    """The most tasks of one tenant at once, of all at once, and the slots used."""
    finished_key = world.record_key.replace(":records", ":finished")
    before, done_before = world.record_count(), world.records.llen(finished_key)
    tenants = [f"T{t}" for t in range(TENANTS)]
    send(world, queue, tenants * EACH, DURATION)
    ends = finished_since(world, done_before, TENANTS * EACH)
    records = [json.loads(raw) for raw in world.records.lrange(world.record_key, before, -1)]
    spans: dict[str, list[tuple[float, float]]] = {}
    for r in records:
        spans.setdefault(r["tag"], []).append((r["started"], ends[r["id"]]))
    every = [span for tenant_spans in spans.values() for span in tenant_spans]
    elapsed = max(end for _, end in every) - min(start for start, _ in every)
    busy = sum(end - start for start, end in every)
    return {
        "worst_tenant_at_once": max(most_at_once(s) for s in spans.values()),
        "all_at_once": most_at_once(every),
        "slots_used": round(busy / (TENANTS * elapsed), 3),
        "seconds": round(elapsed, 2),
    }


def many_tenants(world: World, queue: str, count: int, hold_id: str | None) -> dict[str, Any]:
    """Tasks per second over ``count`` tenants, and the limit's records in the store."""
    store = store_for(world.app)
    prefix = records_prefix(hold_id or "none")
    before = world.record_count()
    sent = time.time()
    send(world, queue, [f"t{i}" for i in range(count)], 0.0)
    most = 0

    def done() -> bool:
        nonlocal most
        most = max(most, len(store.record_keys(prefix)))
        return world.record_count() - before >= count

    wait_for(done, timeout=600, what="every tenant's task", interval=0.02)
    raw = world.records.lrange(world.record_key, before, -1)
    last = max(json.loads(entry)["started"] for entry in raw)
    left = len(store.record_keys(prefix))
    idle_at = time.monotonic()
    wait_for(lambda: not store.record_keys(prefix), timeout=60, what="the records to go")
    return {
        "tenants": count,
        "tasks_per_s": round(count / (last - sent), 1),
        "most_records": most,
        "records_at_end": left,
        "seconds_to_none": round(time.monotonic() - idle_at, 2),
    }


if __name__ == "__main__":
    raise_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tenants", type=int, default=10_000)
    print(json.dumps(run(parser.parse_args().tenants), indent=1))
