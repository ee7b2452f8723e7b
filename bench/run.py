"""celery-pause benchmark: every figure next to its baseline, on real Redis and real workers.

    python -m bench.run                 # the full set (about 16 minutes)
    python -m bench.run --quick --json  # fewer rounds, about 3 minutes; one JSON object on stdout
    python -m bench.run --control       # the throughput method with no step on either side
    python -m bench.run --cpu           # CPU per task with and without the step, one at a time
    python -m bench.run --instructions  # main-thread instructions per task (needs valgrind)
    python -m bench.run --instructions --pool gevent  # the same on gevent workers
    python -m bench.run --pools         # only the per-pool figures of the full set (~16 min)
    python -m bench.run --pools --control  # the throughput method per pool, step on neither side

Starts two private ``redis-server`` processes (broker, store) on free loopback
ports and real ``celery worker`` processes (prefork; then prefork, threads, gevent
and eventlet for the per-pool figures); needs ``redis-server`` on PATH.
Progress goes to stderr; the table (or the JSON object) to stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import celery
import kombu
import redis

from bench import measure
from bench.gate_cost import gate_cost
from bench.instructions import instructions_per_task
from bench.pools import POOLS, controls, per_pool, pool_rows
from bench.stats import median
from bench.targets import FALLBACK_BOUND_MS, POLL_INTERVAL, describe, mark, verdicts
from bench.world import World, log, settle
from support.processes import raise_on_sigterm


def plan(quick: bool) -> dict[str, Any]:
    if quick:
        return {"tp_tasks": 1000, "tp_rounds": 8, "tp_pairs": 2, "rounds": 16, "scale_rounds": 6,
                "fallback_rounds": 6, "idle_s": 10.0, "sizes": [1, 4],
                "pool_tp_tasks": 1000, "pool_tp_rounds": 4, "pool_tp_pairs": 2,
                "pool_rounds": 10}  # fmt: skip
    return {"tp_tasks": 2000, "tp_rounds": 20, "tp_pairs": 4, "rounds": 100, "scale_rounds": 30,
            "fallback_rounds": 25, "idle_s": 60.0, "sizes": [1, 4, 16],
            "instruction_tasks": 500, "instruction_rounds": 3,
            "pool_tp_tasks": 3000, "pool_tp_rounds": 16, "pool_tp_pairs": 4,
            "pool_rounds": 40}  # fmt: skip


def pool_throughput(settings: dict[str, Any]) -> dict[str, int]:
    """The per-pool throughput pairs' size in ``settings``: tasks, rounds and pairs."""
    return {
        "tasks": settings["pool_tp_tasks"],
        "rounds": settings["pool_tp_rounds"],
        "pairs": settings["pool_tp_pairs"],
    }


