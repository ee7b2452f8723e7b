"""Prometheus metrics of one worker's pause (needs ``pip install 'celery-pause[metrics]'``).

Every value is read from the worker at scrape time. Labels are bounded: queue
names the worker consumes, registered task names, hold sources (``manual``, ``unreadable``,
``breaker:<name>``, ``window:<name>``), breaker names, the ids of ramps in force (a ramp
lasts a day at most), and fixed words; never task ids or reasons.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

from ..errors import ConfigurationError
from ..worker.view import Observed

INSTALL_HINT = "pip install 'celery-pause[metrics]'"


def require_prometheus() -> ModuleType:
    """``prometheus_client``, or a :class:`ConfigurationError` with the install hint."""
    try:
        import prometheus_client
    except ImportError:
        raise ConfigurationError(
            f"celery-pause metrics need prometheus_client: {INSTALL_HINT}"
        ) from None
    return prometheus_client


class PauseCollector:
    """A Prometheus collector reading a worker's monitor."""

    def __init__(self, monitor: Observed) -> None:
        require_prometheus()
        self.monitor = monitor

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        view = self.monitor.view()
        queue_paused = GaugeMetricFamily(
            "celery_pause_queue_paused",
            "1 while the worker holds the tasks of a queue it consumes, else 0.",
            labels=["queue"],
        )
        for queue in view.consumed:
            queue_paused.add_metric([queue], 1.0 if queue in view.paused_queues else 0.0)
        yield queue_paused

        yield GaugeMetricFamily(
            "celery_pause_paused",
            "1 while any queue the worker consumes is paused, else 0.",
            value=1.0 if view.paused else 0.0,
        )
        yield GaugeMetricFamily(
            "celery_pause_paused_seconds",
            "Seconds since the pause the worker applies began (0 while running).",
            value=view.paused_seconds,
        )

        holds = GaugeMetricFamily(
            "celery_pause_holds", "Live holds in the cluster, by source.", labels=["source"]
        )
        by_source: dict[str, int] = {}
        for hold in view.holds:
            by_source[hold.source] = by_source.get(hold.source, 0) + 1
        for source, count in sorted(by_source.items()):
            holds.add_metric([source], float(count))
        yield holds

        scheduled = GaugeMetricFamily(
            "celery_pause_scheduled_holds",
            "Holds that start later (scheduled pauses, each window's next occurrence), by source.",
            labels=["source"],
        )
        by_source = {}
        for hold in view.scheduled:
            by_source[hold.source] = by_source.get(hold.source, 0) + 1
        for source, count in sorted(by_source.items()):
            scheduled.add_metric([source], float(count))
        yield scheduled
        next_start = min((hold.began for hold in view.scheduled), default=None)
        yield GaugeMetricFamily(
            "celery_pause_next_scheduled_start_seconds",
            "Seconds until the next scheduled hold starts (-1 when none is scheduled).",
            value=-1.0 if next_start is None else max(0.0, next_start - view.now),
        )

        transitions = CounterMetricFamily(
            "celery_pause_transitions",
            "Changes of the paused scope applied by the worker, to paused or to running.",
            labels=["to"],
        )
        transitions.add_metric(["paused"], float(view.transitions["pause"]))
        transitions.add_metric(["running"], float(view.transitions["resume"]))
        yield transitions

        gate = CounterMetricFamily(
            "celery_pause_gate_tasks",
            "Task messages the gate held, released to the pool, or returned to the broker.",
            labels=["outcome"],
        )
        gate.add_metric(["held"], float(view.counters.held))
        gate.add_metric(["released"], float(view.counters.released))
        gate.add_metric(["returned"], float(view.counters.returned))
        yield gate
        yield GaugeMetricFamily(
            "celery_pause_gate_holding",
            "Task messages the gate holds right now.",
            value=float(view.held),
        )
        by_task = GaugeMetricFamily(
            "celery_pause_held_tasks",
            "Task messages the gate holds right now, by task name.",
            labels=["task"],
        )
        for task, count in sorted(view.held_by_task.items()):
            by_task.add_metric([task], float(count))
        yield by_task

        yield GaugeMetricFamily(
            "celery_pause_ramp_waiting",
            "Task messages waiting for a ramped resume's start rate right now.",
            value=float(view.ramping),
        )
        progress = GaugeMetricFamily(
            "celery_pause_ramp_progress",
            "How far each ramped resume in force has come, 0 to 1, by source and ramp id.",
            labels=["source", "ramp"],
        )
        rate = GaugeMetricFamily(
            "celery_pause_ramp_rate",
            "The cluster's start rate (tasks/s) each ramped resume allows now.",
            labels=["source", "ramp"],
        )
        for ramp in view.ramps:
            progress.add_metric([ramp.source, ramp.id], ramp.progress(view.now))
            rate.add_metric([ramp.source, ramp.id], ramp.rate(view.now))
        yield progress
        yield rate

        breakers = GaugeMetricFamily(
            "celery_pause_breaker_open",
            "1 while a circuit breaker's hold is in place, 0 once it closed.",
            labels=["breaker"],
        )
        for name, is_open in view.breakers.items():
            breakers.add_metric([name], 1.0 if is_open else 0.0)
        yield breakers

        yield GaugeMetricFamily(
            "celery_pause_generation",
            "Generation of the pause state the worker applied (-1 before the first).",
            value=float(view.generation),
        )
        guaranteed = GaugeMetricFamily(
            "celery_pause_guaranteed",
            "1 if the worker's pool holds every task of a paused scope, 0 if it cannot "
            "(a third-party pool).",
            labels=["pool"],
        )
        guaranteed.add_metric([view.pool], 0.0 if view.pool_problem else 1.0)
        yield guaranteed
        yield GaugeMetricFamily(
            "celery_pause_store_up",
            "1 if the worker's last read of the pause store succeeded, else 0.",
            value=1.0 if view.store_ok else 0.0,
        )


def render(monitor: Observed) -> tuple[bytes, str]:
    """The worker's metrics in the Prometheus text format, and its content type."""
    prometheus_client = require_prometheus()
    registry = prometheus_client.CollectorRegistry(auto_describe=False)
    registry.register(PauseCollector(monitor))
    return prometheus_client.generate_latest(registry), prometheus_client.CONTENT_TYPE_LATEST
