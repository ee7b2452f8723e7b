"""The worker's /healthz, /readyz and /metrics, its logs and long-pause warnings."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from datetime import datetime
from itertools import pairwise
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import celery_pause
from celery_pause.model.adaptive import DECREASE, adapt_key, overload
from celery_pause.model.state import format_time
from celery_pause.settings import DEFAULTS
from celery_pause.stores import store_for
from support.harness import REDIS_BROKER, Cluster, Worker, wait_for
from support.proj import RECORD_TASK
from support.webclient import call, metric, probe_url, refuses_connections

PEAK_DEFAULT = DEFAULTS["pause_ramp_peak"]
WARNING = re.compile(r"WARNING/MainProcess\] celery-pause: .* paused for ")


@pytest.fixture
def probed_cluster(redis_url: str, tmp_path: Path) -> Iterator[Cluster]:
    """A Redis cluster whose workers serve probes on a free port and warn after 1 s."""
    cluster = Cluster(
        broker=REDIS_BROKER,
        tmp=tmp_path,
        pause_http_port=0,
        pause_warn_after=1.0,
        pause_warn_every=2.0,
    )
    yield cluster
    cluster.close()


def logged_at(line: str) -> float:
    """The time stamp Celery's log format puts at the start of ``line``."""
    stamp = re.match(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})", line)
    assert stamp, line
    return datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()


def metrics_of(base: str) -> str:
    reply = call(base + "/metrics")
    assert reply.status == 200, reply.body
    assert reply.headers["Content-Type"].startswith("text/plain")
    return reply.body.decode()


def log_lines(worker: Worker, pattern: str | re.Pattern[str]) -> list[str]:
    text = worker.log.read_text(errors="replace")
    return [line for line in text.splitlines() if re.search(pattern, line)]


@pytest.mark.parametrize("pool", ["prefork", "gevent", "eventlet"])
def test_probes_metrics_and_logs_follow_a_pause(probed_cluster: Cluster, pool: str) -> None:
    # Given a running worker serving its probes (from a greenlet on the green pools)
    worker = probed_cluster.worker("w1", pool=pool)
    worker.wait_applied()
    base = probe_url(worker)
    queue = probed_cluster.queue()
    health = call(base + "/healthz")
    assert (health.status, health.json()["alive"], health.json()["paused"]) == (200, True, False)
    ready = call(base + "/readyz")
    assert (ready.status, ready.json()) == (
        200,
        {"ready": True, "paused_queues": [], "pool": pool, "pause_guaranteed": True},
    )
    text = metrics_of(base)
    assert metric(text, "celery_pause_queue_paused", queue=queue) == 0
    assert metric(text, "celery_pause_paused") == 0
    assert metric(text, "celery_pause_transitions_total", to="paused") == 0

    # When it is paused while one task runs and more wait in its prefetch buffer
    sent = [probed_cluster.send("long", 1.5)]
    probed_cluster.wait_records(1)
    sent += [probed_cluster.send(f"t{i}", 0.0) for i in range(6)]
    result = celery_pause.pause(
        probed_cluster.app, reason="db migration", by="alice@ops", wait=True, timeout=30
    )

    # Then it is alive but not ready, and says why, since when and by whom
    health = call(base + "/healthz")
    assert (health.status, health.json()["alive"], health.json()["paused"]) == (200, True, True)
    ready = call(base + "/readyz")
    assert ready.status == 503
    doc = ready.json()
    assert doc["ready"] is False
    assert doc["reason"] == "db migration"
    assert doc["paused_by"] == "alice@ops"
    assert doc["since"] == format_time(result.hold.paused_at)
    assert doc["paused_queues"] == [queue]
    assert [h["id"] for h in doc["holds"]] == [result.hold.id]

    # ... and its metrics say paused, with the prefetched tasks held by the gate
    def paused_metrics() -> str | None:
        text = metrics_of(base)
        return text if (metric(text, "celery_pause_gate_holding") or 0) >= 1 else None

    text = wait_for(paused_metrics, timeout=30, what="the gate to hold prefetched tasks")
    assert metric(text, "celery_pause_queue_paused", queue=queue) == 1
    assert metric(text, "celery_pause_paused") == 1
    assert metric(text, "celery_pause_generation") == result.generation
    assert metric(text, "celery_pause_holds", source="manual") == 1
    assert metric(text, "celery_pause_transitions_total", to="paused") == 1
    assert metric(text, "celery_pause_transitions_total", to="running") == 0
    held = metric(text, "celery_pause_gate_tasks_total", outcome="held")
    assert held is not None and held >= 1
    assert metric(text, "celery_pause_store_up") == 1

    # ... and after pause_warn_after (1 s) the worker warns, with reason and duration
    # ... and again no sooner than pause_warn_every (2 s) later
    first, second = wait_for(
        lambda: log_lines(worker, WARNING)[:2] if len(log_lines(worker, WARNING)) >= 2 else None,
        timeout=30,
        what="two long-pause warnings",
    )
    assert "db migration" in first and "alice@ops" in first
    assert re.search(r"paused for \d+ seconds? ", first)
    assert logged_at(second) - logged_at(first) >= 1.9
    seconds = wait_for(
        lambda: (v := metric(metrics_of(base), "celery_pause_paused_seconds")) and v >= 1 and v,
        timeout=30,
        what="paused_seconds to pass 1",
    )
    assert seconds >= 1

    # When it is resumed
    celery_pause.resume(probed_cluster.app)
    probed_cluster.wait_records(len(sent))

    # Then it is ready again, every held task was released, none returned
    wait_for(lambda: call(base + "/readyz").status == 200, timeout=30, what="ready again")
    text = metrics_of(base)
    assert metric(text, "celery_pause_queue_paused", queue=queue) == 0
    assert metric(text, "celery_pause_paused_seconds") == 0
    assert metric(text, "celery_pause_transitions_total", to="paused") == 1
    assert metric(text, "celery_pause_transitions_total", to="running") == 1
    released = metric(text, "celery_pause_gate_tasks_total", outcome="released")
    assert released == metric(text, "celery_pause_gate_tasks_total", outcome="held")
    assert metric(text, "celery_pause_gate_tasks_total", outcome="returned") == 0
    assert metric(text, "celery_pause_gate_holding") == 0

    # ... each state change was logged once, and the warnings kept their pace
    assert len(log_lines(worker, rf"generation {result.generation}: paused all queues")) == 1
    assert len(log_lines(worker, r"generation \d+: resumed all queues")) == 1
    warnings = [logged_at(line) for line in log_lines(worker, WARNING)]
    assert all(later - earlier >= 1.9 for earlier, later in pairwise(warnings))

    # When the worker stops, so does its endpoint
    port = int(base.rsplit(":", 1)[1])
    assert worker.stop() == 0
    assert refuses_connections(port)


