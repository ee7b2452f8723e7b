"""Scheduled pauses and recurring maintenance windows, on real workers.

Workers learn of a scheduled hold in advance and apply it at its start on the store's
clock, with no command and no broadcast: the poll interval here is the default 2 s, so
a pause landing one poll late would let tasks start well past the margin.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import celery_pause
from celery_pause.history import RESUME, history
from celery_pause.model.scope import Target
from celery_pause.stores import store_for
from support.harness import Cluster, wait_for

POLL = 2.0
MARGIN = 0.4
"""Seconds after a start by which no task of the scope may start any more."""
SKEW = 0.1
"""Seconds by which an end may come early: each process extrapolates the store's clock from
its own reads, so two processes agree on it to a few milliseconds."""


@pytest.fixture
def slow_poll_cluster(redis_url: str, tmp_path: Path) -> Iterator[Cluster]:
    cluster = Cluster(broker=redis_url, tmp=tmp_path, poll_interval=POLL)
    yield cluster
    cluster.close()


def store_now(cluster: Cluster) -> float:
    return store_for(cluster.app).now()


def until(cluster: Cluster, moment: float, what: str) -> None:
    """Wait until the store's clock reaches ``moment``."""
    wait_for(
        lambda: store_now(cluster) >= moment,
        timeout=max(0.0, moment - store_now(cluster)) + 5,
        what=what,
    )


def reports_show(cluster: Cluster, paused: tuple[str, ...], as_of: float, timeout: float) -> None:
    """Wait until every worker reports ``paused`` as the state stood at ``as_of`` or later."""
    hosts = {w.hostname for w in cluster.workers}

    def shown() -> bool:
        reports = [w for w in celery_pause.status(cluster.app).workers if w.hostname in hosts]
        return len(reports) == len(hosts) and all(
            w.paused == paused and w.as_of >= as_of for w in reports
        )

    wait_for(shown, timeout=timeout, what=f"every worker to report {paused or 'nothing'} paused")


def test_a_scheduled_pause_lands_at_its_start_and_lifts_at_its_end_without_a_command(
    slow_poll_cluster: Cluster,
) -> None:
    cluster = slow_poll_cluster
    queue = cluster.queue()
    worker = cluster.worker("w1")
    worker.wait_applied()

    # Given a pause scheduled three seconds ahead for three seconds, with no broadcast
    start = store_now(cluster) + 3.0
    result = celery_pause.pause(
        cluster.app, queues=[queue], start_at=start, resume_after=3.0, notify=False
    )
    end = start + 3.0
    assert (result.hold.start_at, result.hold.resume_at) == (start, end)
    status = celery_pause.status(cluster.app)
    assert not status.paused and [h.id for h in status.scheduled] == [result.hold.id]
    # ... and a backlog of short tasks running across it
    sent = [cluster.send(f"t{i}", 0.1) for i in range(80)]

    # When the start comes, Then every worker applies it at once by itself
    until(cluster, start, "the scheduled start")
    reports_show(cluster, (queue,), start, timeout=POLL * 0.75)
    assert celery_pause.status(cluster.app).paused.covers(Target(queue=queue))

    # When the end comes, Then the tasks flow again by themselves
    until(cluster, end, "the scheduled end")
    reports_show(cluster, (), end, timeout=POLL * 0.75)
    records = cluster.wait_records(len(sent))

    # And nothing started from just after the start until the end, while tasks ran before
    assert not [r for r in records if start + MARGIN <= r["started"] < end - SKEW]
    assert [r for r in records if r["started"] < start]
    assert min(r["started"] for r in records if r["started"] >= end) < end + POLL / 2
    assert sorted(r["id"] for r in records) == sorted(sent)
    assert worker.log_count("pause_refresh") == 0


def test_a_recurring_window_applies_and_lifts_on_every_worker(
    redis_url: str, tmp_path: Path
) -> None:
    # Given a window every 8 s for 3 s on the default queue, and two workers
    name = "eight"
    window = {"name": name, "every": 8, "duration": 3, "queues": ["default"], "reason": "tidy"}
    cluster = Cluster(broker=redis_url, tmp=tmp_path, poll_interval=POLL, test_windows=[window])
    try:
        run_window(cluster, name, cluster.queue())
    finally:
        cluster.close()


def run_window(cluster: Cluster, name: str, queue: str) -> None:
    workers = [cluster.worker("w1"), cluster.worker("w2")]
    for worker in workers:
        worker.wait_applied()
    (upcoming,) = [h for h in celery_pause.status(cluster.app).scheduled if h.window == name]
    start = upcoming.began
    if start - store_now(cluster) < 1.5:  # too close to send a backlog first: take the next
        start += 8
    end = start + 3

    # When tasks are sent just before an occurrence starts
    until(cluster, start - 1.0, "just before the window")
    sent = [cluster.send(f"t{i}", 0.1) for i in range(60)]

    # Then both workers apply it at its start, and lift it at its end, by themselves
    until(cluster, start, "the window's start")
    reports_show(cluster, (queue,), start, timeout=POLL * 0.75)
    status = celery_pause.status(cluster.app)
    assert [h.source for h in status.holds] == [f"window:{name}"]
    until(cluster, end, "the window's end")
    reports_show(cluster, (), end, timeout=POLL * 0.75)
    records = cluster.wait_records(len(sent))
    assert not [r for r in records if start + MARGIN <= r["started"] < end - SKEW]
    assert {r["worker"] for r in records if r["started"] >= end} == {w.hostname for w in workers}

    # When the next occurrence starts, an operator ends it early
    following = start + 8
    until(cluster, following, "the next occurrence")
    reports_show(cluster, (queue,), following, timeout=POLL * 0.75)
    result = celery_pause.resume(cluster.app, hold=f"window:{name}", by="ops")
    assert [h.id for h in result.removed] == [f"window:{name}:{int(following)}"]

    # Then both workers flow again before its end, and the history records who ended it
    reports_show(cluster, (), following, timeout=POLL)
    assert store_now(cluster) < following + 3
    ended = [e for e in history(cluster.app) if e.action == RESUME]
    assert ended and ended[0].source == f"window:{name}" and ended[0].by == "ops"


def test_waiting_on_a_scheduled_pause_waits_for_its_start_then_for_quiet(
    redis_cluster: Cluster,
) -> None:
    # Given a worker running a task that lasts past the scheduled start
    worker = redis_cluster.worker("w1")
    worker.wait_applied()
    redis_cluster.send("long", 3.0)
    redis_cluster.wait_records(1)
    start = store_now(redis_cluster) + 1.5

    # When a pause starting then is asked for with wait=True
    result = celery_pause.pause(
        redis_cluster.app, queues=[redis_cluster.queue()], start_at=start, wait=True, timeout=20
    )
    returned = store_now(redis_cluster)

    # Then it returns after the start, once the long task finished, confirmed by the worker
    finished = redis_cluster.records_client.lrange(redis_cluster.finished_key, 0, -1)
    assert returned >= start and len(finished) == 1
    (confirmed,) = result.workers
    assert confirmed.hostname == worker.hostname and confirmed.as_of >= start
    assert confirmed.paused == (redis_cluster.queue(),)
