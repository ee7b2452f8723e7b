"""The measurements, each next to its baseline, on a :class:`~bench.world.World`.

Latencies are measured from task starts: every task records ``time.time()`` when
its body starts (same host, same clock). A worker has *stopped* when no task
starts on it any more; its pause latency is the time from the call returning to
its last task start (0 if none started after the call returned).
"""

from __future__ import annotations

import math
import os
import random
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import psutil

import celery_pause
from celery_pause import api
from support.harness import Worker, wait_for

from .stats import median, percentile
from .world import Start, World

BACKLOG_HIGH = 600


@dataclass
class Latencies:
    """Samples in milliseconds, one per worker per round."""

    samples: list[float] = field(default_factory=list)
    failures: int = 0

    def add(self, seconds: float) -> None:
        self.samples.append(seconds * 1000)

    def p(self, pct: float) -> float:
        return percentile(self.samples, pct)

    def summary(self) -> dict[str, float | int]:
        return {
            "p50_ms": round(self.p(50), 2),
            "p99_ms": round(self.p(99), 2),
            "max_ms": round(max(self.samples, default=math.nan), 2),
            "samples": len(self.samples),
            "failures": self.failures,
        }


# -- throughput -------------------------------------------------------------------------------
def throughput(
    world: World,
    *,
    tasks: int,
    rounds: int,
    concurrency: int,
    control: bool = False,
    pool: str = "prefork",
    pairs: int = 2,
) -> dict[str, object]:
    """Tasks per second with and without the pause step, side by side.

    Both workers drain identical backlogs at the same time, so load from outside
    the benchmark slows both alike; each rate counts only the window in which
    both were draining. Which worker is told to start first alternates per round.

    Where a worker runs, not its code, moves its rate by several per cent: with
    the two workers free to move over two cores, pair medians of A/A controls
    spread by ±5 % (which worker shared its core with Redis, for how long). So
    both workers share one core, where the scheduler gives them equal time, and
    Redis and this process get the other. The rounds are shared by ``pairs``
    fresh pairs, started step-first and none-first in turn (the worker started
    first drains about 3 % slower); the ratio is the median of each pair's
    rounds, averaged geometrically over the pairs, so the start order cancels.
    The CPU time each worker (main process and pool) spent per task is measured too.

    ``control=True`` starts the "step" worker without the step: an A/A control,
    whose ratio shows what the method itself reads when both sides are equal.
    """
    rates: dict[str, list[float]] = {"step": [], "none": []}
    by_pair: list[dict[str, Any]] = []
    cpu = {"step": 0.0, "none": 0.0}
    drained = 0
    discarded = 0
    per_pair = rounds // pairs
    with _workers_apart(world) as workers_core:
        for index in range(pairs):
            first = "step" if index % 2 == 0 else "none"
            pair = _start_pair(
                world, first, index, concurrency, with_step=not control, pool=pool,
                core=workers_core,
            )  # fmt: skip
            found_ratios: list[float] = []
            try:
                number = 0
                while len(found_ratios) < per_pair and number < 2 * per_pair:
                    before = {arm: cpu_seconds(worker) for arm, worker in pair}
                    told = pair if number % 2 else pair[::-1]
                    found = _drain_together(world, told, tasks, f"{pool}-{index}-{number}")
                    for arm, worker in pair:
                        cpu[arm] += cpu_seconds(worker) - before[arm]
                    drained += tasks
                    number += 1
                    if found is None:
                        discarded += 1
                        continue
                    for arm, rate in found.items():
                        rates[arm].append(rate)
                    found_ratios.append(found["step"] / found["none"])
            finally:
                world.stop_workers([worker for _, worker in pair])
            by_pair.append(
                {
                    "started_first": first,
                    "ratio": round(median(found_ratios), 4),
                    "ratios": [round(r, 4) for r in found_ratios],
                }
            )
    medians = [found["ratio"] for found in by_pair if found["ratios"]]  # none: all discarded
    ratios = [s / n for s, n in zip(rates["step"], rates["none"], strict=True)]
    return {
        "ratio": round(math.prod(medians) ** (1 / len(medians)), 4),
        "ratio_pooled_median": round(median(ratios), 4),
        "ratio_of_totals": round(sum(rates["step"]) / sum(rates["none"]), 4),
        "ratios": [round(r, 4) for r in ratios],
        "pairs": by_pair,
        "workers_core": workers_core,
        "step_tasks_per_s": [round(r, 1) for r in rates["step"]],
        "none_tasks_per_s": [round(r, 1) for r in rates["none"]],
        "cpu_ms_per_task": {arm: round(spent / drained * 1000, 4) for arm, spent in cpu.items()},
        "rounds_discarded": discarded,
        "tasks_per_round": tasks,
        "concurrency": concurrency,
        "pool": pool,
        "control": control,
    }


