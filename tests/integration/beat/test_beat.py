"""``celery beat`` while paused, with a real beat process and a real worker.

A one-second periodic entry (``tick``) feeds the worker's queue. Under a ``skip`` hold
beat sends nothing and the resume brings no burst; under ``queue`` (the default) the
runs pile up and start all at once on resume. Each test counts the starts in the first
second after the resume.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from celery import Celery, beat, signals

import celery_pause
from celery_pause.beat.guard import BeatGuard, SkippedRun
from celery_pause.history import SKIP, HistoryEntry, history
from support.harness import REDIS_STORE, Beat, Cluster, free_port, wait_for
from support.proj import make_app
from support.redis_server import RedisServer

BEAT = {"test_beat_every": 1.0}
PAUSED_RUNS = 5
"""Runs of ``tick`` that fall due while paused."""


def start_beat(redis_cluster: Cluster) -> Beat:
    """A worker and beat, once beat's ticks run."""
    worker = redis_cluster.worker("w1", extra=BEAT)
    worker.wait_applied()
    beat = redis_cluster.beat(extra=BEAT)
    redis_cluster.wait_records(2, timeout=30)
    return beat


def first_second(redis_cluster: Cluster, resumed_at: float) -> int:
    """The starts in the first second after ``resumed_at`` (waits for that second to pass)."""
    wait_for(lambda: time.time() > resumed_at + 1.2, timeout=5, what="a second after resume")
    return len([r for r in redis_cluster.records() if resumed_at <= r["started"] < resumed_at + 1])


def skip_entry(redis_cluster: Cluster, hold_id: str) -> HistoryEntry | None:
    return next(
        (e for e in history(redis_cluster.app) if e.action == SKIP and e.holds == (hold_id,)), None
    )


def test_skip_sends_nothing_while_paused_and_resume_brings_no_burst(redis_cluster: Cluster) -> None:
    # Given beat sending "tick" every second into the worker's queue
    beat = start_beat(redis_cluster)

    # When the queue is paused with the beat policy "skip"
    result = celery_pause.pause(
        redis_cluster.app, queues=[redis_cluster.queue()], beat="skip", wait=True
    )
    paused_at = time.time()

    # Then beat skips each run, logging it, ...
    wait_for(
        lambda: beat.log_count("beat skipped tick") >= PAUSED_RUNS,
        timeout=PAUSED_RUNS + 10,
        what=f"beat to skip {PAUSED_RUNS} runs",
    )
    resumed_at = time.time()
    celery_pause.resume(redis_cluster.app, queues=[redis_cluster.queue()])

    # ... nothing started during the pause, ...
    assert not redis_cluster.started_between(paused_at, resumed_at)
    # ... the resume brings no burst: at most a run sent before beat saw the pause
    # (it reads every poll interval) and the next regular one, ...
    assert first_second(redis_cluster, resumed_at) <= 2
    # ... and the schedule simply continues
    wait_for(
        lambda: len(redis_cluster.started_between(resumed_at, float("inf"))) >= 3,
        timeout=10,
        what="ticks to run again after the resume",
    )

    # And the history records how many runs of each entry beat skipped under the hold
    entry = wait_for(
        lambda: skip_entry(redis_cluster, result.hold.id),
        timeout=10,
        what="the skip in the history",
    )
    assert entry.skipped is not None and entry.skipped["tick"] >= PAUSED_RUNS
    assert entry.queues == [redis_cluster.queue()] and entry.source == "manual"


def test_queue_keeps_sending_and_resume_starts_the_runs_at_once(redis_cluster: Cluster) -> None:
    # Given beat sending "tick" every second into the worker's queue
    beat = start_beat(redis_cluster)

    # When the queue is paused with the default beat policy ("queue")
    celery_pause.pause(redis_cluster.app, queues=[redis_cluster.queue()], wait=True)
    paused_at = time.time()
    sent = beat.log_count("Sending due task tick")

    # Then beat keeps sending, the worker starts none of them, ...
    wait_for(
        lambda: beat.log_count("Sending due task tick") >= sent + PAUSED_RUNS,
        timeout=PAUSED_RUNS + 10,
        what=f"beat to send {PAUSED_RUNS} runs",
    )
    resumed_at = time.time()
    celery_pause.resume(redis_cluster.app, queues=[redis_cluster.queue()])
    assert not redis_cluster.started_between(paused_at, resumed_at)
    assert beat.log_count("beat skipped") == 0

    # ... and the resume starts them all at once
    assert first_second(redis_cluster, resumed_at) >= PAUSED_RUNS - 1


def test_skip_works_with_redbeat_as_the_user_runs_it(redis_cluster: Cluster) -> None:
    # Given beat run with redbeat's scheduler (-S), its entries in Redis
    settings = {
        **BEAT,
        "redbeat_redis_url": REDIS_STORE,
        "redbeat_key_prefix": f"celery-pause-test:{redis_cluster.namespace}:redbeat:",
    }
    worker = redis_cluster.worker("w1", extra=settings)
    worker.wait_applied()
    beat = redis_cluster.beat(extra=settings, args=("-S", "redbeat.RedBeatScheduler"))
    redis_cluster.wait_records(2, timeout=30)
    assert beat.log_count("(RedBeatScheduler)") == 1

    # When the queue is paused with "skip", Then beat skips the runs and nothing starts
    celery_pause.pause(redis_cluster.app, queues=[redis_cluster.queue()], beat="skip", wait=True)
    paused_at = time.time()
    wait_for(lambda: beat.log_count("beat skipped tick") >= 3, timeout=15, what="redbeat to skip")
    resumed_at = time.time()
    celery_pause.resume(redis_cluster.app, queues=[redis_cluster.queue()])
    assert not redis_cluster.started_between(paused_at, resumed_at)

    # And after the resume no burst, and the schedule continues
    assert first_second(redis_cluster, resumed_at) <= 2
    wait_for(
        lambda: len(redis_cluster.started_between(resumed_at, float("inf"))) >= 3,
        timeout=10,
        what="ticks to run again after the resume",
    )


