"""A store that hands every call of the contract to another: tests and benchmarks override
only the calls they observe."""

from __future__ import annotations

from celery_pause.model.report import WorkerReport
from celery_pause.stores import base
from celery_pause.stores.base import Store
from celery_pause.stores.primitives import R, Record, RecordChange


class ForwardingStore(Store):
    """A store that hands every call of the contract to ``inner``: a test or benchmark
    overrides only the calls it observes (what the contract builds on records reaches
    ``inner`` through :meth:`read_record` and :meth:`update_record`)."""

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

    def read_record(self, key: str) -> Record | None:
        return self.inner.read_record(key)

    def update_record(self, key: str, change: RecordChange[R]) -> base.RecordUpdated[R]:
        return self.inner.update_record(key, change)

    def delete_record(self, key: str) -> None:
        self.inner.delete_record(key)

    def record_keys(self, prefix: str = "") -> list[str]:
        return self.inner.record_keys(prefix)

    def legacy_log(self, log: str) -> list[dict[str, object]]:
        return self.inner.legacy_log(log)

    def init(self) -> str:
        return self.inner.init()

    def close(self) -> None:
        self.inner.close()
