"""A real Prometheus server scrapes two real workers through a pause, with what ``deploy/``
ships: the scrape configuration (``deploy/prometheus/prometheus.yml``, with its copy of the
labels to celery-exporter's names), the rules (``celery-pause.rules.yml``) and the Grafana
dashboard (``deploy/grafana/celery-pause.json``).

Debian's ``prometheus`` runs the server (CI installs it; a laptop without it skips). The alerts'
``for:`` durations are minutes, so each alert is checked to go *pending*: the server evaluates
the shipped expression as true, for the series docs/operations.rst says.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import celery_pause
from support.harness import ROOT, Cluster, Worker, wait_for
from support.holds import add_breaker_hold
from support.proj import RECORD_TASK
from support.prometheus import PrometheusApi, prometheus_server, require_prometheus
from support.proxy import Proxy, through
from support.stores import REDIS_STORE
from support.webclient import probe_url

DEPLOY = ROOT / "deploy"
JOB = "celery-pause-workers"
PLACEHOLDER = 'targets: ["worker-1:5581", "worker-2:5581"]'
SETTINGS: dict[str, Any] = {
    "pause_http_port": 0,
    "pause_worker_ttl": 2.0,
    "pause_lease": 2.0,
    "pause_store_timeout": 0.5,
}
HELD = 6
DOCUMENTED_FOR = {
    "CeleryPausePausedTooLong": 60,
    "CeleryPauseHeldTasksGrowing": 900,
    "CeleryPauseWorkerFenced": 60,
    "CeleryPauseStoreUnreachable": 60,
    "CeleryPauseWorkerLost": 120,
    "CeleryPauseLimitSaturated": 900,
    "CeleryPauseBreakerOpen": 300,
    "CeleryPauseNotGuaranteed": 300,
}
"""Each alert's ``for:`` in seconds, as the table in docs/operations.rst gives it."""


def target(worker: Worker) -> str:
    """``host:port`` of the worker's endpoint."""
    return probe_url(worker).removeprefix("http://")


def write_config(tmp: Path, targets: list[str]) -> Path:
    """The shipped scrape configuration and rules in ``tmp``, scraping ``targets`` every second."""
    shipped = (DEPLOY / "prometheus" / "prometheus.yml").read_text()
    assert PLACEHOLDER in shipped, "the shipped scrape configuration changed its targets"
    listed = ", ".join(json.dumps(t) for t in targets)
    config = tmp / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
        + shipped.replace(PLACEHOLDER, f"targets: [{listed}]")
    )
    shutil.copy(DEPLOY / "prometheus" / "celery-pause.rules.yml", tmp)
    return config


def value(api: PrometheusApi, expr: str) -> float | None:
    """The value of the one series ``expr`` gives, ``None`` when it gives none."""
    result = api.query(expr)
    assert len(result) <= 1, (expr, result)
    return next(iter(result.values()), None)


def pending(api: PrometheusApi, alert: str, **labels: str) -> dict[str, Any] | None:
    """The active alert ``alert`` with ``labels``, if it is active."""
    for active in api.alerts(alert):
        if all(active["labels"].get(k) == v for k, v in labels.items()):
            return active
    return None


def dashboard_queries() -> list[tuple[str, str]]:
    """``(panel title, expr)`` of every query of the shipped dashboard, for job ``JOB``."""
    dashboard = json.loads((DEPLOY / "grafana" / "celery-pause.json").read_text())
    return [
        (
            panel["title"],
            target["expr"].replace("$job", JOB).replace("$__rate_interval", "1m"),
        )
        for panel in dashboard["panels"]
        for target in panel["targets"]
    ]


@pytest.fixture
def scraped_cluster(redis_url: str, tmp_path: Path) -> Iterator[Cluster]:
    """A Redis cluster whose workers serve /metrics on free ports, with short leases."""
    require_prometheus()
    cluster = Cluster(broker=redis_url, tmp=tmp_path, poll_interval=0.5, **SETTINGS)
    yield cluster
    cluster.close()


