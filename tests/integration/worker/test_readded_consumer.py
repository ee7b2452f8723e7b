"""A consumer an operator adds to a paused queue (``celery control add_consumer``, Flower's
"add consumer"): the gate still holds its tasks, and ``pause status`` says the worker fetches
them again, which Flower's "Active queues" column no longer shows."""

from __future__ import annotations

import time

import celery_pause
from support.cli import pause, status_doc
from support.harness import Cluster, wait_for


def test_a_consumer_added_while_paused_is_shown_and_its_tasks_held(cluster: Cluster) -> None:
    # Given a worker whose queue is paused and confirmed
    worker = cluster.worker("w1")
    worker.wait_applied()
    celery_pause.pause(cluster.app, wait=True, timeout=20)
    paused_at = time.time()
    assert _readded(cluster) == [], "nothing was added yet"

    # When an operator adds a consumer for the paused queue, and tasks are sent to it
    replies = cluster.app.control.add_consumer(
        cluster.queue(), destination=[worker.hostname], reply=True, timeout=5
    )
    assert replies, "the worker did not answer add_consumer"
    sent = [cluster.send(f"t{i}") for i in range(5)]

    # Then pause status names the queue it consumes again, the tasks are held, none started
    wait_for(lambda: _readded(cluster) == [cluster.queue()], timeout=15, what="readded queue")
    text = pause(cluster, "status").stdout
    assert f"consumes paused {cluster.queue()} (consumer added)" in text, text
    wait_for(lambda: worker.wait_applied().held == 5, timeout=15, what="the tasks held")
    assert not cluster.started_between(paused_at, time.time())

    # When resumed, Then every task runs once and nothing is shown as added any more
    cluster.resume_and_check(sent, paused_at)
    wait_for(lambda: _readded(cluster) == [], timeout=15, what="no readded queue")


def _readded(cluster: Cluster) -> list[str]:
    (worker,) = status_doc(cluster)["workers"]
    queues: list[str] = worker["readded_queues"]
    return queues