@contextmanager
def _workers_apart(world: World) -> Iterator[int | None]:
    """Keep this process and the Redis servers on the first core the run may use, and
    yield the second for the workers (``None``, and nothing pinned, with one core)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        yield None
        return
    servers = [psutil.Process(server.pid()) for server in (world.broker, world.store)]
    for process in (psutil.Process(), *servers):
        process.cpu_affinity(cores[:1])
    try:
        yield cores[1]
    finally:
        for process in (psutil.Process(), *servers):
            process.cpu_affinity(cores)


def _start_pair(
    world: World,
    first: str,
    index: int,
    concurrency: int,
    *,
    with_step: bool,
    pool: str,
    core: int | None,
) -> list[tuple[str, Worker]]:
    """Start pair ``index``'s workers, ``first`` first, on ``core`` if given;
    ``[("step", w), ("none", w)]``."""
    started = {
        arm: world.start_workers(
            [f"tp-{pool}-{arm}-{index}"], queue=world.queue(f"idle-{arm}"),
            concurrency=concurrency, pool=pool, install=with_step and arm == "step",
            prefix=["taskset", "-c", str(core)] if core is not None else [],
        )[0]
        for arm in ((first, "none") if first == "step" else (first, "step"))
    }  # fmt: skip
    return [("step", started["step"]), ("none", started["none"])]


def cpu_seconds(worker: Worker) -> float:
    """User and system CPU time of a worker's main process and its pool processes."""
    assert worker.proc is not None
    main = psutil.Process(worker.proc.pid)
    total = 0.0
    for process in [main, *main.children(recursive=True)]:
        with suppress(psutil.NoSuchProcess):
            times = process.cpu_times()
            total += times.user + times.system
    return total


def cpu_alone(world: World, *, tasks: int, rounds: int) -> dict[str, object]:
    """CPU per task of a worker with the step and one without, each draining alone.

    Two long-lived workers take turns (the order alternates per round): while one
    drains ``tasks`` no-op tasks the other is idle, so neither competes with the
    other for the two cores. Also the CPU the step's worker spent outside its main
    thread (the store thread) while it drained.
    """
    workers = {
        arm: world.start_workers(
            [f"cpu-{arm}"], queue=world.queue(f"idle-cpu-{arm}"), install=arm == "step"
        )[0]
        for arm in ("none", "step")
    }
    per_task: dict[str, list[float]] = {arm: [] for arm in workers}
    rates: dict[str, list[float]] = {arm: [] for arm in workers}
    side_threads = 0.0
    try:
        for number in range(rounds):
            for arm in ("step", "none") if number % 2 else ("none", "step"):
                worker = workers[arm]
                before = cpu_seconds(worker), side_thread_seconds(worker)
                rate = drain_alone(world, worker, world.queue(f"cpu-{arm}-{number}"), tasks)
                per_task[arm].append((cpu_seconds(worker) - before[0]) / tasks * 1000)
                rates[arm].append(rate)
                if arm == "step":
                    side_threads += side_thread_seconds(worker) - before[1]
    finally:
        world.stop_workers(workers.values())
    cpu_ratios = [s / n for s, n in zip(per_task["step"], per_task["none"], strict=True)]
    rate_ratios = [s / n for s, n in zip(rates["step"], rates["none"], strict=True)]
    return {
        "cpu_ratio": round(median(cpu_ratios), 4),
        "rate_ratio": round(median(rate_ratios), 4),
        "cpu_ms_per_task": {arm: round(median(found), 4) for arm, found in per_task.items()},
        "cpu_ratios": [round(r, 4) for r in cpu_ratios],
        "step_side_threads_cpu_s": round(side_threads, 3),
        "tasks_per_round": tasks,
        "rounds": rounds,
    }


def side_thread_seconds(worker: Worker) -> float:
    """CPU time of the worker's main process outside its main thread."""
    assert worker.proc is not None
    main = psutil.Process(worker.proc.pid)
    return sum(t.user_time + t.system_time for t in main.threads() if t.id != main.pid)


