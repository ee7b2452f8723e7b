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
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from ..errors import StoreError
from ..report import WorkerReport
from ..state import PauseState
from .base import Change, Snapshot, Store, check_log_name, decode_entry, encode_entry


class FileStore(Store):
    """Keeps ``<dir>/<prefix>/state.json``, one report file per worker and
    ``log-<name>.jsonl`` files (one JSON entry a line, oldest first)."""

    def __init__(self, url: str, prefix: str) -> None:
        super().__init__(url, prefix)
        path = unquote(urlsplit(url).path)
        if not path:
            raise StoreError(f"file store URL needs a directory: {self.display_url!r}")
        self.root = Path(path) / quote(prefix, safe="")
        self.state_path = self.root / "state.json"
        self.workers_dir = self.root / "workers"
        self._lock_path = self.root / "state.lock"
        self._log_lock_path = self.root / "log.lock"

    def now(self) -> float:
        return time.time()

    def read(self) -> Snapshot:
        return Snapshot(PauseState.decode(self._read(self.state_path)), self.now())

    def update(self, change: Change) -> tuple[Snapshot, bool]:
        with self._locked():
            current = PauseState.decode(self._read(self.state_path))
            now = self.now()
            following = change(current, now)
            if following is None:
                return Snapshot(current, now), False
            self._write(self.state_path, following.encode())
            return Snapshot(following, now), True

    def put_worker(self, report: WorkerReport) -> None:
        self._write(self._worker_path(report.hostname), report.encode())

    def remove_worker(self, hostname: str) -> None:
        try:
            self._worker_path(hostname).unlink(missing_ok=True)
        except OSError as exc:
            raise StoreError(f"pause store {self.display_url} failed: {exc}") from None

    def worker_reports(self) -> list[WorkerReport]:
        try:
            paths = list(self.workers_dir.glob("*.json"))
        except OSError as exc:
            raise StoreError(f"pause store {self.display_url} failed: {exc}") from None
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

    def _worker_path(self, hostname: str) -> Path:
        return self.workers_dir / (quote(hostname, safe="") + ".json")

    @contextmanager
    def _locked(self, lock_path: Path | None = None) -> Iterator[None]:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with open(lock_path or self._lock_path, "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)
        except OSError as exc:
            raise StoreError(f"pause store {self.display_url} failed: {exc}") from None

    def _read(self, path: Path) -> bytes | None:
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"pause store {self.display_url} failed: {exc}") from None

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
            raise StoreError(f"pause store {self.display_url} failed: {exc}") from None
