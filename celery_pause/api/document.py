"""The operator's view of the cluster: one status document for the CLI and the admin API.

:func:`overview` reads everything ``pause status`` shows (holds, workers, queue
depths, breakers, history); :func:`status_json` turns it into the documented
JSON document (schema 2) that ``pause status --json`` prints and ``GET /status``
returns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from celery import Celery

from ..breaker.status import BreakerStatus, breaker_statuses
from ..errors import UnreadableRecord
from ..history import HistoryEntry, history
from ..model.fair import FAIR_REGISTRY, fair_queues
from ..model.parking import REGISTRY, Record, parked_values, parking_queue
from ..model.ramp import ramp_json
from ..model.report import LOST
from ..model.report import PAUSED as WORKER_PAUSED
from ..model.scope import Target, label_names
from ..model.state import Hold, PauseState
from ..model.windows import Window
from ..settings import config_for
from ..stores import Store, store_for
from .depths import queue_depths
from .results import ClusterStatus
from .status import status

JSON_SCHEMA = 2
SHOWN_VALUES = 20
"""The label values of a fair limit or a pause whose waiting tasks status shows (those with
the most)."""
RUNNING = "RUNNING"
PAUSED = "PAUSED"
PARTIAL = "PARTIAL"

Depths = Mapping[str, "int | None"]
DepthReader = Callable[[list[str]], Depths]


@dataclass(frozen=True)
class WindowStatus:
    """A maintenance window with its occurrence in force (if any) and its next one."""

    window: Window
    in_force: Hold | None
    upcoming: Hold | None
    skipped_until: float | None

    @classmethod
    def of(cls, window: Window, state: PauseState, now: float) -> WindowStatus:
        skipped = state.skipped_until(window.name)
        in_force, upcoming = window.current_and_next(skipped, now)
        return cls(window, in_force, upcoming, skipped if skipped and skipped > now else None)

    def to_json(self) -> dict[str, Any]:
        return {
            **self.window.to_json(),
            "in_force": None if self.in_force is None else self.in_force.to_json(),
            "next": None if self.upcoming is None else self.upcoming.to_json(),
            "skipped_until": self.skipped_until,
        }


@dataclass(frozen=True)
class Overview:
    """Everything ``pause status`` shows, read at one moment."""

    status: ClusterStatus
    depths: Depths
    breakers: tuple[BreakerStatus, ...]
    history: tuple[HistoryEntry, ...] | None = None
    windows: tuple[WindowStatus, ...] = ()
    parked: Depths = field(default_factory=dict)
    """Tasks parked on the broker (:mod:`celery_pause.model.parking`), by pause hold id."""
    parked_values: dict[str, Depths] = field(default_factory=dict)
    """Of those, the tasks of each label value of a pause by label, by hold id and value (the
    :data:`SHOWN_VALUES` with the most)."""
    turns: dict[str, Depths] = field(default_factory=dict)
    """Tasks waiting for their turns (:mod:`celery_pause.model.fair`), by fair limit's hold
    id and label value (the :data:`SHOWN_VALUES` with the most)."""

    def to_json(self) -> dict[str, Any]:
        doc = status_json(self.status, self.depths, self.breakers, self.history, self.windows)
        doc["parked"] = [
            {"hold": hold, "tasks": count, "values": _per_value(self.parked_values.get(hold))}
            for hold, count in self.parked.items()
        ]
        doc["totals"]["parked"] = sum(count or 0 for count in self.parked.values())
        doc["turns"] = [
            {"hold": hold, "value": value, "tasks": count}
            for hold, values in self.turns.items()
            for value, count in values.items()
        ]
        doc["totals"]["turns"] = sum(e["tasks"] or 0 for e in doc["turns"])
        return doc


def overview(
    app: Celery,
    *,
    depths: DepthReader | None = None,
    with_history: bool = False,
    history_limit: int | None = None,
) -> Overview:
    """Read the cluster's status, queue depths and breakers (and the newest
    ``history_limit`` history entries ``with_history``)."""
    current = status(app)
    config = config_for(app)
    read_depths = depths or (lambda names: queue_depths(app, names, config.store_timeout))
    queues = status_queues(current, list(app.amqp.queues))
    parking = {h.id: parking_queue(config.key_prefix, h.id) for h in current.holds if h.pauses}
    by_label = [h.id for h in current.holds if h.pauses and label_names(h.scope)]
    fair = [h.id for h in current.holds if h.limit is not None and h.limit.fair is not None]
    store = store_for(app)
    unread: list[str] = []
    parked_record = (
        _readable(store, REGISTRY, unread, "parked per label value") if by_label else None
    )
    values = {hold: parked_values(parked_record, hold) for hold in by_label}
    registry = _readable(store, FAIR_REGISTRY, unread, "waiting for turns") if fair else None
    turns = {hold: fair_queues(registry, hold) for hold in fair}
    named = [queue for each in (*turns.values(), *values.values()) for queue in each.values()]
    found = read_depths(sorted({*queues, *parking.values(), *named}))
    return Overview(
        status=replace(current, store_warnings=(*current.store_warnings, *unread)),
        depths={name: found.get(name) for name in queues},
        parked={
            hold: _total([queue, *values.get(hold, {}).values()], found)
            for hold, queue in parking.items()
        },
        parked_values={hold: most_waiting(each, found) for hold, each in values.items()},
        turns={hold: most_waiting(each, found) for hold, each in turns.items()},
        breakers=tuple(breaker_statuses(app)),
        history=tuple(history(app, limit=history_limit)) if with_history else None,
        windows=tuple(
            WindowStatus.of(window, current.state, current.now) for window in config.windows
        ),
    )


def _readable(store: Store, key: str, unread: list[str], shown: str) -> Record | None:
    """Record ``key``; ``None`` if it cannot be read as one, with a warning in ``unread``
    that the tasks it counts (``shown``) are not shown."""
    try:
        return store.read_record(key)
    except UnreadableRecord as exc:
        unread.append(f"{exc}: the tasks {shown} are not shown"[:300])
        return None


def most_waiting(queues: Mapping[str, str], depths: Depths) -> Depths:
    """The tasks waiting in each value's queue, the :data:`SHOWN_VALUES` with most, most first."""
    counted = sorted(((depths.get(q), v) for v, q in queues.items()), key=lambda e: -(e[0] or 0))
    return {value: count for count, value in counted[:SHOWN_VALUES] if count}


