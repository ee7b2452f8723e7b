"""Pause latency per store, side by side: Redis, PostgreSQL and MariaDB on RabbitMQ.

    python -m bench.store_latency                  # 20 rounds per store
    python -m bench.store_latency --rounds 40 --json
    python -m bench.store_latency --stores mariadb,postgresql
    python -m bench.store_latency --cold           # each pause in a fresh process (the CLI's case)
    python -m bench.store_latency --cold --status-first  # ... that opened its store at its start

For each store: two real prefork workers (``support.proj``, concurrency 2) on the local
RabbitMQ, their pause state in that store, a queue kept full of short tasks. Each round
times ``celery_pause.pause(app, wait=True)`` from the call to its return, and counts the
tasks that started after the call (they all started before it returned: the wait confirms
that nothing runs in scope), then resumes and waits for the flow to start again.
Each pause is also split into its steps on the caller's side (the state written, the
broadcast sent, the wait) and on the workers' (the log line of the applied pause).

Needs the services of the test suite: RabbitMQ, Redis (the task records), PostgreSQL
and MariaDB (see ``support/stores.py``). Progress goes to stderr, the table to stdout.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import celery_pause
from support.harness import AMQP_BROKER, ROOT, Cluster, wait_for
from support.stores import MARIADB_STORE, POSTGRESQL_STORE, REDIS_STORE

from .one_pause import timed_pause
from .stats import median, percentile
from .world import log

STORES = {"redis": REDIS_STORE, "postgresql": POSTGRESQL_STORE, "mariadb": MARIADB_STORE}
BACKLOG = 2000
"""Tasks kept queued: enough for a cold round's start-up of the pausing process."""
APPLIED = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}).*generation (\d+): paused")


def pause_cold(cluster: Cluster, status_first: bool) -> dict[str, float]:
    """The same in a fresh process, as ``celery pause --wait`` or a one-off script runs it:
    the store is opened (its client library imported) inside the call."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.one_pause", *(["--status-first"] if status_first else [])],
        env=cluster.env(), cwd=ROOT, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return dict(json.loads(done.stdout.splitlines()[-1]))


def applied_at(cluster: Cluster, generation: int) -> list[float]:
    """When each worker logged that it applied ``generation`` (local time, ms)."""
    found = []
    for worker in cluster.workers:
        for line in worker.log.read_text(errors="replace").splitlines():
            match = APPLIED.match(line)
            if match and int(match.group(2)) == generation:
                stamp = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f")
                found.append(stamp.timestamp())
    return found


def top_up(cluster: Cluster, queue: str, seconds: float) -> None:
    with cluster.app.connection_for_write() as conn:
        waiting = conn.default_channel.queue_declare(queue, passive=True).message_count
    with cluster.app.producer_or_acquire() as producer:
        for _ in range(max(0, BACKLOG - waiting)):
            cluster.app.send_task(
                "support.proj.record", args=("b", seconds), queue=queue, producer=producer
            )


def flowing(cluster: Cluster, since: float) -> bool:
    """Whether every worker started a task after ``since``."""
    hosts = {r["worker"] for r in cluster.records() if r["started"] >= since}
    return hosts >= {w.hostname for w in cluster.workers}


def one_store(name: str, url: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    cluster = Cluster(broker=AMQP_BROKER, tmp=tmp, store=url, poll_interval=args.poll)
    rows: list[dict[str, float]] = []
    try:
        queue = cluster.queue()
        workers = [cluster.worker(n, concurrency=args.concurrency) for n in ("w1", "w2")]
        for worker in workers:
            worker.wait_applied(timeout=60)
        for number in range(args.rounds):
            top_up(cluster, queue, args.task_seconds)
            since = time.time()
            wait_for(lambda s=since: flowing(cluster, s), timeout=30, what="the flow")
            time.sleep(args.gap)  # flowing for a while, as between two pauses in production
            if args.cold:
                timings = pause_cold(cluster, args.status_first)
            else:
                timings = timed_pause(cluster.app)
            called, returned = timings["called"], timings["returned"]
            result_generation = int(timings["generation"])
            late = cluster.started_between(called, float("inf"))
            applied = wait_for(
                lambda g=result_generation: (
                    found if len(found := applied_at(cluster, g)) == 2 else None
                ),
                timeout=10,
                what="the workers' log lines",
            )
            rows.append(
                {
                    "total": returned - called,
                    "late": len(late),
                    "write": timings["written"] - called,
                    "broadcast": timings["notified"] - timings["written"],
                    "history": timings["recorded"] - timings["notified"],
                    "applied": max(applied) - timings["notified"],
                    "wait_after_applied": returned - max(applied),
                }
            )
            celery_pause.resume(cluster.app)
            log(f"{name} round {number + 1}: {rows[-1]['total'] * 1000:.0f} ms, {len(late)} late")
        with cluster.app.connection_for_write() as conn:
            conn.default_channel.queue_purge(queue)
    finally:
        cluster.close()
    return summarise(rows)


def summarise(rows: list[dict[str, float]]) -> dict[str, Any]:
    def ms(key: str, pct: float) -> float:
        return round(percentile([r[key] * 1000 for r in rows], pct), 1)

    return {
        "rounds": len(rows),
        "pause_wait_p50_ms": ms("total", 50),
        "pause_wait_p99_ms": ms("total", 99),
        "late_tasks_p50": median(r["late"] for r in rows),
        "late_tasks_max": max((r["late"] for r in rows), default=0),
        "steps_p50_ms": {
            key: ms(key, 50)
            for key in ("write", "broadcast", "history", "applied", "wait_after_applied")
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--stores", default=",".join(STORES))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--concurrency", type=int, default=2, help="pool processes per worker")
    parser.add_argument("--task-seconds", type=float, default=0.02, help="each task's work")
    parser.add_argument("--gap", type=float, default=1.0, help="seconds of flow before a pause")
    parser.add_argument("--poll", type=float, default=2.0, help="pause_poll_interval")
    parser.add_argument("--cold", action="store_true", help="each pause in a fresh process")
    parser.add_argument(
        "--status-first", action="store_true", help="with --cold: status(app) before the pause"
    )
    args = parser.parse_args()
    found = {}
    for name in args.stores.split(","):
        with tempfile.TemporaryDirectory(prefix="celery-pause-bench-") as tmp:
            found[name] = one_store(name, STORES[name], args, Path(tmp))
    if args.json:
        json.dump(found, sys.stdout, indent=2)
        print()
        return
    keys = ("write", "broadcast", "history", "applied", "wait_after_applied")
    header = f"{'store':<11} {'p50 ms':>8} {'p99 ms':>8} {'late p50':>8} {'late max':>8}  "
    print(header + "  ".join(f"{k} p50" for k in keys))
    for name, row in found.items():
        cells = "  ".join(f"{row['steps_p50_ms'][k]:>{len(k) + 4}.1f}" for k in keys)
        print(
            f"{name:<11} {row['pause_wait_p50_ms']:>8.1f} {row['pause_wait_p99_ms']:>8.1f} "
            f"{row['late_tasks_p50']:>8g} {row['late_tasks_max']:>8d}  {cells}"
        )


if __name__ == "__main__":
    main()
