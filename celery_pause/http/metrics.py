"""Prometheus metrics of one worker's pause (needs ``pip install 'celery-pause[metrics]'``).

Every value is read from the worker at scrape time. Labels are bounded: queue
names the worker consumes, registered task names, hold sources (``manual``, ``unreadable``,
``breaker:<name>``, ``window:<name>``), breaker names, the ids of ramps and limits in force
(only those in force are shown), and fixed words; never task ids or reasons.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from types import ModuleType
from typing import Any

from ..errors import ConfigurationError
from ..model.limit import Limit
from ..model.state import Hold
from ..monitor.view import Observed, WorkerView

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
    """A Prometheus collector reading a worker's monitor: one family per generator."""

    def __init__(self, monitor: Observed) -> None:
        require_prometheus()
        self.monitor = monitor

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        view = self.monitor.view()
        for family in FAMILIES:
            yield from family(view)


def _gauge(name: str, documentation: str, **kwargs: Any) -> Any:
    from prometheus_client.core import GaugeMetricFamily

    return GaugeMetricFamily(name, documentation, **kwargs)


def _counter(name: str, documentation: str, **kwargs: Any) -> Any:
    from prometheus_client.core import CounterMetricFamily

    return CounterMetricFamily(name, documentation, **kwargs)


def _with(family: Any, samples: Iterable[tuple[list[str], float]]) -> Any:
    """``family`` with one sample per ``(labels, value)``."""
    for labels, value in samples:
        family.add_metric(labels, value)
    return family


def _by_source(holds: Iterable[Hold]) -> list[tuple[list[str], float]]:
    """One sample per hold source: how many of ``holds`` it has."""
    return [([source], float(n)) for source, n in sorted(Counter(h.source for h in holds).items())]


def queue_paused(view: WorkerView) -> Iterator[Any]:
    yield _with(
        _gauge(
            "celery_pause_queue_paused",
            "1 while the worker holds the tasks of a queue it consumes, else 0.",
            labels=["queue"],
        ),
        (([q], 1.0 if q in view.paused_queues else 0.0) for q in view.consumed),
    )


def paused(view: WorkerView) -> Iterator[Any]:
    yield _gauge(
        "celery_pause_paused",
        "1 while any queue the worker consumes is paused, else 0.",
        value=1.0 if view.paused else 0.0,
    )
    yield _gauge(
        "celery_pause_paused_seconds",
        "Seconds since the pause the worker applies began (0 while running).",
        value=view.paused_seconds,
    )


def holds(view: WorkerView) -> Iterator[Any]:
    yield _with(
        _gauge("celery_pause_holds", "Live holds in the cluster, by source.", labels=["source"]),
        _by_source(view.holds),
    )


def scheduled(view: WorkerView) -> Iterator[Any]:
    yield _with(
        _gauge(
            "celery_pause_scheduled_holds",
            "Holds that start later (scheduled pauses, each window's next occurrence), by source.",
            labels=["source"],
        ),
        _by_source(view.snapshot.scheduled),
    )
    next_start = min((hold.began for hold in view.snapshot.scheduled), default=None)
    yield _gauge(
        "celery_pause_next_scheduled_start_seconds",
        "Seconds until the next scheduled hold starts (-1 when none is scheduled).",
        value=-1.0 if next_start is None else max(0.0, next_start - view.now),
    )


def transitions(view: WorkerView) -> Iterator[Any]:
    counts = view.transitions
    yield _with(
        _counter(
            "celery_pause_transitions",
            "Changes of the paused scope applied by the worker, to paused or to running.",
            labels=["to"],
        ),
        [(["paused"], float(counts["pause"])), (["running"], float(counts["resume"]))],
    )


def gate(view: WorkerView) -> Iterator[Any]:
    counters = view.snapshot.gate.counters
    yield _with(
        _counter(
            "celery_pause_gate_tasks",
            "Task messages the gate held, released to the pool, returned to the broker, parked,"
            " brought back from parking, fed back for a fair turn, or dropped as a second copy"
            " of a task id.",
            labels=["outcome"],
        ),
        [
            (["held"], float(counters.held)),
            (["released"], float(counters.released)),
            (["returned"], float(counters.returned)),
            (["parked"], float(counters.parked)),
            (["brought_back"], float(counters.brought_back)),
            (["dropped"], float(counters.dropped)),
            (["fed"], float(counters.fed)),
        ],
    )
    yield _gauge(
        "celery_pause_gate_holding",
        "Task messages the gate holds right now.",
        value=float(view.snapshot.gate.held),
    )
    yield _with(
        _gauge(
            "celery_pause_held_tasks",
            "Task messages the gate holds right now, by task name.",
            labels=["task"],
        ),
        (([task], float(count)) for task, count in sorted(view.snapshot.gate.held_by_task.items())),
    )