def _total(queues: Sequence[str], depths: Depths) -> int | None:
    """The tasks waiting in ``queues`` (``None`` if the first, the hold's own, cannot be told)."""
    counts = [depths.get(queue) for queue in dict.fromkeys(queues)]
    return None if counts[0] is None else sum(count or 0 for count in counts)


def _per_value(depths: Depths | None) -> list[dict[str, Any]]:
    return [{"value": value, "tasks": count} for value, count in (depths or {}).items()]


def cluster_state(status: ClusterStatus) -> str:
    """``RUNNING`` (nothing paused), ``PAUSED`` (every task of the app's queues on every
    worker) or ``PARTIAL``."""
    if not status.paused:
        return RUNNING
    return PAUSED if status.fully_paused else PARTIAL


def since(holds: Sequence[Hold]) -> float | None:
    """When the oldest pausing hold began, if any hold says."""
    return min((h.began for h in holds if h.began and h.pauses), default=None)


def status_queues(status: ClusterStatus, configured: Sequence[str]) -> list[str]:
    """Queues worth counting: the app's own, and every queue a hold or worker names."""
    names = set(configured)
    for hold in status.holds:
        names |= hold.scope.queues
    for report in status.workers:
        names |= set(report.paused or ())
    return sorted(names)


def status_json(
    status: ClusterStatus,
    depths: Depths,
    breakers: Sequence[BreakerStatus] = (),
    history: Sequence[HistoryEntry] | None = None,
    windows: Sequence[WindowStatus] = (),
) -> dict[str, Any]:
    """The documented ``pause status --json`` document (schema 2); ``history`` when given."""
    generation = status.state.generation
    states = [w.state_for(generation) for w in status.workers]
    doc: dict[str, Any] = {
        "schema": JSON_SCHEMA,
        "state": cluster_state(status),
        "paused_queues": status.paused.names(),
        "since": since(status.holds) if status.paused else None,
        "generation": generation,
        "restored": None if status.state.restored is None else status.state.restored.to_json(),
        "now": status.now,
        "store": status.store,
        "store_warnings": list(status.store_warnings),
        "holds": [hold.to_json() for hold in status.holds],
        "limits": [
            {"id": hold.id, **status.usage[hold.id].to_json()}
            for hold in status.limits
            if hold.id in status.usage
        ],
        "scheduled": [hold.to_json() for hold in status.scheduled],
        "ramps": [ramp_json(ramp, status.now) for ramp in status.ramps],
        "windows": [window.to_json() for window in windows],
        "workers": [w.status_json(generation) for w in status.workers],
        "totals": {
            "workers": len(status.workers),
            "paused": states.count(WORKER_PAUSED),
            "lost": states.count(LOST),
            "running_in_scope": sum(len(w.running) for w in status.workers),
            "active": sum(w.active for w in status.workers),
            "reserved": sum(w.reserved for w in status.workers),
            "held": sum(w.held for w in status.workers),
            "waiting": sum(w.waiting for w in status.workers),
            "not_guaranteed": sum(1 for w in status.workers if not w.guaranteed),
        },
        "queues": [
            {
                "name": name,
                "waiting": waiting,
                "paused": status.paused.covers(Target(queue=name)),
                "partly_paused": status.paused.touches(Target(queue=name))
                and not status.paused.covers(Target(queue=name)),
            }
            for name, waiting in sorted(depths.items())
        ],
        "breakers": [breaker.to_json() for breaker in breakers],
    }
    if history is not None:
        doc["history"] = [entry.to_json() for entry in history]
    return doc
