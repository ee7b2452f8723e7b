"""What /metrics serves from a stand-in worker view (needs prometheus_client, the
``metrics`` extra: not in the quick loop)."""

from __future__ import annotations

from support.probes import StandIn, get, view


def test_metrics_count_held_tasks_per_task_name() -> None:
    # Given a worker whose gate holds two tasks of one type and one of another
    monitor = StandIn(view(held=3, held_by_task={"proj.a": 2, "proj.b": 1}))

    # When /metrics is scraped, Then each task name has its count
    body = get(monitor, "/metrics").body
    assert b'celery_pause_held_tasks{task="proj.a"} 2.0' in body
    assert b'celery_pause_held_tasks{task="proj.b"} 1.0' in body
