"""A ramped resume, measured: the cluster's task starts per second against the ramp's
curve, beside a plain resume of an equal backlog in the same run.

    python -m bench.ramp --json --plot docs/_static/ramp.png > docs/_static/ramp.json
    python -m bench.ramp                        # the figures as a table
    python -m bench.ramp --from docs/_static/ramp.json --plot docs/_static/ramp.png  # redraw

Starts two private ``redis-server`` processes (broker, store) and real prefork
``celery worker`` processes (4 by default, concurrency 2, Celery's prefetch window)
of the test app ``support.proj``, whose task records ``time.time()`` as its body
starts. A queue is paused, a backlog sent, and the queue resumed plainly; when that
backlog has run, the queue is paused again, an equal backlog sent, and the queue
resumed with ``ramp=``. The backlog outlasts the ramp, so the ramp limits throughout.
Starts are binned from each resume's store time against :meth:`~support.holds.Curve.rate` (per bin,
the curve's mean over the bin) and :meth:`~support.holds.Curve.allowance` (cumulative).

``--plot`` needs matplotlib (``pip install 'celery-pause[bench]'``); ``--from`` reads
a saved JSON object, which keeps every start, and redraws or re-tabulates it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import celery_pause
from bench.stats import median
from bench.targets import POLL_INTERVAL
from bench.world import Start, World, conditions, log, settle
from support.harness import wait_for
from support.holds import Curve, curve, ramps
from support.processes import raise_on_sigterm


def run(
    *, workers: int, concurrency: int, peak: float, seconds: float, tasks: int, task_s: float
) -> dict[str, Any]:
    """Both resumes on the same workers and queue: every start, relative to its resume."""
    started = time.monotonic()
    load_before = os.getloadavg()
    world = World(poll_interval=POLL_INTERVAL, pause_ramp_peak=peak)
    try:
        queue = world.queue("ramp")
        names = [f"w{i}" for i in range(workers)]
        log(f"{workers} prefork workers, concurrency {concurrency}")
        world.start_workers(names, queue=queue, concurrency=concurrency)
        settle(1.0)
        log(f"plain resume of {tasks} tasks")
        done = paused_backlog(world, queue, tasks, task_s)
        plain_at = celery_pause.resume(world.app, queues=[queue]).now
        plain = collect(world, done, tasks, timeout=60)
        log(f"ramped resume of {tasks} tasks: {seconds:g} s to {peak:g}/s")
        done = paused_backlog(world, queue, tasks, task_s)
        settle(1.0)
        result = celery_pause.resume(world.app, queues=[queue], ramp=seconds)
        (ramp,) = ramps(world.app)
        assert (ramp.hold,) == result.ramps
        ramped = collect(world, done, tasks, timeout=seconds + 60)
    finally:
        world.close()
    return {
        "settings": {
            "workers": workers,
            "concurrency": concurrency,
            "prefetch_multiplier": 4,
            "peak_per_s": peak,
            "ramp_s": seconds,
            "tasks": tasks,
            "task_s": task_s,
            "pool": "prefork",
            "broker": "redis (private)",
        },
        "ramp": {
            "start": ramp.start,
            "duration": ramp.duration,
            "peak": ramp.peak,
        },
        "starts": {
            "ramped": relative(ramped, ramp.start),
            "plain": relative(plain, plain_at),
        },
        "conditions": conditions(load_before, started),
    }


def paused_backlog(world: World, queue: str, tasks: int, task_s: float) -> int:
    """Pause ``queue`` on every worker, then send ``tasks`` to it; returns the starts
    recorded so far."""
    celery_pause.pause(world.app, queues=[queue], wait=True, timeout=30)
    world.send(queue, tasks, task_s)
    wait_for(lambda: world.backlog(queue) >= tasks, timeout=30, what="the backlog")
    assert not world.new_starts(), "tasks started while their queue was paused"
    return world.record_count()


def collect(world: World, done: int, tasks: int, *, timeout: float) -> list[Start]:
    """Every start of the backlog just resumed (``done`` starts before it), once all came."""
    wait_for(lambda: world.record_count() >= done + tasks, timeout=timeout, what="starts")
    starts = world.new_starts()
    assert len(starts) == tasks, f"{len(starts)} starts for {tasks} tasks"
    return starts


def relative(starts: list[Start], origin: float) -> dict[str, list[Any]]:
    """Start times in seconds from ``origin`` (sorted), with each one's worker."""
    ordered = sorted(starts, key=lambda s: s.started)
    return {
        "t": [round(s.started - origin, 4) for s in ordered],
        "worker": [s.worker.partition("@")[0] for s in ordered],
    }


