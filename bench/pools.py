"""The pause on each execution pool: applied latency against ``cancel_consumer``, and
throughput with the step against without, on workers of that pool, in the same run.

Each pool runs at a concurrency users would give it on two cores: prefork 2 processes,
threads 4, gevent and eventlet 20 greenlets. Tasks are no-ops, as in the prefork figures.
"""

from __future__ import annotations

from typing import Any

from . import measure
from .stats import median
from .targets import POOL_TARGETS, TARGETS, describe, mark, verdicts
from .world import World, log, settle

POOLS = {"prefork": 2, "threads": 4, "gevent": 20, "eventlet": 20}
"""Pool: concurrency."""
WORKERS = 2
"""Workers per pool in the latency rounds."""


def per_pool(
    world: World, *, throughput: dict[str, int] | None, latency_rounds: int
) -> dict[str, Any]:
    """Per pool: pause, resume and broadcast latencies, and the throughput ratio (step / none)
    of ``throughput`` pairs (``tasks``, ``rounds``, ``pairs``; ``None``: not measured)."""
    found: dict[str, Any] = {}
    for pool, concurrency in POOLS.items():
        figures: dict[str, Any] = {"concurrency": concurrency, "workers": WORKERS}
        if throughput is not None:
            log(f"{pool} (concurrency {concurrency}): throughput, step against none")
            pairs: dict[str, Any] = measure.throughput(
                world, **throughput, concurrency=concurrency, pool=pool
            )
            figures.update(
                throughput_ratio=pairs["ratio"],
                step_tasks_per_s=median(pairs["step_tasks_per_s"]),
                none_tasks_per_s=median(pairs["none_tasks_per_s"]),
                throughput=pairs,
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
        figures.update({name: latency.summary() for name, latency in latencies.items()})
        figures["verdicts"] = pool_verdicts(figures)
        found[pool] = figures
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


def pool_verdicts(f: dict[str, Any]) -> dict[str, bool]:
    """The targets of the prefork figures (``bench.targets.POOL_TARGETS``), on one pool."""
    figures = {
        "pause_p99_ms": f["pause"]["p99_ms"],
        "broadcast_p99_ms": f["broadcast"]["p99_ms"],
        "resume_p50_ms": f["resume"]["p50_ms"],
    }
    if "throughput_ratio" in f:
        figures["throughput_ratio"] = f["throughput_ratio"]
    return verdicts(figures, [name for name in POOL_TARGETS if TARGETS[name].figure in figures])


def pool_rows(found: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """Table rows: pause against cancel_consumer, resume, throughput; one pool each."""
    table = []
    for pool, f in found.items():
        met = pool_verdicts(f)
        pause, broadcast, resume = f["pause"], f["broadcast"], f["resume"]
        table += [
            (f"{pool} c={f['concurrency']}: pause p50 / p99 ms",
             f"{pause['p50_ms']:.1f} / {pause['p99_ms']:.1f}",
             f"cancel_consumer {broadcast['p50_ms']:.1f} / {broadcast['p99_ms']:.1f}",
             describe("pause_p99_ms", "pause_vs_broadcast"),
             f"{mark(met, 'pause_p99_ms', 'pause_vs_broadcast')} ({pause['samples']} samples)"),
            (f"{pool}: resume to first start p50 / p99 ms",
             f"{resume['p50_ms']:.1f} / {resume['p99_ms']:.1f}", "", describe("resume_p50_ms"),
             mark(met, "resume_p50_ms")),
        ]  # fmt: skip
        if "throughput_ratio" in met:
            rounds = len(f["throughput"]["ratios"])
            table.append(
                (f"{pool}: throughput, step / none", f"{f['throughput_ratio']:.3f}",
                 f"{f['step_tasks_per_s']:.0f} vs {f['none_tasks_per_s']:.0f} tasks/s",
                 describe("throughput_ratio"), f"{mark(met, 'throughput_ratio')} ({rounds} rounds)")
            )  # fmt: skip
    return table