def run(quick: bool) -> dict[str, Any]:
    settings = plan(quick)
    started = time.monotonic()
    load_before = os.getloadavg()
    world = World(poll_interval=POLL_INTERVAL)
    try:
        log("gate: per-call cost against the handler it wraps")
        gate = gate_cost()
        log("throughput: one worker with the pause step and one without, side by side")
        throughput = measure.throughput(
            world,
            tasks=settings["tp_tasks"],
            rounds=settings["tp_rounds"],
            pairs=settings["tp_pairs"],
            concurrency=1,
        )
        instructions: dict[str, Any] | None = None
        if "instruction_tasks" in settings:
            log("instructions per task in the main thread, under callgrind")
            instructions = instructions_per_task(
                world, tasks=settings["instruction_tasks"], rounds=settings["instruction_rounds"]
            )
        scaling: dict[str, Any] = {}
        main: dict[str, measure.Latencies] = {}
        idle: dict[str, Any] = {}
        idle_paused: dict[str, Any] | None = None
        queue = world.queue("flow")
        workers: list[Any] = []
        for size in settings["sizes"]:
            log(f"starting workers up to {size}")
            workers += world.start_workers(
                [f"w{i}" for i in range(len(workers), size)], queue=queue
            )
            settle(1.0)
            flow = measure.Flow(world, queue, workers)
            rounds = settings["rounds"] if size == 4 else settings["scale_rounds"]
            log(f"{size} worker(s): {rounds} pause/resume and cancel_consumer rounds")
            found = measure.latency_rounds(flow, rounds)
            scaling[str(size)] = {
                "pause": found["pause"].summary(),
                "broadcast": found["broadcast"].summary(),
                "resume": found["resume"].summary(),
            }
            if size == 4:
                main = found
                log(f"4 workers: {settings['fallback_rounds']} pauses with the push lost")
                main["fallback"] = measure.fallback_rounds(
                    flow, settings["fallback_rounds"], POLL_INTERVAL
                )
                world.drop_backlog(queue)
                log(f"4 idle workers: counting store commands for {settings['idle_s']:g}s")
                settle(POLL_INTERVAL)
                idle = measure.idle_store_load(world, 4, settings["idle_s"])
                if not quick:
                    celery_pause_all(world)
                    idle_paused = measure.idle_store_load(world, 4, settings["idle_s"])
                    resume_all(world)
            if size > 4:
                world.drop_backlog(queue)
        world.stop_workers(workers)
        world.drop_backlog(queue)
        # A quick run leaves the per-pool pairs out: they ran it past five minutes (see --pools).
        pools = per_pool(
            world,
            throughput=None if quick else pool_throughput(settings),
            latency_rounds=settings["pool_rounds"],
        )
    except BaseException:
        world.close(keep_logs=True)
        log(f"failed; worker logs kept in {world.tmp}")
        raise
    world.close()
    return report(
        settings,
        throughput,
        gate,
        instructions,
        main,
        scaling,
        idle,
        idle_paused,
        pools,
        load_before,
        started,
    )


def run_alone(measurement: Callable[[World], dict[str, object]]) -> dict[str, object]:
    """One measurement on a world of its own."""
    world = World(poll_interval=POLL_INTERVAL)
    try:
        return measurement(world)
    finally:
        world.close()


def run_pools(settings: dict[str, Any]) -> dict[str, Any]:
    """The per-pool figures alone, on a world of their own."""
    started, load_before = time.monotonic(), os.getloadavg()
    pools = run_alone(
        lambda world: per_pool(
            world, throughput=pool_throughput(settings), latency_rounds=settings["pool_rounds"]
        )
    )
    found = conditions(load_before, started)
    found["worker"] = "per pool: its concurrency in each pool's entry, prefetch multiplier 4"
    return {"pools": pools, "plan": settings, "conditions": found}


def pools_table(found: dict[str, Any]) -> str:
    return render(pool_rows(found["pools"]), found["conditions"])


def celery_pause_all(world: World) -> None:
    import celery_pause

    celery_pause.pause(world.app, wait=True, timeout=60)
    settle(POLL_INTERVAL)


def resume_all(world: World) -> None:
    import celery_pause

    celery_pause.resume(world.app)


def report(
    settings: dict[str, Any],
    throughput: dict[str, Any],
    gate: dict[str, float],
    instructions: dict[str, Any] | None,
    main: dict[str, measure.Latencies],
    scaling: dict[str, Any],
    idle: dict[str, Any],
    idle_paused: dict[str, Any] | None,
    pools: dict[str, Any],
    load_before: tuple[float, float, float],
    started: float,
) -> dict[str, Any]:
    def ms(value: float) -> float:
        return round(value, 2)

    figures: dict[str, Any] = {
        "throughput_ratio": throughput["ratio"],
        "gate_added_ns": gate["added_open_ns"],
        "pause_p50_ms": ms(main["pause"].p(50)),
        "pause_p99_ms": ms(main["pause"].p(99)),
        "broadcast_p50_ms": ms(main["broadcast"].p(50)),
        "broadcast_p99_ms": ms(main["broadcast"].p(99)),
        "fallback_p50_ms": ms(main["fallback"].p(50)),
        "fallback_p99_ms": ms(main["fallback"].p(99)),
        "fallback_bound_ms": FALLBACK_BOUND_MS,
        "resume_p50_ms": ms(main["resume"].p(50)),
        "resume_p99_ms": ms(main["resume"].p(99)),
        "idle_store_cmds_per_s": idle["per_worker_per_s"],
    }
    figures["verdicts"] = verdicts(figures)
    figures["details"] = {
        "throughput": throughput,
        "gate": gate,
        "instructions": instructions,
        "latency_4_workers": {name: found.summary() for name, found in main.items()},
        "scaling": scaling,
        "idle_store": idle,
        "idle_store_paused": idle_paused,
        "pools": pools,
        "plan": settings,
    }
    figures["conditions"] = conditions(load_before, started)
    return figures


