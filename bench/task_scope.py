"""Throughput of a task type whose queue-mate is paused, against nothing paused.

    python -m bench.task_scope [--tasks 1000] [--rounds 4] [--json]

On Redis (127.0.0.1:6379) and RabbitMQ (127.0.0.1:5672), one real prefork worker
(concurrency 2, Celery's default prefetch) drains a backlog of one task type
twice per round: once with nothing paused (the baseline), once while the other
task type of the same queue is paused and more of its messages than the prefetch
window arrived first. The held messages must neither start nor stop the queue:
the ratio of the two rates is the figure (its target in ``bench.targets``). Which arm runs first
alternates. Every held task runs exactly once after the resume.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import celery_pause
from bench.stats import median
from bench.targets import TASK_SCOPE_TARGETS, verdicts
from support.harness import AMQP_BROKER, REDIS_BROKER, Cluster, wait_for
from support.processes import raise_on_sigterm
from support.proj import OTHER_TASK, RECORD_TASK

HELD = 40
"""Messages of the paused type sent ahead of each drain: five times the prefetch window."""


def drain(cluster: Cluster, tasks: int, tag: str) -> float:
    """Send ``tasks`` of the flowing type; their rate from first to last start."""
    records = cluster.records_client
    before = records.llen(cluster.record_key)
    for i in range(tasks):
        cluster.send(f"{tag}{i}")
    wait_for(
        lambda: records.llen(cluster.record_key) >= before + tasks,
        timeout=120,
        what=f"{tasks} starts",
    )
    new = [json.loads(raw) for raw in records.lrange(cluster.record_key, before, -1)]
    starts = sorted(r["started"] for r in new if r["task"] == RECORD_TASK)
    return (len(starts) - 1) / (starts[-1] - starts[0])


def with_type_paused(cluster: Cluster, tasks: int, tag: str) -> float:
    """Pause the other type, send more of it than the prefetch window, then drain."""
    celery_pause.pause(cluster.app, tasks=[OTHER_TASK], wait=True, timeout=30)
    held = [cluster.send(f"{tag}held{i}", task=OTHER_TASK) for i in range(HELD)]
    rate = drain(cluster, tasks, tag)
    started = [r for r in cluster.records() if r["id"] in set(held)]
    assert not started, f"{len(started)} tasks of the paused type started"
    celery_pause.resume(cluster.app, tasks=[OTHER_TASK])
    wait_for(
        lambda: sorted(r["id"] for r in cluster.records() if r["id"] in set(held)) == sorted(held),
        timeout=60,
        what="every held task to run once",
    )
    return rate


def measure(broker: str, tasks: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(broker=broker, tmp=Path(tmp))
        try:
            cluster.worker("w1", concurrency=2).wait_applied()
            drain(cluster, 200, "warm")
            rates: dict[str, list[float]] = {"none_paused": [], "other_type_paused": []}
            for number in range(rounds):
                arms = ["none_paused", "other_type_paused"]
                for arm in arms if number % 2 == 0 else arms[::-1]:
                    tag = f"r{number}{arm[0]}"
                    rate = (
                        drain(cluster, tasks, tag)
                        if arm == "none_paused"
                        else with_type_paused(cluster, tasks, tag)
                    )
                    rates[arm].append(rate)
                    print(
                        f"{broker.split(':')[0]} round {number} {arm}: {rate:.0f}/s",
                        file=sys.stderr,
                    )
        finally:
            cluster.close()
    ratios = [p / n for p, n in zip(rates["other_type_paused"], rates["none_paused"], strict=True)]
    found = {
        "ratio": round(median(ratios), 3),
        "ratios": [round(r, 3) for r in ratios],
        "none_paused_tasks_per_s": round(median(rates["none_paused"]), 1),
        "other_type_paused_tasks_per_s": round(median(rates["other_type_paused"]), 1),
        "tasks_per_round": tasks,
        "held_ahead": HELD,
    }
    return {**found, "verdicts": verdicts(found, TASK_SCOPE_TARGETS)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args()
    raise_on_sigterm()
    results = {
        name: measure(broker, args.tasks, args.rounds)
        for name, broker in (("redis", REDIS_BROKER), ("rabbitmq", AMQP_BROKER))
    }
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{'broker':<10} {'nothing paused':>16} {'other type paused':>18} {'ratio':>7}")
    for name, found in results.items():
        print(
            f"{name:<10} {found['none_paused_tasks_per_s']:>14.0f}/s "
            f"{found['other_type_paused_tasks_per_s']:>16.0f}/s {found['ratio']:>7.3f}"
        )


if __name__ == "__main__":
    main()