def drain_alone(world: World, worker: Worker, queue: str, tasks: int) -> float:
    """Let ``worker`` drain ``tasks`` tasks from a new queue; its rate in tasks per second."""
    world.send(queue, tasks)
    world.new_starts()
    world.app.control.add_consumer(queue, destination=[worker.hostname], reply=False)
    starts: list[float] = []

    def drained() -> bool:
        starts.extend(s.started for s in world.new_starts() if s.queue == queue)
        worker.check_alive()
        return len(starts) >= tasks

    wait_for(drained, timeout=300, what=f"{tasks} tasks on {worker.hostname}", interval=0.05)
    world.app.control.cancel_consumer(queue, destination=[worker.hostname], reply=False)
    return (len(starts) - 1) / (max(starts) - min(starts))


def _drain_together(
    world: World, pair: list[tuple[str, Worker]], tasks: int, tag: str
) -> dict[str, float] | None:
    """Preload ``tasks`` per worker on new queues; both drain at once; rates in the overlap.

    ``None`` when the two drains overlapped for less than half of the shorter one (one
    worker got its ``add_consumer`` late): such a round compares nothing.
    """
    queues = {arm: world.queue(f"tp-{arm}-{tag}") for arm, _ in pair}
    for queue in queues.values():
        world.send(queue, tasks)
    world.new_starts()
    for arm, worker in pair:
        world.app.control.add_consumer(queues[arm], destination=[worker.hostname], reply=False)
    starts: dict[str, list[float]] = {arm: [] for arm in queues}
    arm_of = {queue: arm for arm, queue in queues.items()}

    def drained() -> bool:
        for start in world.new_starts():
            if start.queue in arm_of:
                starts[arm_of[start.queue]].append(start.started)
        for _, worker in pair:
            worker.check_alive()
        return all(len(found) >= tasks for found in starts.values())

    wait_for(drained, timeout=300, what=f"{tasks} tasks on each worker", interval=0.05)
    for arm, worker in pair:
        world.app.control.cancel_consumer(queues[arm], destination=[worker.hostname], reply=False)
    begin = max(min(found) for found in starts.values())
    end = min(max(found) for found in starts.values())
    shortest = min(max(found) - min(found) for found in starts.values())
    if end - begin < shortest / 2:
        return None
    return {
        arm: sum(1 for t in found if begin <= t <= end) / (end - begin)
        for arm, found in starts.items()
    }


