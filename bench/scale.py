"""Many workers, measured: status latency, wait overhead and idle store load.

    python -m bench.scale --workers 1000 --json
    python -m bench.scale --sweep 10,100,1000          # how the figures grow
    python -m bench.scale --workers 1000 --store-url db+postgresql+psycopg://root@127.0.0.1/test
    python -m bench.scale --workers 10000 --mode replayed --rounds 10 --idle 10

Each simulated worker runs the worker's own store thread and report code
(:class:`celery_pause.worker.sync.StoreSync` with a real state and :class:`Gate`), many per
process, against a private ``redis-server`` (or the store URL given). Only the
Celery consumer is left out: a change read from the store is applied at once, as
:class:`ApplyStep` does on a worker with nothing running in scope. ``--mode`` says how:

- ``threads`` (default): each worker's ``StoreSync`` on its own thread, 250 per process;
- ``stepped``: the same calls, one pass of ``StoreSync.run``'s loop at a time
  (:class:`Stepper`), every worker of a process stepped in turn on one thread, 4 processes;
- ``replayed`` (Redis only): no worker code at all. Each replayed worker sends what a
  worker sends, at its cadence and with a random phase: ``GET`` of the state every
  ``pause_poll_interval``, ``HSET`` of a real encoded :class:`WorkerReport` applying the
  generation read (at once on a change, else every ``pause_worker_ttl`` / 3) and ``TIME``
  once a minute; those due within 10 ms share one pipeline. It measures the client side
  (``status()`` and the wait over that many real reports) where thousands of Python
  workers cannot run on two cores. Not simulated: the gate, the lease, the worker's state
  machine. ``step_lag_p99_ms`` tells how late the reads ran against their cadence.

Figures:

- ``status_p99_ms``: :func:`celery_pause.status` with every worker live;
- ``wait_overhead_p99_ms``: how long ``pause(wait=True)`` returns after the last
  worker's report of the new generation was written;
- ``idle_store_cmds_per_s_per_worker``: store commands per second per worker while
  nothing changes (Redis ``INFO commandstats``; on PostgreSQL, transactions from
  ``pg_stat_database``, which lag by up to its stats interval).
"""

from __future__ import annotations

import argparse
import heapq
import json
import logging
import multiprocessing
import os
import queue
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from celery import Celery

import celery_pause
from bench.stats import percentile
from bench.targets import SCALE_TARGETS, TARGETS, verdicts
from celery_pause.model.report import WorkerReport
from celery_pause.model.state import PauseState
from celery_pause.settings import config_for
from celery_pause.stores import Snapshot, Store, open_store
from celery_pause.worker.gate import Gate
from celery_pause.worker.pools import PREFORK, PoolSupport
from celery_pause.worker.state import StoreClock, WorkerState
from celery_pause.worker.sync import StoreSync
from support.processes import raise_on_sigterm
from support.redis_server import RedisServer
from support.stores import ForwardingStore

PER_PROCESS = 250
"""Simulated workers per process: their threads share one interpreter, as pool-less workers."""
STEPPED_PROCESSES = 4
"""Processes that share the simulated workers in the ``stepped`` and ``replayed`` modes,
one thread each."""
TICK = 0.01
"""Seconds: replayed workers due within one tick send their commands in one pipeline."""
THREADS, STEPPED, REPLAYED = "threads", "stepped", "replayed"
"""How the workers are simulated (``--mode``; see the module's docstring)."""
PREFIX = "celery-pause-scale"


def make_app(store_url: str) -> Celery:
    app = Celery("scale", set_as_current=False)
    app.conf.update(pause_store_url=store_url, pause_key_prefix=PREFIX)
    return app


