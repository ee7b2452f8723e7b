"""A store that hands every call of the contract to another: tests and benchmarks override
only the calls they observe."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from celery_pause.model.report import WorkerReport
from celery_pause.stores import base
from celery_pause.stores.base import R, Store


class ForwardingStore(Store):
    """A store that hands every call of the contract to ``inner``: a test or benchmark
    overrides only the calls it observes."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner.url, inner.prefix)
        self.inner = inner

    @property
    def display_url(self) -> str:
        return self.inner.display_url

    def now(self) -> float:
        return self.inner.now()

    def read(self) -> base.Snapshot:
        return self.inner.read()

    def update(self, change: base.Change[R]) -> base.Updated[R]:
        return self.inner.update(change)

    def put_worker(self, report: WorkerReport) -> None:
        self.inner.put_worker(report)

    def remove_worker(self, hostname: str) -> None:
        self.inner.remove_worker(hostname)

    def worker_reports(self) -> list[WorkerReport]:
        return self.inner.worker_reports()

    def append_log(self, log: str, entry: Mapping[str, Any], *, keep: int) -> None:
        self.inner.append_log(log, entry, keep=keep)

    def read_log(self, log: str, *, limit: int | None = None) -> list[dict[str, Any]]:
        return self.inner.read_log(log, limit=limit)

    def add_event(self, key: str, *, window: float, detail: str = "", limit: int = 1000) -> int:
        return self.inner.add_event(key, window=window, detail=detail, limit=limit)

    def recent_events(self, key: str, *, window: float) -> list[base.Event]:
        return self.inner.recent_events(key, window=window)

    def clear_events(self, key: str) -> None:
        self.inner.clear_events(key)

    def read_record(self, key: str) -> base.Record | None:
        return self.inner.read_record(key)

    def update_record(self, key: str, change: base.RecordChange[R]) -> base.RecordUpdated[R]:
        return self.inner.update_record(key, change)

    def delete_record(self, key: str) -> None:
        self.inner.delete_record(key)

    def record_keys(self, prefix: str = "") -> list[str]:
        return self.inner.record_keys(prefix)

    def acquire_lease(self, key: str, owner: str, ttl: float) -> bool:
        return self.inner.acquire_lease(key, owner, ttl)

    def release_lease(self, key: str, owner: str) -> bool:
        return self.inner.release_lease(key, owner)

    def lease_owner(self, key: str) -> str | None:
        return self.inner.lease_owner(key)

    def init(self) -> str:
        return self.inner.init()

    def close(self) -> None:
        self.inner.close()
