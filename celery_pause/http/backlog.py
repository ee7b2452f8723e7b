"""The queues' backlog as Prometheus metrics, for autoscalers (``GET /metrics`` of
``pause serve``; needs ``pip install 'celery-pause[metrics]'``).

A paused backlog is no load: an autoscaler that scales on the whole backlog adds workers
that would only hold it. Beside the messages waiting in the broker per queue, this says how
many of them can run: none of a queue paused for every task on every worker, all of any other
(the broker cannot tell which task a waiting message is, so a queue paused for some task names
or some workers counts whole). Labels: the queue names of ``pause status`` (the app's queues and
those a hold or worker names), bounded by the app's configuration; the tasks parked per pause,
and per label value of a pause by label (the 20 values with the most).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..api.document import Overview
from ..model.scope import Target


def backlog_families(view: Overview) -> Iterator[Any]:
    """The metric families of the queues' backlog in ``view``."""
    from prometheus_client.core import GaugeMetricFamily

    paused = view.status.paused
    waiting = GaugeMetricFamily(
        "celery_pause_backlog",
        "Messages waiting in the broker, per queue.",
        labels=["queue"],
    )
    runnable = GaugeMetricFamily(
        "celery_pause_backlog_runnable",
        "Messages waiting in the broker that no pause holds back, per queue.",
        labels=["queue"],
    )
    queue_paused = GaugeMetricFamily(
        "celery_pause_backlog_paused",
        "1 if every task of the queue is paused on every worker, else 0.",
        labels=["queue"],
    )
    for queue, count in sorted(view.depths.items()):
        whole = paused.covers(Target(queue=queue))
        queue_paused.add_metric([queue], 1.0 if whole else 0.0)
        if count is None:  # the broker cannot tell
            continue
        waiting.add_metric([queue], float(count))
        runnable.add_metric([queue], 0.0 if whole else float(count))
    yield waiting
    yield runnable
    yield queue_paused
    yield GaugeMetricFamily(
        "celery_pause_backlog_held",
        "Task messages the live workers hold in their gates (received, not started).",
        value=float(sum(report.held for report in view.status.workers)),
    )
    yield from parked_families(view)


def parked_families(view: Overview) -> Iterator[Any]:
    """The tasks parked on the broker per pause, and per label value of a pause by label
    (the values with the most, as ``pause status`` shows them)."""
    from prometheus_client.core import GaugeMetricFamily

    parked = GaugeMetricFamily(
        "celery_pause_parked",
        "Task messages parked on the broker, per pause in force.",
        labels=["hold"],
    )
    by_value = GaugeMetricFamily(
        "celery_pause_parked_value",
        "Task messages parked on the broker, per pause by label and label value.",
        labels=["hold", "value"],
    )
    for hold, count in sorted(view.parked.items()):
        if count is not None:
            parked.add_metric([hold], float(count))
        for value, tasks in (view.parked_values.get(hold) or {}).items():
            by_value.add_metric([hold, value], float(tasks or 0))
    yield parked
    yield by_value


def render_backlog(view: Overview) -> tuple[bytes, str]:
    """The backlog of ``view`` in Prometheus's text format, and its content type."""
    from .metrics import require_prometheus

    prometheus_client = require_prometheus()

    class Backlog:
        def collect(self) -> Iterator[Any]:
            return backlog_families(view)

    registry = prometheus_client.CollectorRegistry(auto_describe=False)
    registry.register(Backlog())
    return prometheus_client.generate_latest(registry), prometheus_client.CONTENT_TYPE_LATEST
