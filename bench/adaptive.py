"""Adaptive limits against a downstream whose capacity changes, beside Celery's usual practice.

    python -m bench.adaptive            # the figures as a table (about 5 minutes)
    python -m bench.adaptive --json     # one JSON object on stdout
    python -m bench.adaptive --phase 20 # shorter phases

Starts two private ``redis-server`` processes (broker, store), two real ``celery worker``
processes (threads pool, 8 each) of the test app ``support.proj`` and a simulated downstream
(:mod:`support.downstream`): an HTTP API whose hidden capacity is 40 calls a second for a
phase (:data:`PHASE` seconds), then 20, then 60, answering ``429`` with ``Retry-After: 1``
above it. On a backlog larger than the downstream can take, each task calls it once:

- ``throttle --rate 200/s --adaptive``: a task that gets a 429 raises
  ``celery_pause.Overloaded(retry_after=...)``;
- Celery's usual practice, no limit: the task raises on a 429 and has ``autoretry_for``,
  ``retry_backoff=True`` and ``retry_jitter=True`` (and Celery's default ``max_retries``, 3).

For each, from :data:`SETTLE` seconds after each change to the next: the downstream's
goodput (calls answered 200 a second) against its capacity, and the share of calls answered
429; for the adaptive limit, the calls that came inside a Retry-After more than
:data:`GRACE` after the 429 that asked for it (the pause reaching every worker).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import celery_pause
from bench.limits import aligned, drained
from bench.world import World, conditions, log, settle
from support.downstream import Call, Downstream
from support.harness import wait_for
from support.processes import raise_on_sigterm
from support.proj import AUTORETRY_TASK, CALL_TASK

CAPACITIES = (40.0, 20.0, 60.0)
"""The downstream's calls a second, one phase each."""
PHASE = 40.0
"""Seconds each capacity lasts."""
SETTLE = 15.0
"""Seconds after each change before the figures count."""
RETRY_AFTER = 1.0
GRACE = 0.1
"""Seconds after a 429 a call may still come (its task started before the pause arrived)."""
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


def analyse(raw: dict[str, Any]) -> dict[str, Any]:
    """Per run and phase: goodput against capacity and the 429 share from :data:`SETTLE`
    seconds after the change; for the adaptive run, the calls inside a Retry-After."""
    phase = raw["settings"]["phase_s"]
    found: dict[str, Any] = {}
    for name, run_ in raw["runs"].items():
        answered = [Call(at, bool(ok), "") for at, ok in run_["calls"]]
        phases = []
        for i, capacity in enumerate(CAPACITIES):
            start, end = i * phase + min(SETTLE, phase / 2), (i + 1) * phase
            inside = [c for c in answered if start <= c.at < end]
            good = sum(c.ok for c in inside) / (end - start)
            phases.append(
                {
                    "capacity": capacity,
                    "goodput": round(good, 1),
                    "of_capacity": round(good / capacity, 3),
                    "share_429": round(sum(not c.ok for c in inside) / max(1, len(inside)), 3),
                }
            )
        found[name] = {
            "phases": phases,
            "inside_retry_after": inside_retry_after(answered),
            "gave_up": run_["gave_up"],
        }
    return found


def inside_retry_after(answered: list[Call]) -> dict[str, Any]:
    """Calls that came inside a Retry-After more than :data:`GRACE` after the 429 asking
    for it, and the latest any came after such a 429."""
    refused = [c.at for c in answered if not c.ok]
    late, latest = 0, 0.0
    j = 0
    for call in answered:
        while j < len(refused) and refused[j] + RETRY_AFTER <= call.at:
            j += 1
        asked = [t for t in refused[j:] if t < call.at]
        if asked:
            since = call.at - asked[0]
            latest = max(latest, since) if since < GRACE else latest
            late += since >= GRACE
    return {
        "429": len(refused),
        "later_than_grace": late,
        "latest_within_grace_s": round(latest, 3),
    }


def per_second(calls: list[list[float]]) -> list[list[int]]:
    """Calls answered 200 and 429 in each whole second of the schedule."""
    counts = [[0, 0] for _ in range(int(max((at for at, _ in calls), default=0.0)) + 1)]
    for at, ok in calls:
        counts[int(at)][0 if ok else 1] += 1
    return counts


def table(figures: dict[str, Any]) -> str:
    rows: list[tuple[str, ...]] = [
        ("", "adaptive (--rate 200/s --adaptive)", "autoretry_for + retry_backoff")
    ]
    for i, capacity in enumerate(CAPACITIES):
        for label, key in (("goodput / capacity", "of_capacity"), ("429 share", "share_429")):
            rows.append(
                (
                    f"{capacity:g}/s: {label}",
                    *(str(figures[name]["phases"][i][key]) for name in ("adaptive", "autoretry")),
                )
            )
    rows.append(
        (
            "tasks failed, their retries spent",
            "none (a refused task goes back unchanged)",
            str(figures["autoretry"]["gave_up"]),
        )
    )
    inside = [figures[name]["inside_retry_after"] for name in ("adaptive", "autoretry")]
    rows.append(
        (
            "calls inside a Retry-After > 0.1 s after its 429",
            *(f"{r['later_than_grace']} (of {r['429']} 429s)" for r in inside),
        )
    )
    return aligned(rows)


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
