"""The Redis Cluster store's cost beside one Redis: commands per idle worker, per limited start.

    python -m bench.cluster_cost                 # the figures as a table
    python -m bench.cluster_cost --json          # and the raw counts

For each store in turn, a private ``redis-server`` and then a private Redis Cluster (three
masters, three replicas, on loopback: ``support/redis_cluster.py``), four real prefork
workers of ``support.proj`` (concurrency 2, the default ``pause_poll_interval`` and
``pause_worker_ttl``; the broker is the local Redis, so the store's counters see the
workers' store traffic alone):

- idle: nothing paused, commands per second per worker over ``--idle`` seconds: first on a
  store that never held a pause (its state key missing), and again after the limits below
  were lifted (the state written);
- a rate (``throttle(rate=10/s)`` on a backlog, ``--seconds``), a concurrency limit
  (``concurrency=3``, 120 tasks of 0.2 s) and a limit per tenant (``concurrency=1,
  per="tenant"``, 12 tenants of 10 tasks of 0.1 s): commands per start, everything the
  store answered from the throttle's call to the last start (polls and reports included),
  as ``bench.limits`` counts.

Commands are ``INFO commandstats`` calls: of the server, or summed over the cluster's
masters; ``INFO`` itself (the counting), the replicas' ``REPLCONF`` acknowledgements and the
``TIME`` inside the cluster store's clock script (see :func:`sent`) are left out. A replica's
own counters (the replication stream) are not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import redis

import celery_pause
from bench.world import conditions, log, settle
from support.harness import REDIS_BROKER, Cluster, stop_all, wait_for
from support.processes import raise_on_sigterm
from support.redis_cluster import ClusterSetup
from support.redis_server import RedisServer

WORKERS, CONCURRENCY = 4, 2
LEFT_OUT = ("cmdstat_info", "cmdstat_replconf")


def sent(commands: Counter[str], *, on_cluster: bool) -> int:
    """The commands clients sent: INFO counts a script's own calls too, and on a cluster the
    state's clock is ``EVAL`` of a script calling ``TIME`` (on one Redis, ``TIME`` is sent as
    it is), so there each ``TIME`` is left out."""
    return commands.total() - (commands["time"] if on_cluster else 0)


def counted(clients: list[redis.Redis]) -> Counter[str]:
    """Commands the servers answered so far, by name, the counting and replication left out."""
    total: Counter[str] = Counter()
    for client in clients:
        for name, value in client.info("commandstats").items():
            if name not in LEFT_OUT:
                total[name.removeprefix("cmdstat_")] += int(value["calls"])
    return total


def measure(
    url: str,
    servers: list[redis.Redis],
    tmp: Path,
    *,
    idle: float,
    seconds: float,
    on_cluster: bool = False,
) -> dict[str, Any]:
    """Every phase on four workers whose store is ``url``."""
    tmp.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(
        broker=REDIS_BROKER, tmp=tmp, store="", pause_store_url=url, poll_interval=2.0,
        pause_labels={"tenant": "tenant_id"},
    )  # fmt: skip
    try:
        workers = [cluster.worker(f"w{i}", concurrency=CONCURRENCY) for i in range(WORKERS)]
        for worker in workers:
            worker.wait_applied()
        settle(2.0)  # the workers' first reads and reports are behind them

        log(f"idle, {idle:g} s")
        quiet, idle_rate = idle_cost(servers, idle, on_cluster=on_cluster)

        phases = {}
        log(f"throttle --rate 10/s, {seconds:g} s of backlog")
        phases["rate"] = limited(
            cluster, servers, int(10 * seconds), 0.0, on_cluster=on_cluster, rate=10
        )
        log("throttle --concurrency 3, 120 tasks of 0.2 s")
        phases["concurrency"] = limited(
            cluster, servers, 120, 0.2, on_cluster=on_cluster, concurrency=3
        )
        log("throttle --concurrency 1 --per tenant, 12 tenants x 10 tasks of 0.1 s")
        phases["per_tenant"] = limited(
            cluster, servers, 120, 0.1, on_cluster=on_cluster, concurrency=1, per="tenant",
            tenants=12,
        )  # fmt: skip
        log(f"idle again (the state written once), {idle:g} s")
        settle(2.0)  # the last starts' slots given back, the resumes read
        quiet_after, after_rate = idle_cost(servers, idle, on_cluster=on_cluster)
        stop_all(workers)
    finally:
        cluster.close()
    return {
        "idle_cmds_per_s_per_worker": round(idle_rate, 3),
        "idle": dict(quiet),
        "idle_after_cmds_per_s_per_worker": round(after_rate, 3),
        "idle_after": dict(quiet_after),
        **phases,
    }


def idle_cost(
    servers: list[redis.Redis], seconds: float, *, on_cluster: bool
) -> tuple[Counter[str], float]:
    """The commands of ``seconds`` of idle workers, and how many a second per worker."""
    before, started = counted(servers), time.monotonic()
    wait_for(lambda: time.monotonic() >= started + seconds, timeout=seconds + 5, what="idle")
    quiet = counted(servers) - before
    return quiet, sent(quiet, on_cluster=on_cluster) / (time.monotonic() - started) / WORKERS


def limited(
    cluster: Cluster,
    servers: list[redis.Redis],
    tasks: int,
    duration: float,
    *,
    on_cluster: bool,
    tenants: int = 0,
    **limit: Any,
) -> dict[str, Any]:
    """Store commands per start of ``tasks`` under ``throttle(**limit)``."""
    before = counted(servers)
    records_before = len(cluster.records())
    hold = celery_pause.throttle(cluster.app, wait=True, **limit).hold
    for i in range(tasks):
        kwargs = {"tenant_id": f"T{i % tenants}"} if tenants else {}
        cluster.send(f"b{i}", duration, kwargs=kwargs)
    cluster.wait_records(records_before + tasks, timeout=300)
    commands = counted(servers) - before
    celery_pause.resume(cluster.app, hold=hold.id)
    per_start = round(sent(commands, on_cluster=on_cluster) / tasks, 2)
    return {"commands": dict(commands), "starts": tasks, "per_start": per_start}


def run(*, idle: float, seconds: float) -> dict[str, Any]:
    load_before, started = os.getloadavg(), time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="celery-pause-cluster-cost-"))
    results: dict[str, Any] = {}
    try:
        with RedisServer() as server:
            log("one redis-server")
            results["redis"] = measure(
                server.url(), [server.client()], tmp / "redis", idle=idle, seconds=seconds
            )
        with ClusterSetup(tmp / "cluster-nodes") as setup:
            log("a Redis Cluster of 3 masters and 3 replicas")
            masters = [setup.node(p) for p in setup.ports if setup.role(p) == "master"]
            results["redis_cluster"] = measure(
                setup.url, masters, tmp / "cluster", idle=idle, seconds=seconds, on_cluster=True
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "settings": {"workers": WORKERS, "concurrency": CONCURRENCY, "idle_s": idle},
        "results": results,
        "conditions": conditions(load_before, started),
    }


def table(raw: dict[str, Any]) -> str:
    rows = [
        ("store", "idle cmds/s/worker", "idle after", "per start: rate", "concurrency", "tenant")
    ]
    for name, figures in raw["results"].items():
        rows.append(
            (
                name,
                f"{figures['idle_cmds_per_s_per_worker']:.3f}",
                f"{figures['idle_after_cmds_per_s_per_worker']:.3f}",
                *(f"{figures[p]['per_start']:.2f}" for p in ("rate", "concurrency", "per_tenant")),
            )
        )
    return "\n".join("".join(cell.ljust(22) for cell in row).rstrip() for row in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=float, default=30.0, help="seconds of idle load")
    parser.add_argument("--seconds", type=float, default=10.0, help="the rate's backlog (s)")
    parser.add_argument("--json", action="store_true", help="print the raw run")
    args = parser.parse_args()
    raise_on_sigterm()
    raw = run(idle=args.idle, seconds=args.seconds)
    print(json.dumps(raw, indent=1) if args.json else table(raw))
    return 0


if __name__ == "__main__":
    sys.exit(main())