# -- any scheduler class, and a store beat cannot read ---------------------------------------
class RecordingScheduler(beat.Scheduler):
    """Sends the way redbeat does, through ``apply_async(advance=True)``; records each run
    sent instead of publishing it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.sent: list[str] = []
        self.advanced: list[str] = []
        super().__init__(*args, **kwargs)

    def reserve(self, entry: Any) -> Any:
        self.advanced.append(entry.name)
        return super().reserve(entry)

    def apply_async(self, entry: Any, producer: Any = None, advance: bool = True, **kw: Any) -> Any:
        if advance:
            self.reserve(entry)
        self.sent.append(entry.name)
        return None


@contextmanager
def beat_service(app: Celery) -> Iterator[RecordingScheduler]:
    """A beat ``Service`` of ``app`` with the recording scheduler, after ``beat_init``."""
    service = beat.Service(app, scheduler_cls=RecordingScheduler)
    scheduler = service.scheduler
    signals.beat_init.send(sender=service)
    try:
        yield scheduler
    finally:
        scheduler.close()


def test_any_scheduler_class_skips_through_apply_async_and_follows_a_resume(
    redis_cluster: Cluster,
) -> None:
    # Given a beat service with a scheduler that sends through apply_async, like redbeat
    app = make_app(
        namespace=redis_cluster.namespace,
        broker=redis_cluster.broker,
        store=redis_cluster.store_url,
        **BEAT,
    )
    with beat_service(app) as scheduler:
        tick = scheduler.schedule["tick"]
        assert isinstance(getattr(scheduler, "celery_pause", None), BeatGuard)

        # When the queue of its entry is paused with the beat policy "skip"
        celery_pause.pause(app, queues=[redis_cluster.queue()], beat="skip", notify=False)

        # Then within one poll interval a due run is skipped, and the entry advances as if sent
        wait_for(
            lambda: isinstance(scheduler.apply_async(tick), SkippedRun),
            timeout=redis_cluster.poll_interval + 1,
            what="beat to see the pause",
        )
        scheduler.sent.clear()
        scheduler.advanced.clear()
        assert isinstance(scheduler.apply_async(tick), SkippedRun)
        assert scheduler.apply_entry(tick) is None
        assert scheduler.sent == [] and scheduler.advanced == ["tick"]

        # When resumed, within one poll interval runs are sent again
        celery_pause.resume(app, queues=[redis_cluster.queue()], notify=False)
        wait_for(
            lambda: scheduler.apply_async(tick) is None and scheduler.sent,
            timeout=redis_cluster.poll_interval + 1,
            what="beat to see the resume",
        )


def test_beat_keeps_the_last_state_read_while_the_store_is_down(
    redis_url: str, tmp_path: Path
) -> None:
    if not RedisServer.available():
        pytest.skip("redis-server is not installed")
    # Given beat whose store never answered: it sends every run
    unreachable = f"redis://127.0.0.1:{free_port()}/0"
    cluster = Cluster(broker=redis_url, tmp=tmp_path, store=unreachable, **BEAT)
    app = make_app(namespace=cluster.namespace, broker=redis_url, store=unreachable, **BEAT)
    try:
        with beat_service(app) as scheduler:
            scheduler.apply_async(scheduler.schedule["tick"])
            assert scheduler.sent == ["tick"]
    finally:
        cluster.close()

    # Given beat that read a "skip" pause, and then its store goes away
    with RedisServer() as server:
        app = make_app(namespace=cluster.namespace, broker=redis_url, store=server.url(), **BEAT)
        celery_pause.pause(app, queues=[cluster.queue()], beat="skip", notify=False)
        with beat_service(app) as scheduler:
            tick = scheduler.schedule["tick"]
            assert isinstance(scheduler.apply_async(tick), SkippedRun)
            server.__exit__(None, None, None)
            guard: BeatGuard = scheduler.celery_pause
            wait_for(lambda: not guard.watch.store_ok, timeout=10, what="the store to fail")

            # Then beat keeps skipping as the last state it read says
            assert isinstance(scheduler.apply_async(tick), SkippedRun)
            assert scheduler.sent == []


def test_a_window_with_the_skip_policy_makes_beat_skip(redis_cluster: Cluster) -> None:
    # Given a window on the queue that is always in force (back-to-back 2 s occurrences)
    window = {"name": "always", "schedule": 2, "duration": 2, "beat": "skip"}
    app = make_app(
        namespace=redis_cluster.namespace,
        broker=redis_cluster.broker,
        store=redis_cluster.store_url,
        pause_windows=[{**window, "queues": [redis_cluster.queue()]}],
        **BEAT,
    )
    with beat_service(app) as scheduler:
        # When its entry falls due, Then beat skips it, under the window's hold
        skipped = scheduler.apply_async(scheduler.schedule["tick"])
        assert isinstance(skipped, SkippedRun) and skipped.hold.source == "window:always"
        assert scheduler.sent == []
