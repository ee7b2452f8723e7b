"""``GET /metrics`` of ``pause serve``: the backlog an autoscaler should scale on.

Messages wait in real Redis and RabbitMQ queues that no worker consumes; the metrics say how
many wait and how many of them could run.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import celery_pause
from support.admin import AUTH, admin_server
from support.harness import Cluster, wait_for
from support.webclient import call, metric


@pytest.fixture
def admin(cluster: Cluster) -> Iterator[str]:
    with admin_server(cluster.app) as url:
        yield url


def backlog(admin: str, queue: str) -> tuple[float | None, float | None, float | None]:
    text = call(f"{admin}/metrics", headers=AUTH).body.decode()
    return (
        metric(text, "celery_pause_backlog", queue=queue),
        metric(text, "celery_pause_backlog_runnable", queue=queue),
        metric(text, "celery_pause_backlog_paused", queue=queue),
    )


def test_a_paused_queue_counts_no_runnable_backlog(cluster: Cluster, admin: str) -> None:
    # Given a backlog in two queues of the app, and no worker consuming them
    emails, reports = cluster.queue("emails"), cluster.queue("reports")
    cluster.app.amqp.queues.select_add(emails)
    cluster.app.amqp.queues.select_add(reports)
    for _ in range(5):
        cluster.send("e", queue=emails)
    for _ in range(3):
        cluster.send("r", queue=reports)
    wait_for(lambda: backlog(admin, reports)[0] == 3, timeout=10, what="the backlog counted")

    # When one queue is paused whole, and one task type of the other
    celery_pause.pause(cluster.app, queues=[emails])
    celery_pause.pause(cluster.app, queues=[reports], tasks=["proj.reports.*"])

    # Then the paused queue's backlog waits but cannot run ...
    assert backlog(admin, emails) == (5.0, 0.0, 1.0)
    # ... and a queue paused for some task names only counts whole (the broker cannot tell
    # which task a message is)
    assert backlog(admin, reports) == (3.0, 3.0, 0.0)

    # When the queue resumes, Then its backlog can run again
    celery_pause.resume(cluster.app, queues=[emails])
    assert backlog(admin, emails) == (5.0, 5.0, 0.0)


def test_the_backlog_metrics_need_the_token(cluster: Cluster, admin: str) -> None:
    # When /metrics is scraped without the token, or with a wrong one, Then it is refused
    assert call(f"{admin}/metrics").status == 401
    assert call(f"{admin}/metrics", headers={"Authorization": "Bearer wrong"}).status == 401
    # And with it, it answers in Prometheus's text format
    reply = call(f"{admin}/metrics", headers=AUTH)
    assert reply.status == 200 and "celery_pause_backlog_held" in reply.body.decode()