def analyse(raw: dict[str, Any], width: float) -> dict[str, Any]:
    """Bins, the curve, how far ahead of or behind it the cluster ran, per-worker counts."""
    r = raw["ramp"]
    ramp = curve(0.0, r["duration"], r["peak"])
    ramped, plain = raw["starts"]["ramped"]["t"], raw["starts"]["plain"]["t"]
    end = max(ramped[-1], plain[-1])
    edges = [round(i * width, 6) for i in range(math.ceil(end / width) + 1)]
    if len(edges) < 2:
        edges.append(width)

    def per_s(times: list[float]) -> list[float]:
        return [round(sum(1 for t in times if a <= t < b) / width, 2) for a, b in pairs(edges)]

    ideal = [
        round((ramp.allowance(b) - ramp.allowance(a)) / width, 2) if b <= ramp.duration else None
        for a, b in pairs(edges)
    ]
    ahead, ahead_at = max((k - ramp.allowance(t), t) for k, t in enumerate(ramped, 1)
                          if t < ramp.duration)  # fmt: skip
    in_ramp = [t for t in ramped if t < ramp.duration]
    behind = max(
        [ramp.allowance(t) - k for k, t in enumerate(in_ramp)]
        + [ramp.allowance(ramp.duration) - len(in_ramp)]
    )
    return {
        "bins": {
            "width_s": width,
            "edges_s": edges,
            "measured_per_s": per_s(ramped),
            "ideal_per_s": ideal,
            "plain_per_s": per_s(plain),
            "cumulative": [sum(1 for t in ramped if t < b) for b in edges[1:]],
            "allowance": [
                round(ramp.allowance(b), 1) if b <= ramp.duration else None for b in edges[1:]
            ],
        },
        "first_second": {
            "ramped": sum(1 for t in ramped if t < 1.0),
            "plain": sum(1 for t in plain if t < 1.0),
            "allowance": round(ramp.allowance(1.0), 2),
        },
        "ahead": {"max_starts": round(ahead, 2), "at_s": round(ahead_at, 2), "bound": 1},
        "max_behind_starts": round(behind, 2),
        "during_ramp": {"starts": len(in_ramp), "allowance": ramp.allowance(ramp.duration)},
        "last_start_after_end_s": round(ramped[-1] - ramp.duration, 3),
        "plain_all_started_s": round(plain[-1], 3),
        "first_start_s": {"ramped": round(ramped[0], 4), "plain": round(plain[0], 4)},
        "groups": groups(in_ramp),
        "per_worker": per_worker(raw, ramp),
    }


def groups(times: list[float], gap: float = 0.02) -> dict[str, Any]:
    """Starts closer than ``gap`` to the one before form a group: how many, how big."""
    found: list[list[float]] = []
    for t in times:
        if found and t - found[-1][-1] < gap:
            found[-1].append(t)
        else:
            found.append([t])
    return {
        "gap_s": gap,
        "count": len(found),
        "median_size": median(len(g) for g in found) if found else 0,
        "max_size": max((len(g) for g in found), default=0),
        "max_spread_ms": round(max((g[-1] - g[0] for g in found), default=0.0) * 1000, 1),
    }


def per_worker(raw: dict[str, Any], ramp: Curve) -> dict[str, dict[str, Any]]:
    """Per worker: starts during the ramp (beside an equal share of the curve, for
    reference: the workers book from one record, whoever holds the backlog), and in all."""
    starts = raw["starts"]["ramped"]
    workers = raw["settings"]["workers"]
    found: dict[str, dict[str, Any]] = {}
    for name in sorted(set(starts["worker"])):
        mine = [t for t, w in zip(starts["t"], starts["worker"], strict=True) if w == name]
        in_ramp = [t for t in mine if t < ramp.duration]
        found[name] = {
            "during_ramp": len(in_ramp),
            "share_allowance": round(ramp.allowance(ramp.duration) / workers, 1),
            "total": len(mine),
            "plain_total": raw["starts"]["plain"]["worker"].count(name),
        }
    return found