def conditions(load_before: tuple[float, float, float], started: float) -> dict[str, Any]:
    """The machine, the versions and the load around a run."""
    return {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "celery": celery.__version__,
        "kombu": kombu.__version__,
        "redis_py": redis.__version__,
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "duration_s": round(time.monotonic() - started, 1),
        "pause_poll_interval": POLL_INTERVAL,
        "worker": "prefork, concurrency 1, prefetch multiplier 4",
        "broker_and_store": "two private redis-server processes on loopback",
    }


def table(figures: dict[str, Any]) -> str:
    v = figures["verdicts"]
    d = figures["details"]
    tp = d["throughput"]
    gate = d.get("gate", {})

    rows = [
        ("throughput, step / none (pairs' medians)", f"{figures['throughput_ratio']:.3f}",
         f"{median(tp['step_tasks_per_s']):.0f} vs {median(tp['none_tasks_per_s']):.0f} tasks/s",
         describe("throughput_ratio"), mark(v, "throughput_ratio")),
        ("  per pair (started first)", _per_pair(tp), "", "", ""),
        ("CPU per task, step (main + pool), ms", f"{tp['cpu_ms_per_task']['step']:.3f}",
         f"none {tp['cpu_ms_per_task']['none']:.3f}", "", ""),
        ("gate, ns added per task (open / other q paused)",
         f"{gate.get('added_open_ns', math.nan):.0f} / "
         f"{gate.get('added_other_paused_ns', math.nan):.0f}",
         f"handler alone {gate.get('handler_ns', math.nan):.0f}", "", ""),
        ("instructions per task, main thread (M)", _instructions(d.get("instructions")),
         _instructions(d.get("instructions"), "none"), "", ""),
        ("pause applied, 4 workers, p50 / p99 ms",
         f"{figures['pause_p50_ms']:.1f} / {figures['pause_p99_ms']:.1f}",
         f"cancel_consumer {figures['broadcast_p50_ms']:.1f} / {figures['broadcast_p99_ms']:.1f}",
         describe("pause_p99_ms", "pause_vs_broadcast"),
         mark(v, "pause_p99_ms", "pause_vs_broadcast")),
        ("push lost (polling), p50 / p99 ms",
         f"{figures['fallback_p50_ms']:.0f} / {figures['fallback_p99_ms']:.0f}",
         f"poll interval {POLL_INTERVAL * 1000:.0f}",
         describe("fallback_p99_ms"), mark(v, "fallback_p99_ms")),
        ("resume to first start, p50 / p99 ms",
         f"{figures['resume_p50_ms']:.1f} / {figures['resume_p99_ms']:.1f}",
         "cancel_consumer + add_consumer: n/a", describe("resume_p50_ms"),
         mark(v, "resume_p50_ms")),
        ("idle store commands / s / worker", f"{figures['idle_store_cmds_per_s']:.2f}",
         ", ".join(f"{k} {n}" for k, n in sorted(d["idle_store"]["calls"].items())),
         describe("idle_store_cmds_per_s"), mark(v, "idle_store_cmds_per_s")),
    ]  # fmt: skip
    for size, found in d["scaling"].items():
        rows.append(
            (
                f"pause p50 / p99 ms, {size} worker(s)",
                f"{found['pause']['p50_ms']:.1f} / {found['pause']['p99_ms']:.1f}",
                f"cancel_consumer {found['broadcast']['p50_ms']:.1f} / "
                f"{found['broadcast']['p99_ms']:.1f}",
                "",
                f"{found['pause']['samples']} samples",
            )
        )
    rows += pool_rows(d.get("pools") or {})
    return render(rows, figures["conditions"])