class Witness(ForwardingStore):
    """The store, passed through, noting when each worker's report of a generation landed."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.applied: dict[int, float] = {}

    def put_worker(self, report: WorkerReport) -> None:
        self.inner.put_worker(report)
        if report.status == "applied":
            self.applied.setdefault(report.generation, time.time())


class SimulatedWorker:
    """One worker's store thread, state and gate, applying each change at once."""

    def __init__(self, app: Celery, store: Store, hostname: str) -> None:
        self.hostname = hostname
        clock = StoreClock()
        self.gate = Gate(
            lambda request: None, lambda request: "default", hostname=hostname, clock=clock.now
        )
        self.state = WorkerState(
            hostname=hostname, pool=PoolSupport(PREFORK), gate=self.gate, clock=clock
        )
        self.witness = Witness(store)
        self.max_hold = config_for(app).max_hold
        self.sync = StoreSync(
            store=self.witness,
            config=config_for(app),
            worker=self,
            state=self.state,
            renew=self.gate.renew,
            pace=lambda: None,  # no limit in force: nothing to pace (and no store I/O)
        )

    def start(self) -> None:
        snapshot = self.sync.read_once()
        if snapshot is not None:
            self.deliver(snapshot)
        self.sync.start()

    def deliver(self, snapshot: Snapshot) -> None:
        delivered = self.state.deliver(snapshot.state, snapshot.now)
        if delivered is not None:
            self.gate.hold_to(delivered.applied.scope)
            self.state.mark_applied(delivered.applied, as_of=delivered.as_of)
            self.sync.publish_now()

    def return_expired(self) -> None:
        self.gate.return_expired(self.max_hold)

    def pump(self) -> None:
        self.gate.pump()

    def fence(self) -> None:
        fenced = self.state.fence()
        if fenced is not None:
            self.gate.hold_to(fenced.applied.scope)
            self.state.mark_applied(fenced.applied)


class Stepper:
    """Runs one simulated worker's store thread a step at a time, on a thread shared with
    other workers: each step is one pass of :meth:`StoreSync.run`'s loop (the same calls,
    so the same store commands), and returns when the next one is due."""

    def __init__(self, worker: SimulatedWorker) -> None:
        self.worker = worker
        self.next_read = 0.0

    def step(self) -> float:
        """One pass of the store thread's loop; seconds until the next (its wait)."""
        sync = self.worker.sync
        try:
            if sync._read_requested or time.monotonic() >= self.next_read:
                sync._read_requested = False
                sync._read()
                self.next_read = time.monotonic() + sync._read_interval()
            if time.monotonic() >= sync._lease_end:
                sync._lease_end = float("inf")
                self.worker.fence()
            sync._publish(self.worker.snapshot())
            snapshot = self.worker.snapshot()
            sync._maybe_return_expired(snapshot)
            timeout = sync._timeout(snapshot, self.next_read)
        except Exception:
            logging.getLogger(__name__).exception("a simulated store thread failed")
            self.next_read = time.monotonic() + sync.config.poll_interval
            timeout = sync.config.poll_interval
        sync._wake.clear()  # a change it applied was published in this very step
        return max(0.0, timeout)


