"""In-memory store (``memory://``): for tests of an app with an in-process worker.

Every :class:`MemoryStore` of one process with the same URL and prefix shares one
space, so the test code and a worker started with
``celery.contrib.testing.worker.start_worker`` see the same state. Nothing is
shared between processes: with the prefork pool, what a task does to the store
(a breaker counting failures) stays in its pool process; test with the solo pool.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ..model.report import WorkerReport
from ..model.state import PauseState
from .base import Change, RecordUpdated, Snapshot, Store, Updated, decode_record, encode_record
from .primitives import R, Record, RecordChange, check_key


@dataclass
class Space:
    """Everything one store holds, as the JSON bytes another store would keep."""

    lock: threading.RLock = field(default_factory=threading.RLock)
    state: bytes | None = None
    workers: dict[str, bytes] = field(default_factory=dict)
    records: dict[str, bytes] = field(default_factory=dict)

    def clear(self) -> None:
        with self.lock:
            self.state = None
            for kept in (self.workers, self.records):
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