def pairs(edges: list[float]) -> list[tuple[float, float]]:
    return list(itertools.pairwise(edges))


def table(raw: dict[str, Any], found: dict[str, Any]) -> str:
    s, first, ahead = raw["settings"], found["first_second"], found["ahead"]
    rows = [
        ("starts in the first second", first["ramped"], first["plain"],
         f"curve {first['allowance']:g}"),
        ("starts during the ramp", found["during_ramp"]["starts"], "",
         f"allowance {found['during_ramp']['allowance']:g}"),
        ("furthest ahead of the curve (starts)", ahead["max_starts"], "",
         f"at {ahead['at_s']} s; bound {ahead['bound']}"),
        ("furthest behind the curve (starts)", found["max_behind_starts"], "", ""),
        ("last start after the ramp's end, s", found["last_start_after_end_s"], "", ""),
        ("every task started by, s", round(raw["starts"]["ramped"]["t"][-1], 2),
         found["plain_all_started_s"], ""),
    ]  # fmt: skip
    for name, w in found["per_worker"].items():
        rows.append(
            (f"{name}: starts during the ramp / in all", f"{w['during_ramp']} / {w['total']}",
             w["plain_total"], f"an equal share would be {w['share_allowance']:g}")
        )  # fmt: skip
    lines = [
        f"{s['workers']} workers x {s['concurrency']}, {s['tasks']} tasks each resume, "
        f"ramp {s['ramp_s']:g} s to {s['peak_per_s']:g}/s, booked from one store record",
        f"{'figure':<42}  {'ramped':>12}  {'plain':>8}  ideal / note",
    ]
    lines += [f"{a:<42}  {b!s:>12}  {c!s:>8}  {d}" for a, b, c, d in rows]
    c = raw["conditions"]
    lines.append(f"{c['cpus']} CPUs, load {c['load_before']} -> {c['load_after']}, "
                 f"{c['elapsed_s']} s; celery {c['celery']}")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--peak", type=float, default=40.0, help="pause_ramp_peak, tasks/s")
    parser.add_argument("--ramp", type=float, default=20.0, help="the ramp, seconds")
    parser.add_argument("--tasks", type=int, default=600, help="the backlog of each resume")
    parser.add_argument("--task-seconds", type=float, default=0.01, help="each task's work")
    parser.add_argument("--bin", type=float, default=0.5, help="bin width, seconds")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--plot", type=Path, help="draw the figure to this PNG (matplotlib)")
    parser.add_argument("--from", dest="source", type=Path, help="a saved JSON object")
    args = parser.parse_args()
    raise_on_sigterm()
    if args.source:
        raw = json.loads(args.source.read_text())
    else:
        if args.plot:
            from bench.ramp_plot import pyplot

            pyplot()  # fail before the run, not after it, if matplotlib is missing
        raw = run(workers=args.workers, concurrency=args.concurrency, peak=args.peak,
                  seconds=args.ramp, tasks=args.tasks, task_s=args.task_seconds)  # fmt: skip
        kept = Path(tempfile.gettempdir()) / "celery-pause-ramp-bench.json"
        kept.write_text(json.dumps(raw))
        log(f"every start kept in {kept} (--from redraws it)")
    found = analyse(raw, args.bin)
    if args.plot:
        from bench.ramp_plot import plot

        plot(raw, found, args.plot)
        log(f"figure written to {args.plot}")
    if args.json:
        summary = {k: v for k, v in found.items() if k != "bins"}
        out = {**summary, "bins": found["bins"], **raw}
        # One line per key: readable, and the lists of starts stay compact.
        print(
            "{\n" + ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}" for k, v in out.items()) + "\n}"
        )
    else:
        print(table(raw, found))


if __name__ == "__main__":
    main()