def run_workers(
    store_url: str, first: int, count: int, ready: Any, commands: Any, stepped: bool
) -> None:
    """A child process: ``count`` simulated workers until told to stop, each on its own
    thread, or (``stepped``) all stepped in turn on this one."""
    app = make_app(store_url)
    # On Redis a store (its own connections) per worker, as on real workers (redis-py 8
    # caps a pool at 100); a SQL database admits a pool per process, not per worker.
    shared = None if store_url.startswith("redis") else open_store(config_for(app))
    workers = [
        SimulatedWorker(app, shared or open_store(config_for(app)), f"sim{first + i}@scale")
        for i in range(count)
    ]
    if not stepped:
        for worker in workers:
            worker.start()
        ready.put(count)
        while answer(commands, ready, workers):
            pass
        for worker in workers:
            worker.sync.stop()
        return
    # Workers of a real cluster start at different moments: each one's first pass falls
    # at random within a polling interval, so their reads and reports spread out.
    for worker in workers:  # register and read once, as a worker does before its thread
        snapshot = worker.sync.read_once()
        if snapshot is not None:
            worker.deliver(snapshot)
    interval = config_for(app).poll_interval
    began = time.monotonic()
    due = [(began + random.uniform(0, interval), i, Stepper(w)) for i, w in enumerate(workers)]
    heapq.heapify(due)
    ready.put(count)
    lags: list[float] = []
    while True:
        now = time.monotonic()
        while due and due[0][0] <= now:
            at, i, stepper = heapq.heappop(due)
            lags.append(time.monotonic() - at)
            heapq.heappush(due, (time.monotonic() + stepper.step(), i, stepper))
            now = time.monotonic()
        try:
            command = commands.get(timeout=max(0.0, due[0][0] - time.monotonic()))
        except queue.Empty:
            continue
        if command[0] == "lag":
            ready.put(lags)
            lags = []
        elif not answer(commands, ready, workers, command):
            break


@dataclass
class Replayed:
    """One replayed worker: the generation it applied and when its report of each
    generation landed."""

    hostname: str
    generation: int = -1
    paused: tuple[str, ...] | None = None
    as_of: float = 0.0
    applied: dict[int, float] = field(default_factory=dict)


READ, REPORT, CLOCK = 0, 1, 2
"""What a replayed worker is due to do: read the state, write its report, read the clock."""


def run_replayed(store_url: str, first: int, count: int, ready: Any, commands: Any) -> None:
    """A child process: ``count`` replayed workers until told to stop. Each sends a real
    worker's store commands at its cadence: ``GET`` of the state every polling interval,
    ``HSET`` of its report (a real :class:`WorkerReport` applying the generation read) at
    once when the generation changes and every ``pause_worker_ttl`` / 3 otherwise, and
    ``TIME`` once a minute; those due within a tick go in one pipeline."""
    import redis

    config = config_for(make_app(store_url))
    client = redis.Redis.from_url(store_url)
    state_key, workers_key = f"{PREFIX}:state", f"{PREFIX}:workers"
    seconds, micros = client.time()
    offset = seconds + micros / 1e6 - time.monotonic()  # the store's clock, followed locally
    every = {READ: config.poll_interval, REPORT: config.worker_ttl / 3, CLOCK: 60.0}
    workers = [Replayed(f"sim{first + i}@scale") for i in range(count)]
    began = time.monotonic()
    # Workers of a real cluster start at different moments: random phases.
    due = [
        (began + random.uniform(0, period), i, kind)
        for i in range(count)
        for kind, period in every.items()
    ]
    heapq.heapify(due)
    decoded: dict[bytes | None, PauseState] = {}
    lags: list[float] = []
    ready.put(count)
    while True:
        now = time.monotonic()
        todo: dict[int, list[int]] = {READ: [], REPORT: [], CLOCK: []}
        while due and due[0][0] <= now:
            at, i, kind = heapq.heappop(due)
            todo[kind].append(i)
            heapq.heappush(due, (now + every[kind], i, kind))
            if kind == READ:
                lags.append(now - at)
        if todo[READ] or todo[CLOCK]:
            pipe = client.pipeline(transaction=False)
            for _ in todo[READ]:
                pipe.get(state_key)
            for _ in todo[CLOCK]:
                pipe.time()
            replies = pipe.execute()
            store_now = time.monotonic() + offset
            for i, raw in zip(todo[READ], replies, strict=False):
                state = decoded.get(raw) or decoded.setdefault(raw, PauseState.decode(raw))
                worker = workers[i]
                worker.as_of = store_now
                if state.generation != worker.generation:
                    worker.generation = state.generation
                    queues = state.paused(store_now).names()
                    worker.paused = None if queues is None else tuple(queues)
                    todo[REPORT].append(i)  # a change is reported at once
        if todo[REPORT]:
            store_now = time.monotonic() + offset
            pipe = client.pipeline(transaction=False)
            for i in set(todo[REPORT]):
                worker = workers[i]
                report = WorkerReport(
                    hostname=worker.hostname,
                    pid=os.getpid(),
                    status="applied",
                    generation=worker.generation,
                    paused=worker.paused,
                    seen=store_now,
                    pool="prefork",
                    as_of=worker.as_of,
                )
                pipe.hset(workers_key, worker.hostname, report.encode())
            pipe.execute()
            landed = time.time()
            for i in todo[REPORT]:
                workers[i].applied.setdefault(workers[i].generation, landed)
        wake = max(due[0][0], now + TICK)  # those due within a tick go together
        try:
            command = commands.get(timeout=max(0.0, wake - time.monotonic()))
        except queue.Empty:
            continue
        if command[0] == "lag":
            ready.put(lags)
            lags = []
            continue
        if command[0] == "stop":
            break
        landed_at = [w.applied.get(command[1]) for w in workers]
        ready.put(None if None in landed_at else max(t for t in landed_at if t is not None))
    client.close()


