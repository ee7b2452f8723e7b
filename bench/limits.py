"""Limits, measured on four workers: Celery's per-worker ``rate_limit`` beside ``throttle``.

    python -m bench.limits --json --plot docs/_static/limits.png > docs/_static/limits.json
    python -m bench.limits                       # the figures as a table
    python -m bench.limits --from docs/_static/limits.json   # re-tabulate (and --plot) a run

Starts two private ``redis-server`` processes (broker, store) and real prefork ``celery
worker`` processes (4, concurrency 2) of the test app ``support.proj``, then in one run:

- Celery's own rate limit, ``10/s`` set on every worker (``control.rate_limit``), and
  ``throttle(rate="10/s")``, each on a backlog that outlasts 20 s: starts per second, per
  10 s window from 2 s in (its error against the limit) and the worst second;
- ``throttle(concurrency=3)`` on tasks of 0.2 s: the most running at once (counted from each
  task's own start and end records) and the share of the limit used;
- ``throttle(concurrency=1)`` on 40 tasks of 50 ms: from each task's end to the next one's
  start (the slot passed on: to the worker's own next task as soon as its end is heard, or to
  another worker when it asks);
- unlimited tasks drained with nothing limited, beside the same drain while a limit holds a
  backlog of another task type in the same queue, and of another queue (three rounds of the
  three, alternating; the medians);
- the store commands per limited start (the store is a server of its own: its counters see
  the workers' store traffic alone).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from typing import Any

import celery_pause
from bench.stats import median, percentile
from bench.world import World, conditions, log, settle
from support.harness import wait_for
from support.observe import most_at_once
from support.processes import raise_on_sigterm
from support.proj import OTHER_TASK, RECORD_TASK

LIMIT = 10.0
"""The rate, tasks per second, both Celery's limit and the throttle are set to."""
WORKERS = 4
ROUNDS = 3
"""Rounds of the three unlimited drains (their medians are the figures)."""
CONCURRENCY = 2


def run(*, seconds: float, drain: int) -> dict[str, Any]:
    """Every phase on the same four workers; the raw starts of the rate phases."""
    started = time.monotonic()
    load_before = os.getloadavg()
    world = World(poll_interval=1.0)
    try:
        main, other = world.queue("main"), world.queue("other")
        names = [f"w{i}" for i in range(WORKERS)]
        log(f"{WORKERS} prefork workers, concurrency {CONCURRENCY}")
        world.start_workers(names, queue=f"{main},{other}", concurrency=CONCURRENCY)
        settle(1.0)
        tasks = int(LIMIT * WORKERS * seconds)  # outlasts the run at Celery's real rate too

        log(f"Celery's rate_limit {LIMIT:g}/s on every worker, {tasks} tasks")
        world.app.control.rate_limit(RECORD_TASK, f"{LIMIT:g}/s", reply=True, timeout=5)
        celery_own = timed_starts(world, main, tasks, seconds)
        world.app.control.rate_limit(RECORD_TASK, "0", reply=True, timeout=5)
        drained(world, main)

        log(f"throttle --rate {LIMIT:g}/s, {tasks} tasks")
        commands = world.store_commands()
        hold = celery_pause.throttle(world.app, rate=LIMIT, wait=True).hold
        throttled = timed_starts(world, main, int(LIMIT * seconds * 1.5), seconds)
        rate_commands = spent(world, commands)
        celery_pause.resume(world.app, hold=hold.id)
        drained(world, main)

        log("throttle --concurrency 3, tasks of 0.2 s")
        commands = world.store_commands()
        hold = celery_pause.throttle(world.app, concurrency=3, wait=True).hold
        spans = run_spans(world, main, 120, 0.2)
        concurrency_commands = spent(world, commands)
        celery_pause.resume(world.app, hold=hold.id)

        log("throttle --concurrency 1, 40 tasks of 50 ms: the slot's hand-off")
        hold = celery_pause.throttle(world.app, concurrency=1, wait=True).hold
        handoff = run_spans(world, main, 40, 0.05)
        celery_pause.resume(world.app, hold=hold.id)

        log(f"unlimited drains of {drain} tasks: alone, beside a limited type, another queue")
        unlimited: dict[str, list[float]] = {"alone": [], "same_queue": [], "other_queue": []}
        for _ in range(ROUNDS):  # alternating, so that load from outside falls on all three
            unlimited["alone"].append(drain_rate(world, main, drain))
            unlimited["same_queue"].append(
                beside_limit(world, main, main, drain, tasks=[OTHER_TASK])
            )
            unlimited["other_queue"].append(beside_limit(world, main, other, drain, queues=[other]))
    finally:
        world.close()
    return {
        "settings": {
            "workers": WORKERS,
            "concurrency": CONCURRENCY,
            "limit_per_s": LIMIT,
            "seconds": seconds,
            "drain": drain,
            "pool": "prefork",
            "broker": "redis (private)",
        },
        "starts": {"celery_rate_limit": celery_own, "throttle": throttled},
        "concurrency": {"limit": 3, "spans": spans},
        "handoff": handoff,
        "unlimited_per_s": {
            "alone": median(unlimited["alone"]),
            "beside_limited_type_same_queue": median(unlimited["same_queue"]),
            "beside_limited_queue": median(unlimited["other_queue"]),
            "rounds": unlimited,
        },
        "store_commands": {
            "rate": rate_commands,
            "rate_starts": len(throttled),
            "concurrency": concurrency_commands,
            "concurrency_starts": len(spans),
        },
        "conditions": conditions(load_before, started),
    }


