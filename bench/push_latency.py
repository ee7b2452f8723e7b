"""Pause latency with remote control off: from ``pause()`` returning its write to the last
worker applying it, and how many tasks start after the write, with and without the store's
notifications (``pause_store_notify``).

    python -m bench.push_latency [--rounds 10] [--workers 3] [--broker redis|amqp|both]

Real prefork workers of ``support.proj`` on the local Redis/RabbitMQ, pause state in the
local Redis (``support.harness``), ``pause_poll_interval`` 2 s (the default).
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import celery_pause
from celery_pause.stores import store_for
from support.harness import AMQP_BROKER, REDIS_BROKER, Cluster, wait_for

POLL = 2.0
BACKLOG = 300
"""Tasks of 50 ms sent per round: about 2.5 s of work for three workers of two processes."""


def measure(
    broker: str, notify: bool, rounds: int, workers: int
) -> tuple[list[tuple[float, float]], list[int]]:
    """Per round: seconds until the last worker applied (from ``pause()`` returning, and from
    its call), and how many tasks started after it returned."""
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(
            broker=broker,
            tmp=Path(tmp),
            poll_interval=POLL,
            pause_store_notify=notify,
            worker_enable_remote_control=False,
        )
        try:
            started = [cluster.worker(f"w{i}", concurrency=2) for i in range(workers)]
            for worker in started:
                worker.wait_applied()
            store = store_for(cluster.app)
            hosts = [worker.hostname for worker in started]
            latencies: list[tuple[float, float]] = []
            late: list[int] = []
            for n in range(rounds):
                for i in range(BACKLOG):
                    cluster.send(f"r{n}-{i}", 0.05)
                # Pause while the backlog runs, at a random phase against the workers' polls
                time.sleep(random.uniform(0.2, 0.8))
                called = store.now()
                result = celery_pause.pause(cluster.app, reason="bench")
                returned, wall = store.now(), time.time()

                def applied(generation: int = result.generation) -> list[float] | None:
                    reports = store.reports_of(hosts)
                    done = [r.seen for r in reports if r.generation >= generation]
                    return done if len(done) == len(hosts) else None

                seen = wait_for(applied, timeout=3 * POLL + 5, what="every worker", interval=0.005)
                # From pause() returning (its write, notify and history done), and from the
                # call (an upper bound of the time from the write itself)
                latencies.append((max(seen) - returned, max(seen) - called))
                late.append(len(cluster.started_between(wall, float("inf"))))
                celery_pause.resume(cluster.app)
                cluster.wait_records(BACKLOG * (n + 1))
            return latencies, late
        finally:
            cluster.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--broker", choices=("redis", "amqp", "both"), default="both")
    args = parser.parse_args()
    brokers = {"redis": [REDIS_BROKER], "amqp": [AMQP_BROKER]}.get(
        args.broker, [REDIS_BROKER, AMQP_BROKER]
    )
    for broker in brokers:
        for notify in (False, True):
            latencies, late = measure(broker, notify, args.rounds, args.workers)
            returned = [after for after, _ in latencies]
            called = [since for _, since in latencies]
            print(
                f"{broker.split(':')[0]:5} notify={notify!s:5} rounds={len(latencies)} "
                f"last worker applied, s after pause() returned: median "
                f"{statistics.median(returned):.3f} max {max(returned):.3f}; after it was "
                f"called: median {statistics.median(called):.3f} max {max(called):.3f}; "
                f"tasks started after it returned: median {statistics.median(late)} "
                f"max {max(late)} (total {sum(late)})"
            )


if __name__ == "__main__":
    main()