def ramps(view: WorkerView) -> Iterator[Any]:
    yield _gauge(
        "celery_pause_ramp_waiting",
        "Task messages waiting for a ramped resume's start rate, or a limit's permit, right now.",
        value=float(view.snapshot.gate.waiting),
    )
    rising = [(r.source, r.id, r.limit) for r in view.ramps if r.limit is not None]
    progress = _gauge(
        "celery_pause_ramp_progress",
        "How far each ramped resume in force has come, 0 to 1, by source and ramp id.",
        labels=["source", "ramp"],
    )
    yield _with(progress, (([s, i], lim.progress(view.now)) for s, i, lim in rising))
    rate = _gauge(
        "celery_pause_ramp_rate",
        "The cluster's start rate (tasks/s) each ramped resume allows now.",
        labels=["source", "ramp"],
    )
    yield _with(rate, (([s, i], lim.rate_at(view.now)) for s, i, lim in rising))


def limits(view: WorkerView) -> Iterator[Any]:
    limited = [(hold, hold.limit) for hold in view.holds if hold.limit is not None]
    yield _with(
        _gauge(
            "celery_pause_limits", "Limits in force on this worker, by source.", labels=["source"]
        ),
        _by_source([hold for hold, _ in limited]),
    )
    rate = _gauge(
        "celery_pause_limit_rate",
        "Each limit's cluster-wide rate a second, by source, hold id and what it counts"
        " (tasks, or the cost a cost-weighted limit reads).",
        labels=["source", "hold", "counts"],
    )
    yield _with(
        rate,
        (([h.source, h.id, lim.cost or "tasks"], lim.rate) for h, lim in limited if lim.rate),
    )
    concurrency = _gauge(
        "celery_pause_limit_concurrency",
        "Each limit's cluster-wide concurrency, by source and hold id.",
        labels=["source", "hold"],
    )
    yield _with(
        concurrency,
        (([h.source, h.id], float(lim.concurrency)) for h, lim in limited if lim.concurrency),
    )
    yield from adapted(view, limited)


def adapted(view: WorkerView, limits: list[tuple[Hold, Limit]]) -> Iterator[Any]:
    """Each adaptive limit's rate and concurrency now, and its last cut, as this worker
    last read them (a worker that paced none of its tasks has none)."""
    found = view.snapshot.gate.adapted
    current = [(h, *found[h.id]) for h, _ in limits if h.id in found]
    rate = _gauge(
        "celery_pause_limit_adaptive_rate",
        "Each adaptive limit's cluster-wide rate a second now (its ceiling is "
        "celery_pause_limit_rate), by source, hold id and what it counts.",
        labels=["source", "hold", "counts"],
    )
    yield _with(
        rate,
        (([h.source, h.id, lim.cost or "tasks"], lim.rate) for h, lim, _ in current if lim.rate),
    )
    concurrency = _gauge(
        "celery_pause_limit_adaptive_concurrency",
        "Each adaptive limit's cluster-wide concurrency now, by source and hold id.",
        labels=["source", "hold"],
    )
    yield _with(
        concurrency,
        (([h.source, h.id], float(lim.concurrency)) for h, lim, _ in current if lim.concurrency),
    )
    cut_at = _gauge(
        "celery_pause_limit_last_cut_timestamp_seconds",
        "When each adaptive limit was last cut (store time, Unix seconds), by source and hold id.",
        labels=["source", "hold"],
    )
    yield _with(cut_at, (([h.source, h.id], cut.at) for h, _, cut in current if cut))
    cuts = _gauge(
        "celery_pause_limit_cuts",
        "How many times each adaptive limit was cut since it was set, by source and hold id.",
        labels=["source", "hold"],
    )
    yield _with(cuts, (([h.source, h.id], float(cut.count)) for h, _, cut in current if cut))


def breakers(view: WorkerView) -> Iterator[Any]:
    yield _with(
        _gauge(
            "celery_pause_breaker_open",
            "1 while a circuit breaker's hold is in place, 0 once it closed.",
            labels=["breaker"],
        ),
        (([name], 1.0 if is_open else 0.0) for name, is_open in view.breakers.items()),
    )


def worker(view: WorkerView) -> Iterator[Any]:
    yield _gauge(
        "celery_pause_generation",
        "Generation of the pause state the worker applied (-1 before the first).",
        value=float(view.generation),
    )
    yield _with(
        _gauge(
            "celery_pause_guaranteed",
            "1 if the worker's pool holds every task of a paused scope, 0 if it cannot "
            "(a third-party pool).",
            labels=["pool"],
        ),
        [([view.snapshot.pool.name], 0.0 if view.snapshot.pool.problem else 1.0)],
    )
    yield _gauge(
        "celery_pause_store_up",
        "1 if the worker's last read of the pause store succeeded, else 0.",
        value=1.0 if view.snapshot.store_ok else 0.0,
    )


FAMILIES: tuple[Callable[[WorkerView], Iterator[Any]], ...] = (
    queue_paused,
    paused,
    holds,
    scheduled,
    transitions,
    gate,
    ramps,
    limits,
    breakers,
    worker,
)
"""The metric families, in the order they are served."""


def render(monitor: Observed) -> tuple[bytes, str]:
    """The worker's metrics in the Prometheus text format, and its content type."""
    prometheus_client = require_prometheus()
    registry = prometheus_client.CollectorRegistry(auto_describe=False)
    registry.register(PauseCollector(monitor))
    return prometheus_client.generate_latest(registry), prometheus_client.CONTENT_TYPE_LATEST
