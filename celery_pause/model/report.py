"""What each worker publishes about itself, so callers can wait for quiet."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields, replace
from operator import attrgetter
from typing import Any

STARTING = "starting"
APPLIED = "applied"
APPLYING, RUNNING, PAUSING, PAUSED = "applying", "running", "pausing", "paused"
"""A worker's state in the status document, besides ``starting``."""
LOST = "lost"
"""The state of a worker that stopped reporting (it may be cut off, frozen or gone)."""


@dataclass(frozen=True, slots=True)
class WorkerReport:
    """One worker's view: the generation it applied and what it still runs.

    Slotted, its sequences tuples: each of the thousands of reports a status or a wait
    holds is one object to the cyclic garbage collector, not three (with a ``__dict__``
    and a list), which keeps the collector's full passes from doubling the slowest wait
    at 10 000 workers."""

    hostname: str
    pid: int
    status: str = STARTING
    generation: int = -1
    paused: tuple[str, ...] | None = None
    """The queues it holds, ``()`` when none; ``None`` when it holds every queue (or has
    applied no state yet)."""
    running: tuple[str, ...] = ()
    held: int = 0
    seen: float = 0.0
    running_names: tuple[str, ...] = ()
    """Task names, in the order of ``running``."""
    breakers: tuple[str, ...] = ()
    """Circuit breakers whose agent runs on this worker."""
    pool: str = ""
    """The worker's execution pool (``prefork``, ``threads``, ... or ``module:Class``)."""
    pool_problem: str = ""
    """Why the pause cannot be guaranteed on this worker's pool; empty when it can."""

    @property
    def guaranteed(self) -> bool:
        """Whether this worker's pool holds every task of a paused scope."""
        return not self.pool_problem

    active: int = 0
    """Tasks running on the worker, in a paused scope or not."""
    reserved: int = 0
    """Tasks the worker received and has not finished: running, waiting for a pool slot,
    and held by its gate (Celery's reserved requests)."""
    waiting: int = 0
    """Requests let through by the pause that wait for a limit's permit (a ramp's too)."""
    as_of: float = 0.0
    """Store time of the newest read of the state whose scope the worker applies: a hold
    that starts at ``t`` is applied once ``as_of >= t``."""
    silent: float = 0.0
    """Seconds since the report was written, once more than ``pause_worker_ttl``: the
    worker lost contact (set by :func:`known`; a worker writes 0)."""
    readded: tuple[str, ...] = ()
    """Queues it holds whole yet consumes: an operator added a consumer while paused
    (``celery control add_consumer``), so their messages are fetched to wait in its gate."""
    lease: float | None = 0.0
    """Its ``pause_lease`` in force (``None``: it never fences; 0: not said, an older worker)."""

    def quiet_for(self, generation: int, since: float | None = None) -> bool:
        """Whether this worker applied ``generation`` (or later), as the state stood at
        store time ``since`` (or later) when given, and runs nothing paused."""
        return (
            self.status == APPLIED
            and self.generation >= generation
            and (since is None or self.as_of >= since)
            and not self.running
        )

    def state_for(self, generation: int) -> str:
        """``lost``, ``starting``, ``applying`` (behind ``generation``), ``running``,
        ``pausing`` or ``paused``."""
        if self.silent:
            return LOST
        if self.status != APPLIED:
            return STARTING
        if self.generation < generation:
            return APPLYING
        if self.paused is not None and not self.paused:
            return RUNNING
        return PAUSING if self.running else PAUSED

    def status_json(self, generation: int) -> dict[str, Any]:
        """This worker in the status document (schema 2), the state's generation being
        ``generation``."""
        return {
            "hostname": self.hostname,
            "pid": self.pid,
            "state": self.state_for(generation),
            "generation": self.generation,
            "paused_queues": self._paused_json() if self.status == APPLIED else [],
            "running": [
                {
                    "id": task_id,
                    "name": self.running_names[i] if i < len(self.running_names) else None,
                }
                for i, task_id in enumerate(self.running)
            ],
            "active": self.active,
            "reserved": self.reserved,
            "held": self.held,
            "waiting": self.waiting,
            "seen": self.seen,
            "pool": self.pool or None,
            "pause_guaranteed": self.guaranteed,
            "pool_problem": self.pool_problem or None,
            "as_of": self.as_of,
            "silent": self.silent,
            "readded_queues": list(self.readded),
        }

    def urgent(self) -> tuple[Any, ...]:
        """What a new report must say at once when it changes (the rest waits for the
        heartbeat, or :meth:`counts` for two seconds): the generation, the tasks running in
        scope, whether any are held, and the breakers served. Whether any wait for a limit is
        a count: under a limit it changes at every start, and nothing waits on it."""
        return (self.generation, self.running, self.held > 0, self.breakers)

    def counts(self) -> tuple[int, int]:
        """How many are held and wait: said within two seconds of a change (under a limit they
        change at every start, and a report each time would cost a store write a start)."""
        return (self.held, self.waiting)

    def _paused_json(self) -> list[str] | None:
        """:attr:`paused` in JSON: a list, ``None`` (``null``) when every queue is held."""
        return None if self.paused is None else list(self.paused)

    def encode(self) -> bytes:
        """The report as stored: its fields, and ``ramping`` (``waiting``'s name in the
        previous release) for that release's readers during an upgrade."""
        stored = {**asdict(self), "ramping": self.waiting}
        return json.dumps(stored, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes | str) -> WorkerReport | None:
        """Decode a report; ``None`` if it is not one (a foreign or damaged entry)."""
        try:
            data = _json(raw)
        except UNREADABLE:
            return None
        return cls._of(data)

    @classmethod
    def decode_all(cls, raws: Iterable[bytes | str]) -> list[WorkerReport]:
        """What :meth:`decode` makes of each of ``raws``, those that are not reports left out.

        The cyclic garbage collector is paused meanwhile: reports hold no reference
        cycles, and the collections the allocations of thousands of them set off (a full
        one now and then) found nothing and made the slowest ``status()`` of 10 000
        workers about twice its median."""
        collecting = gc.isenabled()
        gc.disable()
        try:
            reports = map(cls.decode, raws)
            return [report for report in reports if report is not None]
        finally:
            if collecting:
                gc.enable()

    @classmethod
    def _of(cls, data: Any) -> WorkerReport | None:
        """The report of a parsed JSON document; ``None`` if it is not one."""
        try:
            paused = data.get("paused")
            return _built(
                cls,
                (
                    _text(data["hostname"]),
                    _whole(data["pid"]),
                    _text(data["status"]),
                    _whole(data["generation"]),
                    None if paused is None else _texts(paused),
                    _texts(data.get("running", [])),
                    _whole(data.get("held", 0)),
                    _real(data["seen"]),
                    _texts(data.get("running_names", [])),
                    _texts(data.get("breakers", [])),
                    _text(data.get("pool", "")),
                    _text(data.get("pool_problem", "")),
                    _whole(data.get("active", 0)),
                    _whole(data.get("reserved", 0)),
                    _whole(data.get("waiting", data.get("ramping", 0))),  # earlier: ramping
                    _real(data.get("as_of", 0.0)),
                    0.0,
                    _texts(data.get("readded", [])),
                    _lease(data.get("lease", 0.0)),
                ),
            )
        except UNREADABLE:
            return None