def render(rows: list[tuple[str, str, str, str, str]], c: dict[str, Any]) -> str:
    """The rows as a text table, the run's conditions under it."""
    widths = [max(len(str(row[i])) for row in rows) for i in range(5)]
    header = ("figure", "measured", "baseline (same run)", "target", "verdict")
    widths = [max(w, len(h)) for w, h in zip(widths, header, strict=True)]
    lines = [
        "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, tuple("-" * w for w in widths), *rows]
    ]
    lines.append("")
    lines.append(
        f"{c['cpus']} CPUs, load {c['loadavg_before']} -> {c['loadavg_after']}, "
        f"{c['duration_s']}s; celery {c['celery']}, kombu {c['kombu']}, redis-py {c['redis_py']}"
    )
    return "\n".join(lines)


def _per_pair(found: dict[str, Any]) -> str:
    """Each pair's median ratio, with which worker started first."""
    return " / ".join(f"{p['ratio']:.3f} ({p['started_first']})" for p in found.get("pairs", ()))


def _instructions(found: dict[str, Any] | None, arm: str = "step") -> str:
    if not found or "per_task" not in found:
        return (found or {}).get("skipped", "not measured")  # type: ignore[no-any-return]
    text = f"{found['per_task'][arm] / 1e6:.3f}"
    return f"{text} ({found['ratio']:.4f}x)" if arm == "step" else f"none {text}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="fewer rounds, no per-pool throughput pairs (2-6 minutes)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--table-from", metavar="FILE", help="print the table of a saved --json")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="only main-thread instructions per task, with and without the step (callgrind)",
    )
    parser.add_argument(
        "--pool",
        choices=sorted(POOLS),
        default="prefork",
        help="with --instructions: the workers' pool (at its per-pool concurrency but prefork, "
        "which runs 1 process)",
    )
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="only CPU per task, with and without the step, each worker draining alone",
    )
    parser.add_argument(
        "--pools",
        action="store_true",
        help="only the per-pool figures (prefork, threads, gevent, eventlet)",
    )
    parser.add_argument(
        "--control",
        action="store_true",
        help="only the throughput measurement, with the step on neither worker (A/A control); "
        "with --pools, on each pool",
    )
    args = parser.parse_args()
    raise_on_sigterm()
    if args.table_from:
        saved = json.loads(Path(args.table_from).read_text())
        print(pools_table(saved) if "details" not in saved else table(saved))
        return 0
    settings = plan(args.quick)
    if args.pools and args.control:
        found = run_alone(lambda world: controls(world, **pool_throughput(settings)))
        print(json.dumps(found, indent=2))
        return 0
    if args.pools:
        found = run_pools(settings)
        print(json.dumps(found, indent=2) if args.json else pools_table(found))
        return 0
    alone: dict[str, Callable[[World], dict[str, object]]] = {
        "control": lambda world: measure.throughput(
            world,
            tasks=settings["tp_tasks"],
            rounds=settings["tp_rounds"],
            pairs=settings["tp_pairs"],
            concurrency=1,
            control=True,
        ),
        "cpu": lambda world: measure.cpu_alone(world, tasks=3000, rounds=4 if args.quick else 8),
        "instructions": lambda world: instructions_per_task(
            world,
            tasks=500,
            rounds=5,
            pool=args.pool,
            concurrency=1 if args.pool == "prefork" else POOLS[args.pool],
        ),
    }
    for name, measurement in alone.items():
        if getattr(args, name):
            print(json.dumps(run_alone(measurement), indent=2))
            return 0
    figures = run(args.quick)
    print(json.dumps(figures, indent=2) if args.json else table(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