# -- pause, resume and broadcast latency ---------------------------------------------------------
class Flow:
    """Keeps every worker of a group starting tasks from one queue, and reads their starts."""

    def __init__(self, world: World, queue: str, workers: Sequence[Worker]) -> None:
        self.world = world
        self.queue = queue
        self.duration = 0.0  # seconds each task works
        self.high = BACKLOG_HIGH
        self.hosts = [w.hostname for w in workers]
        self.workers = workers
        self.starts: list[Start] = []

    def refresh(self) -> None:
        self.starts.extend(s for s in self.world.new_starts() if s.queue == self.queue)

    def flowing_since(self, since: float, per_worker: int = 2, timeout: float = 60) -> None:
        """Wait until every worker started ``per_worker`` tasks after ``since``."""

        def flowing() -> bool:
            self.world.top_up(
                self.queue, low=self.high // 4, high=self.high, duration=self.duration
            )
            self.refresh()
            counts: dict[str, int] = defaultdict(int)
            for start in self.starts:
                if start.started >= since:
                    counts[start.worker] += 1
            for worker in self.workers:
                worker.check_alive()
            return all(counts[h] >= per_worker for h in self.hosts)

        try:
            wait_for(flowing, timeout=timeout, what="every worker to start tasks", interval=0.005)
        except AssertionError:
            late = [h for h in self.hosts if not any(s.worker == h for s in self.starts)]
            raise AssertionError(
                f"no task started since {since:.3f} on {late}; logs in {self.world.tmp}"
            ) from None

    def quiet_since(self, hold: float, timeout: float = 30) -> bool:
        """Wait until no task started for ``hold`` seconds; False on timeout."""
        deadline = time.monotonic() + timeout
        last_count, last_change = self.world.record_count(), time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.01)
            count = self.world.record_count()
            if count != last_count:
                last_count, last_change = count, time.monotonic()
            elif time.monotonic() - last_change >= hold:
                return True
        return False

    def last_start_after(self, moment: float) -> dict[str, float]:
        """Per worker: seconds from ``moment`` to its last task start (0 if none after)."""
        self.refresh()
        last = {host: 0.0 for host in self.hosts}
        for start in self.starts:
            if start.started >= moment and start.worker in last:
                last[start.worker] = max(last[start.worker], start.started - moment)
        return last

    def first_start_after(self, since: float, moment: float) -> dict[str, float]:
        """Per worker: seconds from ``moment`` to its first start after ``since`` (at least 0)."""
        self.refresh()
        first: dict[str, float] = {}
        for start in self.starts:
            if start.started >= since and start.worker in self.hosts:
                delay = max(0.0, start.started - moment)
                first[start.worker] = min(first.get(start.worker, delay), delay)
        return first

    def prime(self) -> float:
        """Top up the backlog and wait until every worker flows; the time flow was checked from."""
        self.world.top_up(self.queue, low=self.high // 2, high=self.high, duration=self.duration)
        since = time.time()
        self.flowing_since(since)
        self.starts = [s for s in self.starts if s.started >= since]
        return since


def pause_round(
    flow: Flow,
    paused: Latencies,
    resumed: Latencies | None,
    *,
    notify: bool = True,
    before: Callable[[], None] | None = None,
) -> None:
    """Pause the flowing queue, wait for quiet, record per-worker latency; resume and record."""
    if before is not None:
        before()
    flow.prime()
    result = celery_pause.pause(flow.world.app, queues=[flow.queue], notify=notify)
    returned = time.time()
    api.wait_until_quiet(flow.world.app, result.generation, timeout=60)
    for seconds in flow.last_start_after(returned).values():
        paused.add(seconds)
    asked = time.time()
    celery_pause.resume(flow.world.app, queues=[flow.queue])
    returned = time.time()
    flow.flowing_since(asked, per_worker=1)
    if resumed is not None:
        first = flow.first_start_after(asked, returned)
        for host in flow.hosts:
            resumed.add(first[host])


def broadcast_round(flow: Flow, stopped: Latencies) -> None:
    """Celery's own ``cancel_consumer`` broadcast, measured the same way, then ``add_consumer``."""
    app = flow.world.app
    flow.prime()
    app.control.cancel_consumer(flow.queue, reply=False)
    returned = time.time()
    if not flow.quiet_since(0.5):
        stopped.failures += 1
    for seconds in flow.last_start_after(returned).values():
        stopped.add(seconds)
    asked = time.time()
    app.control.add_consumer(flow.queue, reply=False)
    flow.flowing_since(asked, per_worker=1)


def latency_rounds(flow: Flow, rounds: int) -> dict[str, Latencies]:
    """Interleaved pause/resume and broadcast rounds."""
    found = {"pause": Latencies(), "resume": Latencies(), "broadcast": Latencies()}
    for _ in range(rounds):
        pause_round(flow, found["pause"], found["resume"])
        broadcast_round(flow, found["broadcast"])
    return found


def fallback_rounds(flow: Flow, rounds: int, poll_interval: float) -> Latencies:
    """Pauses whose push is lost (``notify=False``): workers find them by polling.

    A random delay before each pause spreads it over the polling cycle. Tasks work
    for 20 ms here, so that the backlog outlasts a whole polling interval.
    """
    found = Latencies()
    flow.duration, flow.high = 0.02, int(len(flow.hosts) * (poll_interval + 1) / 0.02)
    for _ in range(rounds):
        pause_round(
            flow,
            found,
            None,
            notify=False,
            before=lambda: time.sleep(random.uniform(0, poll_interval)),
        )
    flow.duration, flow.high = 0.0, BACKLOG_HIGH
    return found


# -- idle store load ------------------------------------------------------------------------------
def idle_store_load(world: World, workers: int, seconds: float) -> dict[str, object]:
    """Commands per second per idle worker on the store server, by command."""
    before = world.store_commands()
    time.sleep(seconds)
    after = world.store_commands()
    calls = {name: after.get(name, 0) - before.get(name, 0) for name in after}
    calls = {name: count for name, count in calls.items() if count}
    total = sum(calls.values())
    return {
        "per_worker_per_s": round(total / seconds / workers, 3),
        "window_s": seconds,
        "workers": workers,
        "calls": calls,
    }