def test_a_port_in_use_is_logged_and_the_worker_still_pauses(
    redis_url: str, tmp_path: Path
) -> None:
    # Given a port something else listens on
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cluster = Cluster(broker=REDIS_BROKER, tmp=tmp_path, pause_http_port=port)
        try:
            # When a worker is told to serve its probes there
            worker = cluster.worker("w1")
            worker.wait_applied()

            # Then it says so clearly and goes on working: it pauses and resumes
            wait_for(
                lambda: log_lines(worker, rf"cannot serve .*127\.0\.0\.1:{port}.*in use"),
                timeout=30,
                what="the port-in-use error",
            )
            result = celery_pause.pause(cluster.app, wait=True, timeout=30)
            worker.check_alive()
            celery_pause.resume(cluster.app)
            worker.wait_applied(result.generation + 1)
            cluster.send("after")
            cluster.wait_records(1)
        finally:
            cluster.close()


def test_metrics_and_readiness_during_a_ramped_resume(probed_cluster: Cluster) -> None:
    # Given a worker holding a backlog of one task, paused by name
    worker = probed_cluster.worker("w1")
    worker.wait_applied()
    base = probe_url(worker)
    celery_pause.pause(probed_cluster.app, tasks=[RECORD_TASK], wait=True, timeout=20)
    sent = [probed_cluster.send(f"t{i}") for i in range(12)]
    wait_for(lambda: worker.wait_applied().held == 12, timeout=20, what="the backlog held")

    # When it is resumed over a minute
    result = celery_pause.resume(probed_cluster.app, ramp=60)
    (ramp,) = result.ramps

    # Then the worker is ready, and its metrics show the ramp and the tasks waiting for it
    # (the worker learns of the ramp a moment before it moves its held tasks behind it)
    def ramping_metrics() -> str | None:
        text = metrics_of(base)
        ramp_shown = metric(text, "celery_pause_ramp_progress") is not None
        return text if ramp_shown and (metric(text, "celery_pause_ramp_waiting") or 0) else None

    text = wait_for(ramping_metrics, timeout=10, what="the ramp and its waiting tasks")
    labels = {"source": "manual", "ramp": ramp.id}
    assert 0 <= (metric(text, "celery_pause_ramp_progress", **labels) or -1) < 0.5
    assert 0 <= (metric(text, "celery_pause_ramp_rate", **labels) or -1) < PEAK_DEFAULT / 2
    assert (metric(text, "celery_pause_ramp_waiting") or 0) <= 12
    assert metric(text, "celery_pause_gate_holding") == 0
    assert call(base + "/readyz").status == 200

    # And a plain resume after a pause lets the rest run at once, each exactly once
    celery_pause.pause(probed_cluster.app, tasks=[RECORD_TASK], wait=True, timeout=20)
    celery_pause.resume(probed_cluster.app)
    records = probed_cluster.wait_records(len(sent), timeout=20)
    assert sorted(r["id"] for r in records) == sorted(sent)