def records(world: World) -> list[dict[str, Any]]:
    """Every start record of the run so far."""
    return [json.loads(raw) for raw in world.records.lrange(world.record_key, 0, -1)]


def timed_starts(world: World, queue: str, tasks: int, seconds: float) -> list[float]:
    """Send ``tasks`` at once; the starts of the next ``seconds``, from the send (sorted)."""
    before = world.record_count()
    sent = time.time()
    world.send(queue, tasks)
    wait_for(lambda: time.time() >= sent + seconds, timeout=seconds + 5, what="the window")
    starts = (r["started"] - sent for r in records(world)[before:])
    return sorted(t for t in starts if 0 <= t < seconds)


def drained(world: World, queue: str) -> None:
    """Drop what waits in the broker, and let the workers run out what they hold."""
    world.drop_backlog(queue)

    def quiet() -> bool:
        count = world.record_count()
        time.sleep(0.5)  # a measurement interval: no new start within it
        return world.record_count() == count

    wait_for(quiet, timeout=60, what="the workers to run out")


def run_spans(world: World, queue: str, tasks: int, duration: float) -> list[list[float]]:
    """Send ``tasks`` of ``duration``; each one's start and end, once all ended."""
    before = world.record_count()
    finished_key = world.record_key.replace(":records", ":finished")
    done_before = world.records.llen(finished_key)
    world.send(queue, tasks, duration)
    wait_for(
        lambda: world.records.llen(finished_key) >= done_before + tasks,
        timeout=120,
        what="the tasks to end",
    )
    ends = {
        e["id"]: e["finished"]
        for e in map(json.loads, world.records.lrange(finished_key, done_before, -1))
    }
    return [[r["started"], ends[r["id"]]] for r in records(world)[before:]]


def drain_rate(world: World, queue: str, tasks: int, task: str = RECORD_TASK) -> float:
    """Tasks per second the cluster starts ``tasks`` unlimited tasks of ``task`` at."""
    before = world.record_count()
    sent = time.time()
    with world.app.producer_or_acquire() as producer:
        for _ in range(tasks):
            world.app.send_task(task, args=("bench", 0.0), queue=queue, producer=producer)
    wait_for(lambda: world.record_count() >= before + tasks, timeout=120, what="the drain")
    starts = [r["started"] for r in records(world)[before:] if r["task"] == task]
    return round(len(starts) / (max(starts) - sent), 1)


def beside_limit(world: World, queue: str, limited_queue: str, drain: int, **scope: Any) -> float:
    """The drain rate of ``queue``'s unlimited tasks while a 2/s limit on ``scope`` holds a
    backlog of 200 tasks of the other type in ``limited_queue``."""
    hold = celery_pause.throttle(world.app, rate=2, wait=True, **scope).hold
    with world.app.producer_or_acquire() as producer:
        for _ in range(200):
            world.app.send_task(
                OTHER_TASK, args=("limited", 0.0), queue=limited_queue, producer=producer
            )
    settle(1.0)  # the limited backlog reaches the workers' gates
    rate = drain_rate(world, queue, drain)
    celery_pause.resume(world.app, hold=hold.id)
    drained(world, limited_queue)
    return rate


def spent(world: World, before: dict[str, int]) -> int:
    """Store commands since ``before`` (the store's own counters)."""
    after = world.store_commands()
    return sum(after.values()) - sum(before.values())


