"""A rate limit whose start times a worker spends late, or the store forgets: each start at its
own time, whatever the stalls and whatever the store loses.

Four prefork workers on the Redis broker share ``10/s``. One worker's main process is stopped
(SIGSTOP) for 0.5-0.8 s every 3 s, as a loaded host, a long GC pause or a slow store call
would stall it; or the store forgets every record while the rate is fully used. No 1 s window
may then hold more than the rate plus two starts (the rate plus one, and one for the fault).
"""

from __future__ import annotations

import math
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import redis

import celery_pause
from celery_pause.stores import store_for
from support.harness import REDIS_BROKER, Cluster, Worker, wait_for
from support.observe import most_within

RATE = 10.0
MOST = int(RATE) + 2
"""The most starts any 1 s window may hold under these faults."""
THAWED = 0.15
"""Seconds after a thaw in which the stalled worker may start at most two tasks."""


@pytest.fixture
def rate_cluster(redis_url: str, tmp_path: Path) -> Iterator[Cluster]:
    cluster = Cluster(broker=REDIS_BROKER, tmp=tmp_path, pause_worker_ttl=6.0)
    yield cluster
    cluster.close()


def fully_used(cluster: Cluster) -> list[Worker]:
    """Four workers under a limit of :data:`RATE`, with a backlog that outlasts the test,
    once the limit runs it."""
    workers = [cluster.worker(f"w{i}", concurrency=2) for i in range(4)]
    result = celery_pause.throttle(cluster.app, rate=RATE, reason="provider allows 10/s")
    for worker in workers:
        worker.wait_applied(result.generation)
    for i in range(300):
        cluster.send(f"r{i}")
    wait_for(lambda: len(cluster.records()) >= 15, timeout=30, what="the limit to run")
    return workers


def until(moment: float) -> None:
    """Wait (polling) until ``time.time()`` reaches ``moment``."""
    wait_for(lambda: time.time() >= moment, timeout=moment - time.time() + 5, what="the time")


def stall(worker: Worker, seconds: float) -> float:
    """Stop ``worker``'s main process (its consumer loop and store thread) for ``seconds``;
    when it went on again."""
    assert worker.proc is not None
    os.kill(worker.proc.pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)  # the length of the fault, not a synchronisation
    finally:
        os.kill(worker.proc.pid, signal.SIGCONT)
    return time.time()


def starts(cluster: Cluster, since: float, end: float, worker: Worker | None = None) -> list[float]:
    """When the tasks started in ``[since, end)`` (of ``worker`` only, if given), in order."""
    return sorted(
        r["started"]
        for r in cluster.records()
        if since <= r["started"] < end and (worker is None or r["worker"] == worker.hostname)
    )


def started_by(cluster: Cluster, worker: Worker, since: float) -> None:
    """Wait for ``worker``'s next start after ``since`` (it has a quarter of the rate, but a
    loaded host may leave it out for a while: the stall must follow one of its starts); the
    starts of each worker meanwhile if it never comes."""
    try:
        wait_for(partial(starts, cluster, since, math.inf, worker), timeout=20, what="a start")
    except AssertionError as exc:
        each = Counter(r["worker"] for r in cluster.records() if r["started"] >= since)
        raise AssertionError(f"{exc}; meanwhile each worker started {dict(each)}") from None


def test_a_worker_stalled_again_and_again_never_bunches_its_starts(rate_cluster: Cluster) -> None:
    # Given four workers running a backlog at 10/s
    cluster = rate_cluster
    stalled = fully_used(cluster)[0]

    # When one worker's main process is stopped for 0.5-0.8 s every 3 s, four times, each
    # time just after it started a task (so it holds the rest of its run)
    faults = random.Random(35)
    began = time.time()
    thaws = []
    for turn in range(4):
        until(began + 1 + 3 * turn)
        started_by(cluster, stalled, since=time.time())
        thaws.append(stall(stalled, faults.uniform(0.5, 0.8)))
    ended = thaws[-1] + 1.5
    until(ended)

    # Then no 1 s window held more than the rate plus two starts
    every = starts(cluster, began, ended)
    mine = starts(cluster, began, ended, stalled)
    bursts = [sum(1 for t in mine if thaw <= t <= thaw + THAWED) for thaw in thaws]
    assert most_within(every) <= MOST, f"{most_within(every)} starts in 1 s"
    # ... after each thaw the stalled worker started at most two at once, not its booked run
    assert max(bursts) <= 2, f"starts within {THAWED} s of each thaw: {bursts}"
    # ... and the cluster kept close to the rate (the stalled worker started again after
    # each stall: each round waited for a start of it)
    pace = len(every) / (ended - began)
    assert pace >= 0.7 * RATE, f"{pace:.1f}/s under the stalls"


def forget_everything(cluster: Cluster) -> None:
    """Delete every key of the cluster's store at once, as a flush or a restart without
    persistence empties it (the broker's keys and the task records stay)."""
    prefix = store_for(cluster.app).prefix
    client = redis.Redis.from_url(cluster.store_url)
    keys = list(client.scan_iter(f"{prefix}:*"))
    assert keys, "the store held nothing"
    client.delete(*keys)


def test_a_store_that_forgets_the_rate_while_it_is_fully_used_keeps_it(
    rate_cluster: Cluster,
) -> None:
    # Given four workers running a backlog at 10/s, start times booked up to 1 s ahead
    cluster = rate_cluster
    fully_used(cluster)
    used = time.time()
    until(used + 3)

    # When the store forgets everything, the limit's records with the rest
    forgot = time.time()
    forget_everything(cluster)
    until(forgot + 5)

    # Then no 1 s window around it held more than the rate plus two starts
    around = starts(cluster, used, forgot + 5)
    assert most_within(around) <= MOST, f"{most_within(around)} starts in 1 s"
    # ... the limit was written back, and the backlog runs on at the rate
    assert celery_pause.status(cluster.app).limits, "the limit was not written back"
    later = starts(cluster, forgot + 2, forgot + 5)
    assert len(later) >= 2 * RATE, f"{len(later)} starts in the 3 s after"