def test_metrics_show_the_limits_in_force_and_readiness_stays(probed_cluster: Cluster) -> None:
    # Given a worker serving its metrics
    worker = probed_cluster.worker("w1")
    worker.wait_applied()
    base = probe_url(worker)

    # When its queue is throttled to 7/s and 2 at once
    result = celery_pause.throttle(probed_cluster.app, rate="7/s", concurrency=2, wait=True)

    # Then its metrics show the limit, and it stays ready (a limit is no pause)
    def limited() -> str | None:
        text = metrics_of(base)
        return text if metric(text, "celery_pause_limits", source="manual") == 1 else None

    text = wait_for(limited, timeout=10, what="the limit in the metrics")
    labels = {"source": "manual", "hold": result.hold.id}
    assert metric(text, "celery_pause_limit_rate", **labels) == 7.0
    assert metric(text, "celery_pause_limit_concurrency", **labels) == 2.0
    assert call(base + "/readyz").status == 200

    # When it is lifted, Then the metrics no longer show it
    celery_pause.resume(probed_cluster.app)
    wait_for(
        lambda: metric(metrics_of(base), "celery_pause_limit_rate", **labels) is None,
        timeout=10,
        what="the limit to leave the metrics",
    )


def test_metrics_show_an_adaptive_limits_level_and_last_cut(probed_cluster: Cluster) -> None:
    # Given a worker serving its metrics, under an adaptive 50/s and 4 at once
    worker = probed_cluster.worker("w1")
    worker.wait_applied()
    base = probe_url(worker)
    hold = celery_pause.throttle(probed_cluster.app, rate="50/s", concurrency=4, adaptive=True).hold
    labels = {"source": "manual", "hold": hold.id}

    # When a task's overload cuts it
    cut = (
        store_for(probed_cluster.app)
        .update_record(
            adapt_key(hold.id),
            lambda record, now: overload(record, now, why="429", retry_after=None),
        )
        .result
    )
    assert cut is not None

    # Then its metrics show the ceiling, the level now (below it, rising), and the cut
    def cut_shown() -> str | None:
        text = metrics_of(base)
        shown = metric(text, "celery_pause_limit_cuts", **labels) == 1.0
        return text if shown else None

    text = wait_for(cut_shown, timeout=10, what="the cut in the metrics")
    assert metric(text, "celery_pause_limit_rate", counts="tasks", **labels) == 50.0
    rate = metric(text, "celery_pause_limit_adaptive_rate", counts="tasks", **labels)
    assert rate is not None and 50 * DECREASE <= rate < 50.0
    assert metric(text, "celery_pause_limit_adaptive_concurrency", **labels) == 3.0
    assert metric(text, "celery_pause_limit_last_cut_timestamp_seconds", **labels) == cut.at


def series(text: str) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    """Every sample of a Prometheus exposition, by name and labels."""
    return {
        (sample.name, tuple(sorted(sample.labels.items())))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics_stay_bounded_whatever_the_label_values(redis_url: str, tmp_path: Path) -> None:
    cluster = Cluster(
        broker=REDIS_BROKER, tmp=tmp_path, pause_http_port=0, pause_labels={"tenant": "tenant_id"}
    )
    try:
        # Given a worker with one tenant paused and a limit per tenant in force
        worker = cluster.worker("w1")
        worker.wait_applied()
        base = probe_url(worker)
        celery_pause.pause(cluster.app, labels=["tenant=held-one"], wait=True)
        celery_pause.throttle(cluster.app, concurrency=1, per="tenant", wait=True)

        def after(tenants: list[str], held: int) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
            """The worker's series once the paused tenant's ``held`` tasks are held and the
            others' tasks ran."""
            ran = len(cluster.records())
            cluster.send("held", 0.0, kwargs={"tenant_id": "held-one"})
            for tenant in tenants:
                cluster.send(f"t-{tenant}", 0.0, kwargs={"tenant_id": tenant})
            cluster.wait_records(ran + len(tenants))

            def shown() -> str | None:
                text = metrics_of(base)
                count = metric(text, "celery_pause_held_tasks", task=RECORD_TASK)
                return text if count == held else None

            return series(wait_for(shown, timeout=10, what=f"{held} held in the metrics"))

        # When tasks of 3 tenants run, and then of 40 more
        few = after([f"tenant-a{i}" for i in range(3)], held=1)
        many = after([f"tenant-b{i}" for i in range(40)], held=2)

        # Then the 40 tenants added no series, and no series names a tenant
        assert many == few
        assert not [s for s in many if any("tenant-" in value for _, value in s[1])]
        assert not [s for s in many if any("held-one" in value for _, value in s[1])]
    finally:
        cluster.close()
