"""The pause on each execution pool: applied latency against ``cancel_consumer``, and
throughput with the step against without, on workers of that pool, in the same run.

Each pool runs at a concurrency users would give it on two cores: prefork 2 processes,
threads 4, gevent and eventlet 20 greenlets. Tasks are no-ops, as in the prefork figures.
"""

from __future__ import annotations

from typing import Any

from . import measure
from .world import World, log, settle

POOLS = {"prefork": 2, "threads": 4, "gevent": 20, "eventlet": 20}
"""Pool: concurrency."""
WORKERS = 2
"""Workers per pool in the latency rounds."""


def per_pool(
    world: World, *, tasks: int, rounds: int, pairs: int, latency_rounds: int
) -> dict[str, Any]:
    """Per pool: throughput ratio (step / none) and pause, resume and broadcast latencies."""
    found: dict[str, Any] = {}
    for pool, concurrency in POOLS.items():
        log(f"{pool} (concurrency {concurrency}): throughput, step against none")
        throughput: dict[str, Any] = measure.throughput(
            world, tasks=tasks, rounds=rounds, concurrency=concurrency, pool=pool, pairs=pairs
        )
        queue = world.queue(f"flow-{pool}")
        workers = world.start_workers(
            [f"{pool}{i}" for i in range(WORKERS)], queue=queue, concurrency=concurrency, pool=pool
        )
        settle(1.0)
        log(f"{pool}: {WORKERS} workers, {latency_rounds} pause/resume and cancel_consumer rounds")
        latencies = measure.latency_rounds(measure.Flow(world, queue, workers), latency_rounds)
        world.stop_workers(workers)
        world.drop_backlog(queue)
        found[pool] = {
            "concurrency": concurrency,
            "workers": WORKERS,
            "throughput_ratio": throughput["ratio"],
            "step_tasks_per_s": _median(throughput["step_tasks_per_s"]),
            "none_tasks_per_s": _median(throughput["none_tasks_per_s"]),
            "throughput": throughput,
            **{name: latency.summary() for name, latency in latencies.items()},
        }
        found[pool]["verdicts"] = verdicts(found[pool])
    return found


def controls(world: World, *, tasks: int, rounds: int, pairs: int) -> dict[str, Any]:
    """Per pool: the throughput method with the step on neither worker (A/A)."""
    found = {}
    for pool, concurrency in POOLS.items():
        log(f"{pool} (concurrency {concurrency}): throughput, none against none")
        found[pool] = measure.throughput(
            world,
            tasks=tasks,
            rounds=rounds,
            concurrency=concurrency,
            pool=pool,
            pairs=pairs,
            control=True,
        )
    return found


def verdicts(f: dict[str, Any]) -> dict[str, bool]:
    """The targets of the prefork figures, on one pool."""
    pause, broadcast = f["pause"]["p99_ms"], f["broadcast"]["p99_ms"]
    return {
        "throughput_ratio": f["throughput_ratio"] >= 0.98,
        "pause_p99_ms": pause <= 50 and pause <= 1.5 * broadcast,
        "resume_p50_ms": f["resume"]["p50_ms"] <= 50,
    }


def pool_rows(found: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """Table rows: pause against cancel_consumer, resume, throughput; one pool each."""
    table = []
    for pool, f in found.items():
        met = {name: "met" if ok else "MISSED" for name, ok in verdicts(f).items()}
        pause, broadcast, resume = f["pause"], f["broadcast"], f["resume"]
        rounds = len(f["throughput"]["ratios"])
        table += [
            (f"{pool} c={f['concurrency']}: pause p50 / p99 ms",
             f"{pause['p50_ms']:.1f} / {pause['p99_ms']:.1f}",
             f"cancel_consumer {broadcast['p50_ms']:.1f} / {broadcast['p99_ms']:.1f}",
             "p99 <= 50, <= 1.5x bcast", f"{met['pause_p99_ms']} ({pause['samples']} samples)"),
            (f"{pool}: resume to first start p50 / p99 ms",
             f"{resume['p50_ms']:.1f} / {resume['p99_ms']:.1f}", "", "p50 <= 50",
             met["resume_p50_ms"]),
            (f"{pool}: throughput, step / none", f"{f['throughput_ratio']:.3f}",
             f"{f['step_tasks_per_s']:.0f} vs {f['none_tasks_per_s']:.0f} tasks/s", ">= 0.98",
             f"{met['throughput_ratio']} ({rounds} rounds)"),
        ]  # fmt: skip
    return table


def _median(values: list[float]) -> float:
    return measure.percentile(values, 50) if values else float("nan")
