"""worker-paused / worker-resumed Celery events, seen by a real event receiver."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery import Celery

import celery_pause
from support.harness import Cluster, wait_for


@contextmanager
def receiving(app: Celery) -> Iterator[list[dict[str, Any]]]:
    """Every event on the app's event exchange, captured by ``app.events.Receiver``."""
    events: list[dict[str, Any]] = []
    with app.connection_for_read() as conn:
        receiver = app.events.Receiver(conn, handlers={"*": events.append})
        thread = threading.Thread(
            target=receiver.capture, kwargs={"limit": None, "wakeup": False}, daemon=True
        )
        thread.start()
        try:
            yield events
        finally:
            receiver.should_stop = True
            thread.join(10)


def of_type(events: list[dict[str, Any]], type_: str, hostname: str) -> list[dict[str, Any]]:
    return [e for e in list(events) if e["type"] == type_ and e.get("hostname") == hostname]


def test_pause_and_resume_are_sent_as_celery_events(cluster: Cluster) -> None:
    # Given an event receiver and a worker started with -E, whose heartbeats arrive
    with receiving(cluster.app) as events:
        worker = cluster.worker("w1", args=("-E", "--heartbeat-interval", "1"))
        worker.wait_applied()
        wait_for(
            lambda: of_type(events, "worker-heartbeat", worker.hostname),
            timeout=30,
            what="the receiver to hear the worker",
        )

        # When the cluster is paused, then resumed
        paused = celery_pause.pause(cluster.app, reason="deploy", by="bob@ops", wait=True)
        wait_for(
            lambda: of_type(events, "worker-paused", worker.hostname),
            timeout=30,
            what="a worker-paused event",
        )
        resumed = celery_pause.resume(cluster.app)
        wait_for(
            lambda: of_type(events, "worker-resumed", worker.hostname),
            timeout=30,
            what="a worker-resumed event",
        )

    # Then each carries the generation, the queues and the holds
    [on_pause] = of_type(events, "worker-paused", worker.hostname)
    assert on_pause["pause_generation"] == paused.generation
    assert on_pause["paused_queues"] is None  # every queue
    assert on_pause["previous_paused_queues"] == []
    [hold] = on_pause["pause_holds"]
    assert (hold["id"], hold["reason"], hold["paused_by"]) == (paused.hold.id, "deploy", "bob@ops")
    [on_resume] = of_type(events, "worker-resumed", worker.hostname)
    assert on_resume["pause_generation"] == resumed.generation
    assert on_resume["paused_queues"] == []
    assert on_resume["previous_paused_queues"] is None

    # ... and Celery's own event state (what Flower keeps) files them under the worker
    state = cluster.app.events.State()
    for event in events:
        state.event(event)
    assert state.workers[worker.hostname].pause_generation == resumed.generation


def test_a_change_of_limits_is_sent_as_a_celery_event(redis_cluster: Cluster) -> None:
    # Given an event receiver and a worker started with -E, whose heartbeats arrive
    with receiving(redis_cluster.app) as events:
        worker = redis_cluster.worker("w1", args=("-E", "--heartbeat-interval", "1"))
        worker.wait_applied()
        wait_for(
            lambda: of_type(events, "worker-heartbeat", worker.hostname),
            timeout=30,
            what="the receiver to hear the worker",
        )

        # When a limit is placed, then lifted
        limited = celery_pause.throttle(redis_cluster.app, rate="5/s", wait=True)
        wait_for(
            lambda: of_type(events, "worker-limited", worker.hostname),
            timeout=30,
            what="a worker-limited event",
        )
        celery_pause.resume(redis_cluster.app)
        wait_for(
            lambda: len(of_type(events, "worker-limited", worker.hostname)) == 2,
            timeout=30,
            what="a second worker-limited event",
        )

    # Then each carries the generation and the limits, before and after
    placed, lifted = of_type(events, "worker-limited", worker.hostname)
    assert placed["pause_generation"] == limited.generation
    [hold] = placed["pause_limits"]
    assert (hold["id"], hold["rate"]) == (limited.hold.id, 5.0)
    assert placed["previous_pause_limits"] == []
    assert lifted["pause_limits"] == [] and lifted["previous_pause_limits"] == [hold]
    # ... and no worker-paused event came with them: a limit is no pause
    assert not of_type(events, "worker-paused", worker.hostname)