def test_a_real_prometheus_evaluates_the_shipped_rules_through_a_pause(
    scraped_cluster: Cluster, tmp_path: Path
) -> None:
    cluster = scraped_cluster
    queue = cluster.queue()
    with Proxy(6379) as proxy:
        # Given two workers, w2 reaching the store through a proxy, scraped every second by
        # Prometheus with the shipped configuration and rules
        w1 = cluster.worker("w1")
        w2 = cluster.worker("w2", store=through(REDIS_STORE, proxy.port))
        w1.wait_applied()
        w2.wait_applied()
        one, two = target(w1), target(w2)
        config = write_config(tmp_path, [one, two])
        with prometheus_server(config, tmp_path / "data") as api:
            wait_for(
                lambda: value(api, "job:celery_pause_workers:count") == 2,
                timeout=30,
                what="the recording rules to count both workers",
            )
            # ... every alert loaded with the for: documented, none active while running
            loaded = {name: api.rule(name)["duration"] for name in DOCUMENTED_FOR}
            assert loaded == DOCUMENTED_FOR
            assert api.get("/api/v1/alerts")["alerts"] == []
            # ... and the queue label copied to celery-exporter's name, the original kept
            copied = api.query(f'celery_pause_queue_paused{{queue_name="{queue}"}}')
            assert sorted(dict(labels)["instance"] for labels in copied) == sorted([one, two])
            assert all(dict(labels)["queue"] == queue for labels in copied)

            # When the task is paused by name (the queue's consumer stays) and tasks arrive
            paused_at = time.time()
            celery_pause.pause(cluster.app, tasks=[RECORD_TASK], wait=True, timeout=30)
            for i in range(HELD):
                cluster.send(f"t{i}")

            # Then Prometheus sees every worker paused and the tasks held, by the copied name too
            wait_for(
                lambda: value(api, "job:celery_pause_gate_holding:sum") == HELD,
                timeout=30,
                what="Prometheus to see the tasks held",
            )
            assert value(api, "job:celery_pause_paused_workers:sum") == 2
            holds = api.query('celery_pause_holds{source="manual"} == 1')
            assert sorted(dict(labels)["instance"] for labels in holds) == sorted([one, two])
            assert value(api, f'sum(celery_pause_held_tasks{{name="{RECORD_TASK}"}})') == HELD
            by_task = f'job_task:celery_pause_held_tasks:sum{{task="{RECORD_TASK}"}}'
            assert value(api, by_task) == HELD
            # ... the held-tasks-growing alert is pending, saying how many more are held
            growing = wait_for(
                lambda: pending(api, "CeleryPauseHeldTasksGrowing", job=JOB),
                timeout=30,
                what="CeleryPauseHeldTasksGrowing to go pending",
            )
            assert growing is not None and growing["state"] == "pending"
            assert float(growing["value"]) > 0
            assert growing["labels"]["severity"] == "warning"
            assert f"held in the gates of {JOB} grew by" in growing["annotations"]["description"]
            # ... and the pause is not an hour old: that alert stays inactive, and its
            # expression with a threshold of 0 s gives the seconds since the pause began
            expr = api.rule("CeleryPausePausedTooLong")["query"]
            assert expr.endswith("> 3600"), expr
            assert pending(api, "CeleryPausePausedTooLong") is None
            seconds = value(api, expr.replace("> 3600", "> 0"))
            assert seconds is not None and 0 < seconds <= time.time() - paused_at + 2
            # ... and every query of the dashboard is valid PromQL, its counts as they are
            for _title, query in dashboard_queries():
                api.query(query)  # a query Prometheus refuses fails here, naming it
            queries = dict(dashboard_queries())
            assert value(api, queries["Tasks held"]) == HELD
            assert value(api, queries["Workers fenced"]) == 0

            # When a circuit breaker's hold is placed
            add_breaker_hold(cluster.app, source="breaker:payments")

            # Then the breaker-open alert goes pending for that breaker
            wait_for(
                lambda: pending(api, "CeleryPauseBreakerOpen", job=JOB, breaker="payments"),
                timeout=30,
                what="CeleryPauseBreakerOpen to go pending",
            )

            # When w2 is cut off from the store past its lease
            proxy.blackhole()

            # Then w2, and only w2, is seen fenced
            fenced = wait_for(
                lambda: pending(api, "CeleryPauseWorkerFenced", instance=two),
                timeout=30,
                what="CeleryPauseWorkerFenced to go pending for w2",
            )
            assert fenced is not None and fenced["labels"]["severity"] == "critical"
            assert pending(api, "CeleryPauseWorkerFenced", instance=one) is None
            wait_for(
                lambda: value(api, "job:celery_pause_fenced_workers:sum") == 1,
                timeout=10,
                what="the recording rule to count w2 fenced",
            )

            # When the store is reachable again, Then the fence ends and so does the alert
            proxy.forward()
            wait_for(
                lambda: not api.alerts("CeleryPauseWorkerFenced"),
                timeout=30,
                what="CeleryPauseWorkerFenced to end once w2 reads the store",
            )

            # When w1 dies (SIGKILL)
            w1.kill()

            # Then its endpoint is lost, and only its
            wait_for(
                lambda: pending(api, "CeleryPauseWorkerLost", job=JOB, instance=one),
                timeout=30,
                what="CeleryPauseWorkerLost to go pending for w1",
            )
            assert pending(api, "CeleryPauseWorkerLost", instance=two) is None
