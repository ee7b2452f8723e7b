"""File store for workers on one host: an fcntl lock and write-then-rename.

Single-host only: ``fcntl`` locks are not reliable across network file systems.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote, unquote, urlsplit

from ..errors import StoreError
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
    bad_url,
    call_bound,
    check_key,
    check_log_name,
    decode_entry,
    decode_record,
    encode_entry,
    encode_record,
)

LOCK_POLL, LOCK_POLL_MAX = 0.001, 0.05
"""Seconds between two tries at a lock another process holds: first, and at most."""


class FileStore(Store):
    """Keeps ``<dir>/<prefix>/state.json``, one report file per worker and
    ``log-<name>.jsonl`` files (one JSON entry a line, oldest first).

    Events, records and leases are JSON files in ``events/``, ``records/`` and
    ``leases/``, each kind changed under its own ``fcntl`` lock file.
    """

    def __init__(self, url: str, prefix: str, *, timeout: float = 2.0) -> None:
        """``timeout``: the store timeout; a lock is waited for at most :func:`.call_bound`
        of it (a writer holds one for milliseconds), then the call fails."""
        super().__init__(url, prefix)
        self.lock_wait = call_bound(timeout)
        split = urlsplit(url)
        path = unquote(split.path)
        if not path:
            raise bad_url(url, "names no directory (file:///path/to/dir)")
        if split.netloc not in ("", "localhost") or not os.path.isabs(path):
            # Resolved against each process's working directory, a relative path would give
            # a worker, its pool and the CLI run elsewhere different stores, silently.
            raise bad_url(
                url,
                f"is not an absolute directory on this host (read as host "
                f"{split.hostname or ''!r}, path {path!r}); a relative path is refused, "
                "write file:///absolute/path/to/dir (three slashes)",
            )
        self.root = Path(path) / quote(prefix, safe="")
        self.state_path = self.root / "state.json"
        self.workers_dir = self.root / "workers"
        self._lock_path = self.root / "state.lock"
        self._log_lock_path = self.root / "log.lock"
        self.events_dir = self.root / "events"
        self.records_dir = self.root / "records"
        self.leases_dir = self.root / "leases"

    @classmethod
    def open(
        cls, url: str, prefix: str, *, timeout: float, options: Mapping[str, Any]
    ) -> FileStore:
        return cls(url, prefix, timeout=timeout)

    def now(self) -> float:
        return time.time()

    def read(self) -> Snapshot:
        return Snapshot(PauseState.decode(self._read(self.state_path)), self.now())

    def update(self, change: Change[R]) -> Updated[R]:
        with self._locked():
            current = PauseState.decode(self._read(self.state_path))
            now = self.now()
            outcome = change(current, now)
            if outcome.value is not None:
                self._write(self.state_path, outcome.value.encode())
            return Updated.of(current, now, outcome)

    def put_worker(self, report: WorkerReport) -> None:
        self._write(self._worker_path(report.hostname), report.encode())

    def remove_worker(self, hostname: str) -> None:
        try:
            self._worker_path(hostname).unlink(missing_ok=True)
        except OSError as exc:
            raise self.failed(exc) from None

    def worker_reports(self) -> list[WorkerReport]:
        try:
            paths = list(self.workers_dir.glob("*.json"))
        except OSError as exc:
            raise self.failed(exc) from None
        reports = []
        for path in paths:
            raw = self._read(path)
            report = WorkerReport.decode(raw) if raw is not None else None
            if report is not None:
                reports.append(report)
        return reports

    def append_log(self, log: str, entry: Mapping[str, Any], *, keep: int) -> None:
        path = self.root / f"log-{check_log_name(log)}.jsonl"
        data = encode_entry(entry)
        # A lock of its own: appending never waits for, or blocks, a state update.
        with self._locked(self._log_lock_path):
            lines = (self._read(path) or b"").splitlines()
            lines = [line for line in lines if line.strip()] + [data]
            self._write(path, b"\n".join(lines[-max(keep, 1) :]) + b"\n")

    def read_log(self, log: str, *, limit: int | None = None) -> list[dict[str, Any]]:
        path = self.root / f"log-{check_log_name(log)}.jsonl"
        if limit is not None and limit < 1:
            return []
        lines = [line for line in (self._read(path) or b"").splitlines() if line.strip()]
        return [decode_entry(line) for line in lines[::-1][:limit]]

    # -- shared counters, records and leases --------------------------------------------
    def add_event(self, key: str, *, window: float, detail: str = "", limit: int = 1000) -> int:
        path = self._path(self.events_dir, key)
        with self._locked(self.root / "events.lock"):
            now = self.now()
            events = [e for e in self._events(key, path) if e[0] >= now - window]
            events = [*events, [now, detail]][-limit:]
            self._write(path, json.dumps(events, separators=(",", ":")).encode())
        return len(events)

    def recent_events(self, key: str, *, window: float) -> list[Event]:
        path = self._path(self.events_dir, key)
        since = self.now() - window
        return [Event(at, detail) for at, detail in self._events(key, path) if at >= since]

    def clear_events(self, key: str) -> None:
        path = self._path(self.events_dir, key)
        with self._locked(self.root / "events.lock"):
            self._unlink(path)

    def read_record(self, key: str) -> Record | None:
        return decode_record(key, self._read(self._path(self.records_dir, key)))

    def update_record(self, key: str, change: RecordChange[R]) -> RecordUpdated[R]:
        path = self._path(self.records_dir, key)
        with self._locked(self.root / "records.lock"):
            current = decode_record(key, self._read(path))
            outcome = change(current, self.now())
            if outcome.value:
                self._write(path, encode_record(outcome.value))
            elif outcome.value is not None:
                self._unlink(path)
            return RecordUpdated.of(current, outcome)

    def delete_record(self, key: str) -> None:
        path = self._path(self.records_dir, key)
        with self._locked(self.root / "records.lock"):
            self._unlink(path)

    def record_keys(self, prefix: str = "") -> list[str]:
        try:
            names = [unquote(p.name[: -len(".json")]) for p in self.records_dir.glob("*.json")]
        except OSError as exc:
            raise self.failed(exc) from None
        return sorted(name for name in names if name.startswith(prefix))

    def acquire_lease(self, key: str, owner: str, ttl: float) -> bool:
        path = self._path(self.leases_dir, key)
        with self._locked(self.root / "leases.lock"):
            holder = self._lease(path)
            if holder is not None and holder != owner:
                return False
            lease = {"owner": owner, "expires": self.now() + ttl}
            self._write(path, json.dumps(lease).encode())
            return True

    def release_lease(self, key: str, owner: str) -> bool:
        path = self._path(self.leases_dir, key)
        with self._locked(self.root / "leases.lock"):
            if self._lease(path) != owner:
                return False
            self._unlink(path)
            return True

    def lease_owner(self, key: str) -> str | None:
        return self._lease(self._path(self.leases_dir, key))

    def _lease(self, path: Path) -> str | None:
        """The live owner; an expired or unreadable lease counts as free."""
        raw = self._read(path)
        if raw is None:
            return None
        try:
            lease = json.loads(raw)
            owner, expires = lease["owner"], float(lease["expires"])
        except (ValueError, KeyError, TypeError):
            return None
        return owner if isinstance(owner, str) and self.now() < expires else None

    def _events(self, key: str, path: Path) -> list[list[Any]]:
        raw = self._read(path)
        if raw is None:
            return []
        try:
            events = json.loads(raw)
            return [[float(at), str(detail)] for at, detail in events]
        except (ValueError, TypeError) as exc:
            raise StoreError(f"events {key!r} are unreadable: {exc}"[:300]) from None

    def _path(self, directory: Path, key: str) -> Path:
        return directory / (quote(check_key(key), safe="") + ".json")

    def _unlink(self, path: Path) -> None:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise self.failed(exc) from None

    def _worker_path(self, hostname: str) -> Path:
        return self.workers_dir / (quote(hostname, safe="") + ".json")

    @contextmanager
    def _locked(self, lock_path: Path | None = None) -> Iterator[None]:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with open(lock_path or self._lock_path, "a") as lock:
                self._lock(lock)
                try:
                    yield
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)
        except OSError as exc:
            raise self.failed(exc) from None

    def _lock(self, lock: IO[str]) -> None:
        """Take ``lock`` within :attr:`lock_wait` seconds, else fail: flock has no timeout."""
        deadline = time.monotonic() + self.lock_wait
        pause = LOCK_POLL
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise self.failed(
                        f"{lock.name} stayed locked for {self.lock_wait:g}s"
                    ) from None
                time.sleep(pause)
                pause = min(pause * 2, LOCK_POLL_MAX)

    def _read(self, path: Path) -> bytes | None:
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self.failed(exc) from None

    def _write(self, path: Path, data: bytes) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(tmp, path)
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError as exc:
            raise self.failed(exc) from None
