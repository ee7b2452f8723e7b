"""Many workers, measured: status latency, wait overhead and idle store load.

    python -m bench.scale --workers 1000 --json
    python -m bench.scale --sweep 10,100,1000          # how the figures grow
    python -m bench.scale --workers 1000 --store-url db+postgresql+psycopg://root@127.0.0.1/test

Each simulated worker runs the worker's own store thread and report code
(:class:`celery_pause.worker.sync.StoreSync` with a real state and :class:`Gate`), many per
process, against a private ``redis-server`` (or the store URL given). Only the
Celery consumer is left out: a change read from the store is applied at once, as
:class:`ApplyStep` does on a worker with nothing running in scope. Figures:

- ``status_p99_ms``: :func:`celery_pause.status` with every worker live;
- ``wait_overhead_p99_ms``: how long ``pause(wait=True)`` returns after the last
  worker's report of the new generation was written;
- ``idle_store_cmds_per_s_per_worker``: store commands per second per worker while
  nothing changes (Redis ``INFO commandstats``; on PostgreSQL, transactions from
  ``pg_stat_database``, which lag by up to its stats interval).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from typing import Any

from celery import Celery

import celery_pause
from bench.stats import percentile
from bench.targets import SCALE_TARGETS, TARGETS, verdicts
from celery_pause.model.report import WorkerReport
from celery_pause.settings import config_for
from celery_pause.stores import Snapshot, Store, open_store
from celery_pause.worker.gate import Gate
from celery_pause.worker.pools import PREFORK, PoolSupport
from celery_pause.worker.snapshot import WorkerSnapshot
from celery_pause.worker.state import StoreClock, WorkerState
from celery_pause.worker.sync import StoreSync
from support.processes import raise_on_sigterm
from support.redis_server import RedisServer
from support.stores import ForwardingStore

PER_PROCESS = 250
"""Simulated workers per process: their threads share one interpreter, as pool-less workers."""
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
        self.sync = StoreSync(store=self.witness, config=config_for(app), worker=self)

    def start(self) -> None:
        snapshot = self.sync.read_once()
        if snapshot is not None:
            self.deliver(snapshot)
        self.sync.start()

    def snapshot(self) -> WorkerSnapshot:
        return self.state.snapshot()

    def deliver(self, snapshot: Snapshot) -> None:
        delivered = self.state.deliver(snapshot.state, snapshot.now)
        if delivered is not None:
            self.gate.hold_to(delivered.applied.scope)
            self.state.mark_applied(delivered.applied, as_of=delivered.as_of)
            self.sync.publish_now()

    def store_failed(self) -> None:
        self.state.store_failed()

    def return_expired(self) -> None:
        self.gate.return_expired(self.max_hold)

    def pump(self) -> None:
        self.gate.pump()

    def renew(self, until: float) -> None:
        self.gate.renew(until)

    def fence(self) -> None:
        fenced = self.state.fence()
        if fenced is not None:
            self.gate.hold_to(fenced.applied.scope)
            self.state.mark_applied(fenced.applied)


def run_workers(store_url: str, first: int, count: int, ready: Any, commands: Any) -> None:
    """A child process: ``count`` simulated workers until told to stop."""
    app = make_app(store_url)
    # On Redis a store (its own connections) per worker, as on real workers (redis-py 8
    # caps a pool at 100); a SQL database admits a pool per process, not per worker.
    shared = None if store_url.startswith("redis") else open_store(config_for(app))
    workers = [
        SimulatedWorker(app, shared or open_store(config_for(app)), f"sim{first + i}@scale")
        for i in range(count)
    ]
    for worker in workers:
        worker.start()
    ready.put(count)
    while True:
        command, generation = commands.get()
        if command == "stop":
            break
        landed = [w.witness.applied.get(generation) for w in workers]
        ready.put(None if None in landed else max(t for t in landed if t is not None))
    for worker in workers:
        worker.sync.stop()


def measure(workers: int, store_url: str, rounds: int, idle_seconds: float) -> dict[str, Any]:
    app = make_app(store_url)
    context = multiprocessing.get_context("fork")
    ready = context.Queue()
    children = []
    for first in range(0, workers, PER_PROCESS):
        commands = context.Queue()
        count = min(PER_PROCESS, workers - first)
        process = context.Process(
            target=run_workers, args=(store_url, first, count, ready, commands), daemon=True
        )
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
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args()
    raise_on_sigterm()
    counts = [int(n) for n in args.sweep.split(",")] if args.sweep else [args.workers]
    results = []
    for count in counts:
        if args.store_url:
            results.append(measure(count, args.store_url, args.rounds, args.idle))
            continue
        # A connection or two per simulated worker, as many as real workers would open
        with RedisServer(args=("--maxclients", str(2 * count + 100))) as server:
            results.append(measure(count, server.url(), args.rounds, args.idle))
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
