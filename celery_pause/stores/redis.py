"""Redis store: the state as one JSON key, updated with WATCH/MULTI; reports in a hash."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import redis

from ..errors import StoreError
from ..report import WorkerReport
from ..state import PauseState
from .base import (
    Change,
    ClockOffset,
    Snapshot,
    Store,
    check_log_name,
    decode_entry,
    encode_entry,
)


class RedisStore(Store):
    """Keeps ``<prefix>:state`` (JSON), ``<prefix>:workers`` (hash of JSON reports)
    and ``<prefix>:log:<name>`` (lists of JSON entries, newest first)."""

    def __init__(self, url: str, prefix: str, *, timeout: float = 2.0) -> None:
        super().__init__(url, prefix)
        self.state_key = f"{prefix}:state"
        self.workers_key = f"{prefix}:workers"
        self.client = redis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout
        )
        self._clock = ClockOffset(self._server_time)

    def _server_time(self) -> float:
        seconds, micros = self.client.time()
        return float(seconds) + micros / 1e6

    def now(self) -> float:
        with self._failing():
            return self._clock.now()

    def read(self) -> Snapshot:
        with self._failing():
            raw = self.client.get(self.state_key)
        return Snapshot(PauseState.decode(raw), self.now())

    def update(self, change: Change) -> tuple[Snapshot, bool]:
        outcome: list[tuple[Snapshot, bool]] = []

        def transaction(pipe: redis.client.Pipeline) -> None:
            outcome.clear()
            current = PauseState.decode(pipe.get(self.state_key))
            seconds, micros = pipe.time()
            now = seconds + micros / 1e6
            following = change(current, now)
            if following is None:
                outcome.append((Snapshot(current, now), False))
                return
            pipe.multi()
            pipe.set(self.state_key, following.encode())
            outcome.append((Snapshot(following, now), True))

        with self._failing():
            self.client.transaction(transaction, self.state_key)
        return outcome[0]

    def put_worker(self, report: WorkerReport) -> None:
        with self._failing():
            self.client.hset(self.workers_key, report.hostname, report.encode())

    def remove_worker(self, hostname: str) -> None:
        with self._failing():
            self.client.hdel(self.workers_key, hostname)

    def worker_reports(self) -> list[WorkerReport]:
        with self._failing():
            raw = self.client.hgetall(self.workers_key)
        reports = (WorkerReport.decode(value) for value in raw.values())
        return [report for report in reports if report is not None]

    def append_log(self, log: str, entry: Mapping[str, Any], *, keep: int) -> None:
        key = f"{self.prefix}:log:{check_log_name(log)}"
        data = encode_entry(entry)
        with self._failing():
            pipe = self.client.pipeline(transaction=True)
            pipe.lpush(key, data)
            pipe.ltrim(key, 0, max(keep, 1) - 1)
            pipe.execute()

    def read_log(self, log: str, *, limit: int | None = None) -> list[dict[str, Any]]:
        key = f"{self.prefix}:log:{check_log_name(log)}"
        if limit is not None and limit < 1:
            return []
        with self._failing():
            raw = self.client.lrange(key, 0, -1 if limit is None else limit - 1)
        return [decode_entry(item) for item in raw]

    def close(self) -> None:
        self.client.close()

    @contextmanager
    def _failing(self) -> Iterator[None]:
        """Turn redis-py's errors into :class:`StoreError`, with the password masked."""
        try:
            yield
        except redis.RedisError as exc:
            raise StoreError(f"pause store {self.display_url} failed: {exc}") from None
