"""In-memory store (``memory://``): for tests of an app with an in-process worker.

Every :class:`MemoryStore` of one process with the same URL and prefix shares one
space, so the test code and a worker started with
``celery.contrib.testing.worker.start_worker`` see the same state. Nothing is
shared between processes: with the prefork pool, what a task does to the store
(a breaker counting failures) stays in its pool process; test with the solo pool.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..model.report import WorkerReport
from ..model.state import PauseState
from .base import (
    Change,
    Event,
    R,
    Record,
    RecordChange,
    RecordUpdated,
    Snapshot,
    Store,
    Updated,
    check_key,
    check_log_name,
    decode_entry,
    decode_record,
    encode_entry,
    encode_record,
)


@dataclass
class Space:
    """Everything one store holds, as the JSON bytes another store would keep."""

    lock: threading.RLock = field(default_factory=threading.RLock)
    state: bytes | None = None
    workers: dict[str, bytes] = field(default_factory=dict)
    logs: dict[str, list[bytes]] = field(default_factory=dict)
    events: dict[str, list[tuple[float, str]]] = field(default_factory=dict)
    records: dict[str, bytes] = field(default_factory=dict)
    leases: dict[str, tuple[str, float]] = field(default_factory=dict)

    def clear(self) -> None:
        with self.lock:
            self.state = None
            for kept in (self.workers, self.logs, self.events, self.records, self.leases):
                kept.clear()


_spaces: dict[tuple[str, str], Space] = {}
_spaces_lock = threading.Lock()


def space_for(url: str, prefix: str) -> Space:
    """The process's one space for ``url`` and ``prefix``, made on first use."""
    with _spaces_lock:
        return _spaces.setdefault((url, prefix), Space())


def forget_all() -> None:
    """Empty every memory store of this process (between tests); stores already open
    stay usable and see the empty state."""
    with _spaces_lock:
        spaces = list(_spaces.values())
    for space in spaces:
        space.clear()


class MemoryStore(Store):
    """The pause state in this process's memory, thread-safe, shared by URL and prefix."""

    def __init__(self, url: str, prefix: str) -> None:
        super().__init__(url, prefix)
        self.space = space_for(url, prefix)

    def now(self) -> float:
        return time.time()

    def read(self) -> Snapshot:
        with self.space.lock:
            return Snapshot(PauseState.decode(self.space.state), self.now())

    def update(self, change: Change[R]) -> Updated[R]:
        with self.space.lock:
            current = PauseState.decode(self.space.state)
            now = self.now()
            outcome = change(current, now)
            if outcome.value is not None:
                self.space.state = outcome.value.encode()
            return Updated.of(current, now, outcome)

    def put_worker(self, report: WorkerReport) -> None:
        with self.space.lock:
            self.space.workers[report.hostname] = report.encode()

    def remove_worker(self, hostname: str) -> None:
        with self.space.lock:
            self.space.workers.pop(hostname, None)

    def worker_reports(self) -> list[WorkerReport]:
        with self.space.lock:
            raw = list(self.space.workers.values())
        reports = (WorkerReport.decode(value) for value in raw)
        return [report for report in reports if report is not None]

    def append_log(self, log: str, entry: Mapping[str, Any], *, keep: int) -> None:
        name, data = check_log_name(log), encode_entry(entry)
        with self.space.lock:
            entries = [data, *self.space.logs.get(name, [])]
            self.space.logs[name] = entries[: max(keep, 1)]

    def read_log(self, log: str, *, limit: int | None = None) -> list[dict[str, Any]]:
        name = check_log_name(log)
        if limit is not None and limit < 1:
            return []
        with self.space.lock:
            entries = list(self.space.logs.get(name, []))
        return [decode_entry(raw) for raw in entries[:limit]]

    # -- shared counters, records and leases --------------------------------------------
    def add_event(self, key: str, *, window: float, detail: str = "", limit: int = 1000) -> int:
        check_key(key)
        with self.space.lock:
            now = self.now()
            events = [e for e in self.space.events.get(key, []) if e[0] >= now - window]
            self.space.events[key] = [*events, (now, detail)][-limit:]
            return len(self.space.events[key])

    def recent_events(self, key: str, *, window: float) -> list[Event]:
        check_key(key)
        since = self.now() - window
        with self.space.lock:
            events = list(self.space.events.get(key, []))
        return [Event(at, detail) for at, detail in events if at >= since]

    def clear_events(self, key: str) -> None:
        with self.space.lock:
            self.space.events.pop(check_key(key), None)

    def read_record(self, key: str) -> Record | None:
        with self.space.lock:
            return decode_record(key, self.space.records.get(check_key(key)))

    def update_record(self, key: str, change: RecordChange[R]) -> RecordUpdated[R]:
        check_key(key)
        with self.space.lock:
            current = decode_record(key, self.space.records.get(key))
            outcome = change(current, self.now())
            if outcome.value:
                self.space.records[key] = encode_record(outcome.value)
            elif outcome.value is not None:
                self.space.records.pop(key, None)
            return RecordUpdated.of(current, outcome)

    def delete_record(self, key: str) -> None:
        with self.space.lock:
            self.space.records.pop(check_key(key), None)

    def record_keys(self, prefix: str = "") -> list[str]:
        with self.space.lock:
            return sorted(key for key in self.space.records if key.startswith(prefix))

    def acquire_lease(self, key: str, owner: str, ttl: float) -> bool:
        check_key(key)
        with self.space.lock:
            holder = self.lease_owner(key)
            if holder is not None and holder != owner:
                return False
            self.space.leases[key] = (owner, self.now() + ttl)
            return True

    def release_lease(self, key: str, owner: str) -> bool:
        check_key(key)
        with self.space.lock:
            if self.lease_owner(key) != owner:
                return False
            del self.space.leases[key]
            return True

    def lease_owner(self, key: str) -> str | None:
        with self.space.lock:
            lease = self.space.leases.get(check_key(key))
        if lease is None or lease[1] <= self.now():
            return None
        return lease[0]
