"""Adaptive limits against a downstream whose capacity changes, beside Celery's usual practice.

    python -m bench.adaptive            # the figures as a table (about 5 minutes)
    python -m bench.adaptive --json     # one JSON object on stdout
    python -m bench.adaptive --phase 20 # shorter phases

Starts two private ``redis-server`` processes (broker, store), two real ``celery worker``
processes (threads pool, 8 each) of the test app ``support.proj`` and a simulated downstream
(:mod:`support.downstream`): an HTTP API whose hidden capacity is 40 calls a second for a
phase (``PHASE`` seconds), then 20, then 60, answering ``429`` with ``Retry-After: 1``
above it. On a backlog larger than the downstream can take, each task calls it once:

- ``throttle --rate 200/s --adaptive``: a task that gets a 429 raises
  ``celery_pause.Overloaded(retry_after=...)``;
- Celery's usual practice, no limit: the task raises on a 429 and has ``autoretry_for``,
  ``retry_backoff=True`` and ``retry_jitter=True`` (and Celery's default ``max_retries``, 3).

For each, from ``SETTLE`` seconds after each change to the next: the downstream's
goodput (calls answered 200 a second) against its capacity, and the share of calls answered
429; for the adaptive limit, the calls that came inside a Retry-After more than
``GRACE`` after the 429 that asked for it (the pause reaching every worker).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import celery_pause
from bench.adaptive_figures import (
    CAPACITIES,
    PHASE,
    RETRY_AFTER,
    SETTLE,
    analyse,
    per_second,
    table,
)
from bench.limits import drained
from bench.world import World, conditions, log, settle
from support.downstream import Downstream
from support.harness import wait_for
from support.processes import raise_on_sigterm
from support.proj import AUTORETRY_TASK, CALL_TASK

CEILING = "200/s"
BACKLOG = 2000
"""Tasks kept waiting in the broker (more are sent when half ran): the backlog never runs
out, however fast a way spends it (a retry that gives up spends a task too)."""
WORKERS, THREADS = 2, 8


def run(phase: float) -> dict[str, Any]:
    """Both ways against the same schedule, one after the other, on the same workers."""
    started = time.monotonic()
    load_before = os.getloadavg()
    world = World(poll_interval=1.0)
    schedule = [(i * phase, c) for i, c in enumerate(CAPACITIES)]
    runs: dict[str, Any] = {}
    try:
        queue = world.queue("api")
        log(f"{WORKERS} workers, threads pool of {THREADS}")
        world.start_workers(
            [f"w{i}" for i in range(WORKERS)], queue=queue, pool="threads", concurrency=THREADS
        )
        settle(1.0)
        with Downstream(schedule, retry_after=RETRY_AFTER) as downstream:
            log(f"throttle --rate {CEILING} --adaptive")
            celery_pause.throttle(world.app, queues=[queue], rate=CEILING, adaptive=True, wait=True)
            runs["adaptive"] = calls(world, queue, downstream, CALL_TASK, phase)
            cut = celery_pause.status(world.app).usage
            runs["adaptive"]["status"] = {k: u.to_json() for k, u in cut.items()}
            celery_pause.resume(world.app)
            drained(world, queue)
            log("autoretry_for + retry_backoff, no limit")
            runs["autoretry"] = calls(world, queue, downstream, AUTORETRY_TASK, phase)
    finally:
        world.close()
    return {
        "settings": {
            "workers": WORKERS,
            "pool": f"threads ({THREADS})",
            "capacities": CAPACITIES,
            "phase_s": phase,
            "settle_s": SETTLE,
            "retry_after_s": RETRY_AFTER,
            "ceiling": CEILING,
            "broker": "redis (private)",
        },
        "runs": runs,
        "conditions": conditions(load_before, started),
    }


def calls(world: World, queue: str, downstream: Downstream, task: str, phase: float) -> Any:
    """Send a backlog the downstream cannot take in the schedule, let it run through the
    schedule, then drop what is left; the calls the downstream answered."""
    sent = send(world, queue, task, downstream.url, BACKLOG)
    downstream.restart()
    begun = len(downstream.answered())
    end = downstream.started + phase * len(CAPACITIES)

    def over() -> bool:
        """Whether the schedule ended; until then the backlog never runs out."""
        nonlocal sent
        if world.backlog(queue) < BACKLOG // 2:
            sent += send(world, queue, task, downstream.url, BACKLOG // 2)
        return time.time() >= end

    wait_for(over, timeout=phase * len(CAPACITIES) + 10, what="the schedule", interval=0.2)
    world.drop_backlog(queue)
    answered = downstream.answered()[begun:]
    tries: dict[str, list[bool]] = {}
    for call in answered:
        tries.setdefault(call.task, []).append(call.ok)
    return {
        "sent": sent,
        # Celery's default max_retries (3): refused four times, the task failed
        "gave_up": sum(len(t) > 3 and not any(t) for t in tries.values()),
        "calls": [[c.at - downstream.started, int(c.ok)] for c in answered if c.at < end],
    }


def send(world: World, queue: str, task: str, url: str, count: int) -> int:
    with world.app.producer_or_acquire() as producer:
        for _ in range(count):
            world.app.send_task(task, args=(url,), queue=queue, producer=producer)
    return count


def main() -> None:
    raise_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--phase", type=float, default=PHASE, help="seconds per capacity")
    options = parser.parse_args()
    raw = run(options.phase)
    figures = analyse(raw)
    if options.json:
        seconds = {name: per_second(run_["calls"]) for name, run_ in raw["runs"].items()}
        summary = {k: v for k, v in raw.items() if k != "runs"}
        json.dump({"figures": figures, **summary, "per_second": seconds}, sys.stdout, indent=1)
    else:
        print(table(figures))
        print(f"conditions: {json.dumps(raw['conditions'])}")


if __name__ == "__main__":
    main()
