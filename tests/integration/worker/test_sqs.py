"""The SQS cell: a real worker on SQS (a local moto server), its pause state in Redis.

SQS has no broadcast (no fanout), so Celery starts no remote control on its workers:
pauses reach them through the Redis store's notifications, or its poll.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import celery_pause
from celery_pause.settings import config_for
from support.harness import Cluster, wait_for
from support.moto import AWS_ENV, moto_sqs
from support.observe import stays_quiet
from support.services import require
from support.stores import REDIS_STORE

VISIBILITY = 8
"""The queue's own SQS visibility timeout (seconds): held messages must go back before it."""


@pytest.fixture
def sqs_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    """A private app on a fresh moto SQS server, with one predefined queue of its own."""
    require("Redis", "127.0.0.1", 6379)
    for name, value in AWS_ENV.items():
        monkeypatch.setenv(name, value)
    with moto_sqs(tmp_path / "moto.log") as sqs:
        namespace_queue = f"sqs-{tmp_path.name[-20:]}".replace("_", "-")
        queues = {namespace_queue: sqs.create_queue(namespace_queue, visibility_timeout=VISIBILITY)}
        cluster = Cluster(
            broker=sqs.broker,
            tmp=tmp_path,
            store=REDIS_STORE,
            poll_interval=5.0,
            broker_transport_options=sqs.transport_options(queues),
            worker_prefetch_multiplier=4,
        )
        cluster.sqs_queue = namespace_queue  # type: ignore[attr-defined]
        try:
            yield cluster
        finally:
            cluster.close()


def test_sqs_pause_holds_confirms_and_returns_held_messages_inside_visibility(
    sqs_cluster: Cluster,
) -> None:
    cluster = sqs_cluster
    queue: str = cluster.sqs_queue  # type: ignore[attr-defined]
    # Given a prefork worker on SQS (no broadcast: no remote control) with a backlog, and
    # its queue's own visibility timeout of 8 s (pause_max_hold is bounded to 2 s)
    assert config_for(cluster.app).max_hold == VISIBILITY / 4
    worker = cluster.worker("w1", queues=[queue], environ=AWS_ENV)
    worker.wait_applied(timeout=30)
    assert worker.log_count("pauses arrive by polling the store every 5 s or by the store's") == 1
    sent = [cluster.send(f"t{i}", 0.3, queue=queue) for i in range(16)]
    cluster.wait_records(1, timeout=30)

    # When paused with --wait (poll 5 s: the push comes through the store's notifications)
    started = time.monotonic()
    result = celery_pause.pause(cluster.app, reason="sqs", wait=True, timeout=20)
    confirmed_after = time.monotonic() - started
    paused_since = time.time()

    # Then it is confirmed by the worker well before a poll could have brought it, ...
    assert [w.hostname for w in result.workers] == [worker.hostname]
    assert confirmed_after < 2.5, f"confirmed after {confirmed_after:.2f}s: not pushed"
    # ... nothing starts, and held messages go back to SQS before their visibility timeout
    # runs out (a quarter of it), so SQS never redelivers a message the gate still holds
    wait_for(
        lambda: worker.log_count("held over 2s to the broker"),
        timeout=VISIBILITY,
        what="held messages returned to SQS",
    )
    stays_quiet(cluster, paused_since, VISIBILITY + 2 - (time.time() - paused_since))

    # When resumed, every task runs exactly once (no duplicate from a redelivery)
    cluster.resume_and_check(sent, paused_since)
    stays_quiet_for_duplicates(cluster, len(sent))
    worker.check_alive()


def stays_quiet_for_duplicates(cluster: Cluster, count: int, seconds: float = 1.5) -> None:
    """Watch for ``seconds``: fail if more than ``count`` tasks started (a redelivery)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert len(cluster.records()) == count, "a task ran twice"
        time.sleep(0.1)
