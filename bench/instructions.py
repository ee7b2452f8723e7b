"""Instructions per task in a worker's main thread, with and without the step, by callgrind.

CPU time on a shared two-core machine moves by several per cent between runs;
instruction counts far less (about 0.3 %). Each worker runs under
``valgrind --tool=callgrind`` with counting off; after a warm-up drain, counting is
switched on in its main process (where every line of celery-pause runs; prefork's
pool processes run none, gevent's and eventlet's tasks run there too) for each drain
of ``tasks`` no-op tasks, then off. The consumer
loop's thread (the gate, the timer) is counted per task; other threads (the step's
store thread) apart.

Under valgrind a drain lasts about 30 times longer, so work done once a second is
counted about 30 times over: the difference is an upper bound.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from support.harness import Worker

from .measure import drain_alone
from .stats import median
from .world import World

WARM_UP = 200


def instructions_per_task(
    world: World, *, tasks: int, rounds: int, pool: str = "prefork", concurrency: int = 1
) -> dict[str, object]:
    """Main-thread instructions per task for a worker with the step and one without.

    The two workers take turns, ``rounds`` drains each (the order alternates); how
    many loop iterations a drain takes varies with timing, so the medians are kept.
    """
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        return {"skipped": "valgrind (callgrind) is not installed"}
    out = Path(tempfile.mkdtemp(prefix="callgrind-", dir=world.tmp))
    workers: dict[str, Worker] = {}
    per_task: dict[str, list[float]] = {"none": [], "step": []}
    side_threads = {"none": 0, "step": 0}
    try:
        for arm in per_task:
            workers[arm] = _start_counted(world, arm, out, pool, concurrency)
            drain_alone(world, workers[arm], world.queue(f"cg-warm-{arm}"), WARM_UP)
        for number in range(rounds):
            for arm in ("step", "none") if number % 2 else ("none", "step"):
                worker = workers[arm]
                assert worker.proc is not None
                _callgrind(worker, "-i", "on")
                drain_alone(world, worker, world.queue(f"cg-{arm}-{number}"), tasks)
                _callgrind(worker, "-i", "off")
                _callgrind(worker, "--dump")
                # One file per thread and dump: "<arm>.<pid>.<dump>-01" is the main thread.
                threads = {
                    path.name.rsplit("-", 1)[1]: _totals(path)
                    for path in out.glob(f"{arm}.{worker.proc.pid}.{number + 1}-*")
                }
                per_task[arm].append(threads.pop("01", 0) / tasks)
                side_threads[arm] += sum(threads.values())
    finally:
        world.stop_workers(workers.values())
    medians = {arm: median(found) for arm, found in per_task.items()}
    ratios = [s / n for s, n in zip(per_task["step"], per_task["none"], strict=True)]
    return {
        "ratio": round(median(ratios), 4),
        "ratios": [round(r, 4) for r in ratios],
        "per_task": {arm: round(value) for arm, value in medians.items()},
        "added_per_task": round(medians["step"] - medians["none"]),
        "side_threads": side_threads,
        "tasks_per_round": tasks,
        "rounds": rounds,
    }


def _start_counted(world: World, arm: str, out: Path, pool: str, concurrency: int) -> Worker:
    """A worker under callgrind, counting nothing until told."""
    prefix = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        "--separate-threads=yes",
        f"--callgrind-out-file={out}/{arm}.%p",
    ]
    return world.start_workers(
        [f"cg-{arm}"],
        queue=world.queue(f"idle-cg-{arm}"),
        install=arm == "step",
        pool=pool,
        concurrency=concurrency,
        prefix=prefix,
        timeout=600,
    )[0]


def _callgrind(worker: Worker, *args: str) -> None:
    assert worker.proc is not None
    subprocess.run(
        ["callgrind_control", *args, str(worker.proc.pid)],
        check=True,
        capture_output=True,
        timeout=60,
    )


def _totals(path: Path) -> int:
    """The instruction total of one callgrind output file (0 if it counted nothing)."""
    for line in path.read_text().splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    return 0
