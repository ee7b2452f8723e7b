"""Cost-weighted limits, measured on four workers: a budget of tokens a second, spent by tasks
costing from 1 to 500 tokens each, under ``throttle --cost`` beside the two rates a user sets
today without it.

    python -m bench.cost            # the figures as a table
    python -m bench.cost --json     # one JSON object on stdout

Starts two private ``redis-server`` processes (broker, store) and four real prefork ``celery
worker`` processes (concurrency 2) of the test app ``support.proj``, then, on the same
backlog of tasks whose ``tokens`` keyword argument is drawn uniformly from 1 to 500 (seeded,
mean 250.5), for :data:`SECONDS` each:

- ``throttle --rate 3000/s --cost tokens``: the budget itself, each task spending its tokens;
- ``throttle --rate 6/s``: a task rate set for the dearest task (3000 / 500), the rate that
  never exceeds the budget;
- ``throttle --rate 12/s``: a task rate set for the mean cost (3000 / 250), which spends the
  budget on average only;
- the budget and ``throttle --rate 8/s`` on the same scope (an API's tokens and requests a
  second): the stricter, 8 tasks a second, decides.

For each: tokens spent a second (by task start) from 2 s in, the 10 s windows' error against
the budget, the worst second, and the share of seconds above the budget.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from typing import Any

import celery_pause
from bench.limits import drained, records
from bench.stats import aligned
from bench.world import World, conditions, log, settle
from support.harness import wait_for
from support.processes import raise_on_sigterm
from support.proj import RECORD_TASK

BUDGET = 3000.0
"""Tokens a second."""
MOST = 500
"""The dearest task, in tokens."""
REQUESTS = 8.0
"""Tasks a second of the limit beside the budget in the last phase (the budget alone would
start 12 a second)."""
SECONDS = 24.0
"""The window each phase is measured over."""
WORKERS = 4
CONCURRENCY = 2


def run(seconds: float) -> dict[str, Any]:
    """The three phases on the same four workers: each one's starts and their tokens."""
    started = time.monotonic()
    load_before = os.getloadavg()
    world = World(poll_interval=1.0)
    phases: dict[str, Any] = {}
    try:
        queue = world.queue("main")
        log(f"{WORKERS} prefork workers, concurrency {CONCURRENCY}")
        world.start_workers([f"w{i}" for i in range(WORKERS)], queue=queue, concurrency=CONCURRENCY)
        settle(1.0)
        tokens = {"rate": BUDGET, "cost": "tokens"}
        for name, limits in (
            ("cost", [tokens]),
            ("dearest", [{"rate": BUDGET / MOST}]),
            ("mean", [{"rate": round(BUDGET / ((1 + MOST) / 2))}]),
            ("both", [tokens, {"rate": REQUESTS}]),
        ):
            for limit in limits:
                log(f"throttle {limit}")
                celery_pause.throttle(world.app, wait=True, **limit)  # type: ignore[arg-type]
            phases[name] = {"limits": limits, "starts": spend(world, queue, seconds)}
            celery_pause.resume(world.app)
            drained(world, queue)
    finally:
        world.close()
    return {
        "settings": {
            "workers": WORKERS,
            "concurrency": CONCURRENCY,
            "budget_per_s": BUDGET,
            "costs": f"uniform 1-{MOST}",
            "seconds": seconds,
            "pool": "prefork",
            "broker": "redis (private)",
        },
        "phases": phases,
        "conditions": conditions(load_before, started),
    }


def spend(world: World, queue: str, seconds: float) -> list[list[float]]:
    """Send a backlog that outlasts ``seconds`` at the budget; each start of the window (from
    the send) and its tokens."""
    rng = random.Random(5)
    tasks = int(BUDGET * seconds * 1.5 / ((1 + MOST) / 2))
    before = world.record_count()
    sent = time.time()
    with world.app.producer_or_acquire() as producer:
        for _ in range(tasks):
            world.app.send_task(
                RECORD_TASK,
                args=("bench", 0.0),
                kwargs={"tokens": rng.randint(1, MOST)},
                queue=queue,
                producer=producer,
            )
    wait_for(lambda: time.time() >= sent + seconds, timeout=seconds + 5, what="the window")
    starts = [[r["started"] - sent, r["labels"]["tokens"]] for r in records(world)[before:]]
    return sorted(s for s in starts if 0 <= s[0] < seconds)


def analyse(raw: dict[str, Any]) -> dict[str, Any]:
    """Per phase: tokens a second from 2 s in, the 10 s windows' error, the worst second."""
    found = {}
    for name, phase in raw["phases"].items():
        seconds = [0.0] * int(raw["settings"]["seconds"])
        for at, tokens in phase["starts"]:
            seconds[int(at)] += tokens
        steady = seconds[2:]
        windows = [sum(steady[i : i + 10]) / 10 for i in range(len(steady) - 9)]
        found[name] = {
            "limits": phase["limits"],
            "tasks_per_s": round(len(phase["starts"]) / raw["settings"]["seconds"], 1),
            "tokens_per_s": round(sum(steady) / len(steady)),
            "used": round(sum(steady) / len(steady) / BUDGET, 3),
            "worst_window_error": round(max(abs(w - BUDGET) / BUDGET for w in windows), 3),
            "worst_second": round(max(seconds)),
            "seconds_over": round(sum(s > BUDGET * 1.1 for s in steady) / len(steady), 2),
        }
    counts = [0] * int(raw["settings"]["seconds"])
    for at, _ in raw["phases"]["both"]["starts"]:
        counts[int(at)] += 1
    windows = [sum(counts[2:][i : i + 10]) / 10 for i in range(len(counts) - 11)]
    worst = max(abs(w - REQUESTS) / REQUESTS for w in windows)
    found["both"]["worst_task_window_error"] = round(worst, 3)
    return found


def table(figures: dict[str, Any]) -> str:
    names = {"cost": "--rate 3000/s --cost tokens", "dearest": "--rate 6/s (dearest task)",
             "mean": "--rate 12/s (mean cost)", "both": "--cost tokens + --rate 8/s"}  # fmt: skip
    rows = [("", *names.values())]
    for label, key in (
        ("tasks started a second", "tasks_per_s"),
        ("tokens spent a second (budget 3000)", "tokens_per_s"),
        ("share of the budget used", "used"),
        ("worst 10 s window, error vs budget", "worst_window_error"),
        ("worst second, tokens", "worst_second"),
        ("seconds more than 10 % over budget", "seconds_over"),
    ):
        rows.append((label, *(str(figures[name][key]) for name in names)))
    both = figures["both"]["worst_task_window_error"]
    rows.append(("worst 10 s window, error vs 8 tasks/s", "", "", "", str(both)))
    return aligned(rows)


def main() -> None:
    raise_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--seconds", type=float, default=SECONDS)
    options = parser.parse_args()
    raw = run(options.seconds)
    figures = analyse(raw)
    if options.json:
        json.dump({"figures": figures, "raw": raw}, sys.stdout, indent=1)
    else:
        print(table(figures))
        print(f"conditions: {json.dumps(raw['conditions'])}")


if __name__ == "__main__":
    main()
