"""A pause from a fresh process lands on a SQL store as fast as on Redis: the workers hold
its scope from the announcement, while the process imports SQLAlchemy, connects and
writes (real workers, a real SQL server, a fresh ``python`` process per pause)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from celery_pause.control import ANNOUNCED_FOR
from support.harness import AMQP_BROKER, REDIS_BROKER, ROOT, Cluster, wait_for
from support.stores import MARIADB_STORE, POSTGRESQL_STORE

ANNOUNCE_DELIVERY = 0.1
"""Seconds from the announcement sent to every gate closed, at most (loopback broker, a loaded
machine)."""


def announcements(cluster: Cluster) -> dict[str, object]:
    """Per worker, the scope it holds for pauses announced but not read yet."""
    replies = cluster.app.control.broadcast("pause_state", reply=True, timeout=2)
    return {host: answer.get("announced") for reply in replies for host, answer in reply.items()}


def fresh_pause(cluster: Cluster) -> dict[str, float]:
    """``pause(app, wait=True)`` in a fresh process, its steps timed (``bench.one_pause``)."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.one_pause"],
        env=cluster.env(), cwd=ROOT, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return dict(json.loads(done.stdout.splitlines()[-1]))


@pytest.mark.parametrize(
    ("store", "broker"),
    [(MARIADB_STORE, AMQP_BROKER), (POSTGRESQL_STORE, REDIS_BROKER)],
    ids=["mariadb-rabbitmq", "postgresql-redis"],
)
def test_a_fresh_process_pause_stops_starts_before_its_sql_write(
    tmp_path: Path, store: str, broker: str
) -> None:
    # Given two workers starting 20 ms tasks from a full queue, their state in a SQL store
    cluster = Cluster(broker=broker, tmp=tmp_path, store=store, poll_interval=2.0)
    try:
        workers = [cluster.worker(name, concurrency=2) for name in ("w1", "w2")]
        for worker in workers:
            worker.wait_applied(timeout=60)
        sent = [cluster.send("stream", 0.02) for _ in range(1500)]
        flowing = time.time()
        wait_for(
            lambda: len({r["worker"] for r in cluster.started_between(flowing, 1e12)}) == 2,
            timeout=30,
            what="both workers starting tasks",
        )

        # When a fresh process pauses everything and waits (its first SQL call on the path)
        timings = fresh_pause(cluster)

        # Then the write took long enough for tasks to start meanwhile: the stream was
        # flowing up to the call, and the first SQL call of a process costs tens of ms
        called, announced = timings["called"], timings["announced"]
        written, returned = timings["written"], timings["returned"]
        assert cluster.started_between(called - 0.3, called), "the stream was not flowing"
        assert written - announced > ANNOUNCE_DELIVERY, timings
        # ... yet nothing started from the announcement's delivery on
        late = cluster.started_between(announced + ANNOUNCE_DELIVERY, returned)
        assert not late, f"{len(late)} task(s) started after the announcement: {timings}"
        print(
            f"call to write {1000 * (written - called):.0f} ms, to announcement "
            f"{1000 * (announced - called):.0f} ms; started after the call: "
            f"{len(cluster.started_between(called, returned))}"
        )

        # And the announcement gave way to the hold read (long before it lapses by itself),
        # the pause holds, and every task runs once
        paused_since = time.time()
        for worker in workers:
            worker.wait_applied(int(timings["generation"]))
        wait_for(
            lambda: announcements(cluster) == {w.hostname: [] for w in workers},
            timeout=ANNOUNCED_FOR / 2,
            what="the workers holding the pause read, not its announcement",
        )
        cluster.resume_and_check(sent, paused_since)
    finally:
        cluster.close()
