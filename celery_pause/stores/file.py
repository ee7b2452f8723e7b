"""File store for workers on one host: an fcntl lock and write-then-rename.

Single-host only: ``fcntl`` locks are not reliable across network file systems.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote, unquote, urlsplit

from ..model.report import WorkerReport
from ..model.state import PauseState
from .base import (
    Change,
    RecordUpdated,
    Snapshot,
    Store,
    Updated,
    bad_url,
    call_bound,
    decode_record,
    encode_record,
)
from .primitives import R, Record, RecordChange, check_key, check_log_name, decode_entry

LOCK_POLL, LOCK_POLL_MAX = 0.001, 0.05
"""Seconds between two tries at a lock another process holds: first, and at most."""


class FileStore(Store):
    """Keeps ``<dir>/<prefix>/state.json``, one report file per worker in ``workers/`` and
    one JSON file per record in ``records/`` (logs, event windows and leases among them),
    the state and the records each changed under an ``fcntl`` lock file of its own."""

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
        self.records_dir = self.root / "records"

    @classmethod
    def open(
        cls, url: str, prefix: str, *, timeout: float, options: Mapping[str, Any]
    ) -> FileStore:
        return cls(url, prefix, timeout=timeout)

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

    def legacy_log(self, log: str) -> list[dict[str, Any]]:
        """``log-<name>.jsonl`` of earlier releases: one JSON entry a line, oldest first."""
        lines = [line for line in (self._read(self._log_path(log)) or b"").splitlines()]
        return [decode_entry(line) for line in lines[::-1] if line.strip()]

    def drop_legacy_log(self, log: str) -> None:
        self._unlink(self._log_path(log))

    def _log_path(self, log: str) -> Path:
        return self.root / f"log-{check_log_name(log)}.jsonl"

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