def answer(commands: Any, ready: Any, workers: list[SimulatedWorker], command: Any = None) -> bool:
    """Answer one command from the parent (read now unless given); ``False`` on ``stop``."""
    name, generation = command or commands.get()
    if name == "stop":
        return False
    # The caller saw every report in the store; a worker's thread notes it just after its
    # write returned, so one starved of the CPU may note it a moment later.
    deadline = time.monotonic() + 10
    landed = [w.witness.applied.get(generation) for w in workers]
    while None in landed and time.monotonic() < deadline:
        time.sleep(0.01)
        landed = [w.witness.applied.get(generation) for w in workers]
    ready.put(None if None in landed else max(t for t in landed if t is not None))
    return True


def measure(
    workers: int, store_url: str, rounds: int, idle_seconds: float, mode: str = THREADS
) -> dict[str, Any]:
    app = make_app(store_url)
    context = multiprocessing.get_context("fork")
    ready = context.Queue()
    children = []
    stepped = mode != THREADS
    per_process = -(-workers // STEPPED_PROCESSES) if stepped else PER_PROCESS
    for first in range(0, workers, per_process):
        commands = context.Queue()
        count = min(per_process, workers - first)
        target, args = run_workers, (store_url, first, count, ready, commands, mode == STEPPED)
        if mode == REPLAYED:
            target, args = run_replayed, (store_url, first, count, ready, commands)
        process = context.Process(target=target, args=args, daemon=True)
        process.start()
        children.append((process, commands))
    try:
        started = sum(ready.get(timeout=300) for _ in children)
        assert started == workers
        ttl = config_for(app).worker_ttl
        deadline = time.monotonic() + 60
        while len(celery_pause.status(app).workers) < workers:
            assert time.monotonic() < deadline, "not every simulated worker reported"
            time.sleep(0.1)
        if stepped:  # how late the steps run is counted from here on
            for _, commands in children:
                commands.put(("lag", 0))
            for _ in children:
                ready.get(timeout=60)

        status_ms = []
        for _ in range(rounds * 2):
            began = time.perf_counter()
            live = celery_pause.status(app).workers
            status_ms.append((time.perf_counter() - began) * 1000)
            assert len(live) == workers

        overhead_ms = []
        for _ in range(rounds):
            for change in ("pause", "resume"):
                if change == "pause":
                    result = celery_pause.pause(app, wait=True, timeout=60, notify=False)
                    generation = result.generation
                else:
                    generation = celery_pause.resume(app, notify=False).generation
                    celery_pause.api.wait_until_quiet(app, generation, timeout=60)
                returned = time.time()
                for _, commands in children:
                    commands.put(("landed", generation))
                landed = [ready.get(timeout=60) for _ in children]
                assert None not in landed, f"a worker never reported generation {generation}"
                overhead_ms.append((returned - max(landed)) * 1000)

        idle = idle_commands(store_url, workers, idle_seconds)
        lag_ms = None
        if stepped:
            for _, commands in children:
                commands.put(("lag", 0))
            lags = [lag for _ in children for lag in ready.get(timeout=60)]
            lag_ms = round(percentile([lag * 1000 for lag in lags], 99), 1)
    finally:
        for _, commands in children:
            commands.put(("stop", 0))
        for process, _ in children:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
    found: dict[str, Any] = {
        "workers": workers,
        "status_p50_ms": round(percentile(status_ms, 50), 1),
        "status_p99_ms": round(percentile(status_ms, 99), 1),
        "wait_overhead_p50_ms": round(percentile(overhead_ms, 50), 1),
        "wait_overhead_p99_ms": round(percentile(overhead_ms, 99), 1),
        "idle_store_cmds_per_s_per_worker": idle,
        "worker_ttl_s": ttl,
        "rounds": rounds,
        "processes": len(children),
        "mode": mode,
        "step_lag_p99_ms": lag_ms,
    }
    judged = [name for name in SCALE_TARGETS if found[TARGETS[name].figure] is not None]
    return {**found, "verdicts": verdicts(found, judged)}


def idle_commands(store_url: str, workers: int, seconds: float) -> float | None:
    """Store commands per second per worker while nothing changes: Redis commands
    (``INFO commandstats``), or PostgreSQL transactions (``pg_stat_database``)."""
    if store_url.startswith("redis"):
        import redis

        client = redis.Redis.from_url(store_url)

        def calls() -> int:
            stats = client.info("commandstats")
            return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")

    elif store_url.startswith("db+postgresql"):
        import sqlalchemy as sa

        engine = sa.create_engine(store_url.removeprefix("db+"))
        query = sa.text(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database "
            "WHERE datname = current_database()"
        )

        def calls() -> int:
            with engine.connect() as conn:
                conn.execute(sa.text("SELECT pg_stat_clear_snapshot()"))
                return int(conn.execute(query).scalar() or 0)

    else:
        return None
    before = calls()
    time.sleep(seconds)
    return round((calls() - before) / seconds / workers, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=1000)
    parser.add_argument("--sweep", help="comma-separated worker counts, one run each")
    parser.add_argument("--rounds", type=int, default=20, help="pause/resume rounds")
    parser.add_argument("--idle", type=float, default=20.0, help="seconds of idle load")
    parser.add_argument("--store-url", help="a store to use instead of a private redis-server")
    parser.add_argument(
        "--mode",
        choices=(THREADS, STEPPED, REPLAYED),
        default=THREADS,
        help="how the workers are simulated (see the docstring)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args()
    raise_on_sigterm()
    counts = [int(n) for n in args.sweep.split(",")] if args.sweep else [args.workers]
    results = []
    for count in counts:
        if args.store_url:
            results.append(measure(count, args.store_url, args.rounds, args.idle, args.mode))
            continue
        # A connection or two per simulated worker, as many as real workers would open
        with RedisServer(args=("--maxclients", str(2 * count + 100))) as server:
            results.append(measure(count, server.url(), args.rounds, args.idle, args.mode))
        print(json.dumps(results[-1]), file=sys.stderr)
    conditions = {"cpus": os.cpu_count(), "store": (args.store_url or "redis (private)")}
    if args.json:
        out = results[0] if len(results) == 1 else {"runs": results}
        print(json.dumps({**out, "conditions": conditions}, indent=2))
        return
    keys = ("workers", "status_p99_ms", "wait_overhead_p99_ms", "idle_store_cmds_per_s_per_worker")
    print("  ".join(f"{k:>34}" for k in keys))
    for found in results:
        print("  ".join(f"{found[k]!s:>34}" for k in keys))


if __name__ == "__main__":
    main()