UNREADABLE = (ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError)
"""What reading something that is not a report raises."""
_DECODER = json.JSONDecoder()


def _json(raw: bytes | str) -> Any:
    """``json.loads(raw)``, without its encoding detection and whitespace skipping for
    what workers write (compact UTF-8 JSON); anything else goes to ``json.loads``."""
    try:
        text = raw.decode() if isinstance(raw, bytes) else raw
        value, end = _DECODER.raw_decode(text)
        if end == len(text):
            return value
    except ValueError:
        pass
    return json.loads(raw)


_SETTERS = tuple(getattr(WorkerReport, field.name).__set__ for field in fields(WorkerReport))
"""The slot setters of :class:`WorkerReport`'s fields, in order."""


def _built(cls: type[WorkerReport], values: tuple[Any, ...]) -> WorkerReport:
    """A report of ``values`` (one for every field, in order, converted already), made
    without the frozen dataclass's ``__init__``, whose per-field ``object.__setattr__``
    was a third of the cost of decoding the reports of a large cluster (``status()``)."""
    report = object.__new__(cls)
    for set_field, value in zip(_SETTERS, values, strict=True):
        set_field(report, value)
    return report


def _text(value: Any) -> str:
    return value if type(value) is str else str(value)


def _whole(value: Any) -> int:
    return value if type(value) is int else int(value)


def _real(value: Any) -> float:
    return value if type(value) is float else float(value)


def _texts(values: Any) -> tuple[str, ...]:
    """A JSON list of strings as a tuple; other items converted with ``str``."""
    if type(values) is not list:
        raise TypeError("running, running_names, breakers and paused must be lists")
    return tuple(map(str, values))


def known(
    reports: Iterable[WorkerReport], now: float, *, ttl: float, forget: float
) -> list[WorkerReport]:
    """The reports written within ``forget`` seconds of store time ``now``, by hostname;
    those older than ``ttl`` marked :attr:`~WorkerReport.silent`.

    A worker that stopped reporting is shown and waited for, not dropped: it may be
    cut off from the store and still start tasks of a pause it has not read, until
    its lease runs out (:func:`fenced`).
    """
    found = []
    for report in reports:
        age = now - report.seen
        if age <= ttl:
            found.append(report)
        elif age <= forget:
            found.append(replace(report, silent=age))
    found.sort(key=attrgetter("hostname"))
    return found


def _lease(value: Any) -> float | None:
    return None if value is None else _real(value)


def fenced(report: WorkerReport, *, ttl: float, lease: float | None, waited: float) -> bool:
    """Whether the worker of ``report``, lost, surely fenced itself: it can start nothing of
    a state written before a wait that has lasted ``waited`` seconds (the waiter's clock).

    Two things must hold. It has been silent for over ``ttl + lease`` seconds: given up
    on as lost, not a slow worker about to report. And ``waited`` reached ``lease``: a
    worker that still starts tasks renewed its lease by a read begun within the last
    ``lease`` seconds, after the state was written, so it read that state and applies it.
    Silence alone does not prove this: a worker whose reports fail while its reads work
    keeps its lease. The longer of the waiter's ``lease`` and the worker's own counts; with
    no lease on either side (``pause_lease = None``) nothing is ever fenced.
    """
    if lease is None or report.lease is None:
        return False
    lease = max(lease, report.lease)  # the worker's own, if longer than the waiter's
    return report.silent > ttl + lease and waited >= lease


def unconfirmed(
    workers: Iterable[WorkerReport], generation: int, since: float | None = None
) -> tuple[WorkerReport, ...]:
    """The reports among ``workers`` (a wait's outcome) of workers that stopped reporting
    before they confirmed ``generation``: not quiet for it, or reporting a higher one (from
    before a repair of the state, or of a later change)."""
    return tuple(
        w
        for w in workers
        if w.silent and (not w.quiet_for(generation, since) or w.generation > generation)
    )