# -- analysis -----------------------------------------------------------------------------
def analyse(raw: dict[str, Any]) -> dict[str, Any]:
    """Per-second counts, 10 s windows, the worst concurrency, the drain ratios."""
    limit = raw["settings"]["limit_per_s"]
    found: dict[str, Any] = {}
    for name, starts in raw["starts"].items():
        seconds = per_second(starts)
        steady = seconds[2:]
        windows = [sum(steady[i : i + 10]) / 10 for i in range(max(0, len(steady) - 9))]
        found[name] = {
            "per_second": seconds,
            "mean_per_s": round(sum(steady) / max(1, len(steady)), 2),
            "window_min_per_s": round(min(windows, default=0.0), 2),
            "window_max_per_s": round(max(windows, default=0.0), 2),
            "worst_error": round(max((abs(w - limit) / limit for w in windows), default=0.0), 3),
            "worst_second": max(seconds, default=0),
        }
    spans = raw["concurrency"]["spans"]
    limit_c = raw["concurrency"]["limit"]
    busy = sum(end - start for start, end in spans)
    elapsed = max(e for _, e in spans) - min(s for s, _ in spans)
    unlimited = raw["unlimited_per_s"]
    commands = raw["store_commands"]
    handoff = sorted(raw.get("handoff", []))
    gaps = sorted(after[0] - before[1] for before, after in itertools.pairwise(handoff))
    return {
        **found,
        "handoff_ms": {
            "p50": round(1000 * percentile(gaps, 50), 1) if gaps else None,
            "p90": round(1000 * percentile(gaps, 90), 1) if gaps else None,
            "max": round(1000 * max(gaps), 1) if gaps else None,
        },
        "concurrency": {
            "limit": limit_c,
            "most_at_once": most_at_once(spans),
            "used": round(busy / (limit_c * elapsed), 3),
        },
        "unlimited": {
            **unlimited,
            "ratio_same_queue": round(
                unlimited["beside_limited_type_same_queue"] / unlimited["alone"], 3
            ),
            "ratio_other_queue": round(unlimited["beside_limited_queue"] / unlimited["alone"], 3),
        },
        "store_commands_per_start": {
            "rate": round(commands["rate"] / max(1, commands["rate_starts"]), 2),
            "concurrency": round(
                commands["concurrency"] / max(1, commands["concurrency_starts"]), 2
            ),
        },
    }


def per_second(starts: list[float]) -> list[int]:
    if not starts:
        return []
    counts = [0] * (int(max(starts)) + 1)
    for t in starts:
        counts[int(t)] += 1
    return counts


def table(figures: dict[str, Any], raw: dict[str, Any]) -> str:
    limit = raw["settings"]["limit_per_s"]
    c, u, s = figures["concurrency"], figures["unlimited"], figures["store_commands_per_start"]
    h = figures["handoff_ms"]
    rows = [
        ("", "Celery rate_limit", "throttle"),
        ("limit set", f"{limit:g}/s per worker", f"{limit:g}/s per cluster"),
        *(
            (
                label,
                str(figures["celery_rate_limit"][key]),
                str(figures["throttle"][key]),
            )
            for label, key in (
                ("cluster starts/s (mean from 2 s)", "mean_per_s"),
                ("10 s windows, lowest /s", "window_min_per_s"),
                ("10 s windows, highest /s", "window_max_per_s"),
                ("worst error against the limit", "worst_error"),
                ("worst second", "worst_second"),
            )
        ),
    ]
    width = max(len(r[0]) for r in rows)
    lines = [f"{a:<{width}}  {b:>22}  {c2:>22}" for a, b, c2 in rows]
    lines += [
        "",
        f"concurrency {c['limit']}: most at once {c['most_at_once']}, used {c['used']:.0%}",
        f"concurrency 1: from a task's end to the next start, ms: p50 {h['p50']}, p90 "
        f"{h['p90']}, max {h['max']}",
        f"unlimited tasks/s: alone {u['alone']}, beside a limited type in the same queue "
        f"{u['beside_limited_type_same_queue']} ({u['ratio_same_queue']:.2f}), beside a limited "
        f"queue {u['beside_limited_queue']} ({u['ratio_other_queue']:.2f})",
        f"store commands per limited start: rate {s['rate']}, concurrency {s['concurrency']}",
    ]
    return "\n".join(lines)


def plot(raw: dict[str, Any], figures: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    limit = raw["settings"]["limit_per_s"]
    fig, ax = plt.subplots(figsize=(8, 4))
    for name, label in (("celery_rate_limit", "Celery rate_limit=10/s (4 workers)"),
                        ("throttle", "throttle --rate 10/s")):  # fmt: skip
        seconds = figures[name]["per_second"]
        ax.step(range(len(seconds)), seconds, where="post", label=label)
    ax.axhline(limit, color="black", linestyle="--", linewidth=1, label="the limit")
    ax.set_xlabel("seconds since the backlog was sent")
    ax.set_ylabel("task starts per second (cluster)")
    ax.set_ylim(bottom=0)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="each rate phase (s)")
    parser.add_argument("--drain", type=int, default=1500, help="tasks per unlimited drain")
    parser.add_argument("--json", action="store_true", help="print the raw run and figures")
    parser.add_argument("--plot", metavar="PNG", help="starts per second against the limit")
    parser.add_argument("--from", dest="source", metavar="JSON", help="a saved run")
    args = parser.parse_args()
    raise_on_sigterm()
    if args.source:
        with open(args.source) as saved:
            raw = json.load(saved)["raw"]
    else:
        raw = run(seconds=args.seconds, drain=args.drain)
    figures = analyse(raw)
    if args.plot:
        plot(raw, figures, args.plot)
    if args.json:
        json.dump({"raw": raw, "figures": figures}, sys.stdout, indent=1)
        print()
    else:
        print(table(figures, raw))
    return 0


if __name__ == "__main__":
    sys.exit(main())
