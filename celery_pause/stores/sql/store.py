"""SQL store: PostgreSQL, MySQL/MariaDB or SQLite through SQLAlchemy.

Every read-modify-write is one transaction that locks its row first
(``SELECT … FOR UPDATE``; on SQLite the transaction begins ``IMMEDIATE``),
takes the database's clock, and writes JSON text. Two writers of a row that
did not exist yet collide on its key: the loser's transaction is retried, as
is one the database chose as a deadlock victim.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import sqlalchemy as sa

from ...errors import ConfigurationError, InvalidInput, StoreError
from ...model.report import WorkerReport
from ...model.state import PauseState
from ..base import (
    Change,
    ClockOffset,
    RecordUpdated,
    Snapshot,
    Store,
    Updated,
    call_bound,
    decode_record,
    encode_record,
)
from ..primitives import R, Record, RecordChange, check_key, check_log_name, decode_entry
from .engine import WRITE, Call, Retry, Watchdog, clock, failing, open_engine
from .schema import NAME_LENGTH, PREFIX_LENGTH, log, prepare, values

T = TypeVar("T")
ATTEMPTS = 20
PREPARE_BACKOFF = 0.01
"""Seconds, times the attempt, between two tries at making the tables."""
STATE, WORKER, RECORD = "state", "worker", "record"


class SqlStore(Store):
    """Keeps each value (the state, each report, each record) as a row of
    ``celery_pause_values`` under the store's prefix (see :mod:`.schema`)."""

    def __init__(self, url: str, prefix: str, *, timeout: float = 2.0) -> None:
        super().__init__(url, prefix)
        if not prefix or len(prefix) > PREFIX_LENGTH:
            raise ConfigurationError(
                f"pause_key_prefix must be 1-{PREFIX_LENGTH} characters for the SQL store"
            )
        self.engine = open_engine(url, timeout=timeout)
        self.call_bound = call_bound(timeout)
        self._watchdog = Watchdog(self.call_bound)
        self._pid = os.getpid()
        self._ready = False
        self._ready_lock = threading.Lock()
        self._clock = ClockOffset(self._server_time)

    @classmethod
    def open(cls, url: str, prefix: str, *, timeout: float, options: Mapping[str, Any]) -> SqlStore:
        return cls(url, prefix, timeout=timeout)

    # -- the contract -----------------------------------------------------------------------
    def now(self) -> float:
        with self._failing():
            return self._clock.now()

    def read(self) -> Snapshot:
        raw = self._run(lambda conn: self._get(conn, STATE, STATE), write=False)
        return Snapshot(PauseState.decode(raw), self.now())

    def update(self, change: Change[R]) -> Updated[R]:
        def work(conn: sa.Connection) -> Updated[R]:
            raw, exists = self._lock(conn, STATE, STATE)
            current = PauseState.decode(raw)
            now = clock(conn)
            outcome = change(current, now)
            if outcome.value is not None:
                self._put(conn, STATE, STATE, outcome.value.encode().decode(), exists=exists)
            return Updated.of(current, now, outcome)

        return self._run(work)

    def put_worker(self, report: WorkerReport) -> None:
        name, data = _name(report.hostname), report.encode().decode()
        self._run(lambda conn: self._put(conn, WORKER, name, data, exists=None))

    def remove_worker(self, hostname: str) -> None:
        self._run(lambda conn: self._delete(conn, WORKER, _name(hostname)))

    def worker_reports(self) -> list[WorkerReport]:
        query = sa.select(values.c.value).where(
            (values.c.prefix == self.prefix) & (values.c.kind == WORKER)
        )
        rows = self._run(lambda conn: conn.execute(query).scalars().all(), write=False)
        return WorkerReport.decode_all(rows)

    def read_with_reports(self) -> tuple[Snapshot, list[WorkerReport]]:
        """The state and every report in one query."""
        query = sa.select(values.c.kind, values.c.value).where(
            (values.c.prefix == self.prefix)
            & ((values.c.kind == WORKER) | ((values.c.kind == STATE) & (values.c.name == STATE)))
        )
        rows = self._run(lambda conn: conn.execute(query).all(), write=False)
        state = next((value for kind, value in rows if kind == STATE), None)
        reports = WorkerReport.decode_all(value for kind, value in rows if kind == WORKER)
        return Snapshot(PauseState.decode(state), self.now()), reports

    def reports_of(self, hostnames: Collection[str]) -> list[WorkerReport]:
        if not hostnames:
            return []
        names = [_name(hostname) for hostname in hostnames]
        query = sa.select(values.c.value).where(
            (values.c.prefix == self.prefix) & (values.c.kind == WORKER) & values.c.name.in_(names)
        )
        rows = self._run(lambda conn: conn.execute(query).scalars().all(), write=False)
        return WorkerReport.decode_all(rows)

    def legacy_log(self, log_name: str) -> list[dict[str, Any]]:
        """The rows of ``celery_pause_log`` that earlier releases wrote, newest first."""
        query = sa.select(log.c.entry).where(self._log_rows(log_name)).order_by(log.c.id.desc())
        rows = self._run(lambda conn: list(conn.execute(query).scalars()), write=False)
        return [decode_entry(row) for row in rows]

    def drop_legacy_log(self, log_name: str) -> None:
        where = self._log_rows(log_name)
        self._run(lambda conn: conn.execute(sa.delete(log).where(where)))

    def _log_rows(self, log_name: str) -> sa.ColumnElement[bool]:
        return (log.c.prefix == self.prefix) & (log.c.name == check_log_name(log_name))

    # -- records ----------------------------------------------------------------------------
    def read_record(self, key: str) -> Record | None:
        raw = self._run(lambda conn: self._get(conn, RECORD, check_key(key)), write=False)
        return decode_record(key, raw)

    def update_record(self, key: str, change: RecordChange[R]) -> RecordUpdated[R]:
        check_key(key)

        def work(conn: sa.Connection) -> RecordUpdated[R]:
            raw, exists = self._lock(conn, RECORD, key)
            current = decode_record(key, raw)
            outcome = change(current, clock(conn))
            if outcome.value:
                data = encode_record(outcome.value).decode()
                self._put(conn, RECORD, key, data, exists=exists)
            elif outcome.value is not None and exists:
                self._delete(conn, RECORD, key)
            return RecordUpdated.of(current, outcome)

        return self._run(work)

    def delete_record(self, key: str) -> None:
        self._run(lambda conn: self._delete(conn, RECORD, check_key(key)))

    def read_records(self, prefix: str) -> dict[str, Record]:
        rows = self._run(lambda conn: self._all(conn, RECORD), write=False)
        return {
            name: record
            for name, raw in rows
            if name.startswith(prefix) and (record := decode_record(name, raw)) is not None
        }

    def record_keys(self, prefix: str = "") -> list[str]:
        query = sa.select(values.c.name).where(
            (values.c.prefix == self.prefix) & (values.c.kind == RECORD)
        )
        names = self._run(lambda conn: list(conn.execute(query).scalars()), write=False)
        return sorted(name for name in names if name.startswith(prefix))

    def init(self) -> str:
        with self._failing():
            version, created = prepare(self.engine)
        self._ready = True
        done = "created the tables" if created else "the tables are there"
        return f"{done} (celery_pause_values, celery_pause_log, schema version {version})"

    def close(self) -> None:
        self.engine.dispose()

    # -- rows -------------------------------------------------------------------------------
    def _where(self, kind: str, name: str) -> sa.ColumnElement[bool]:
        return (values.c.prefix == self.prefix) & (values.c.kind == kind) & (values.c.name == name)

    def _get(self, conn: sa.Connection, kind: str, name: str) -> str | None:
        query = sa.select(values.c.value).where(self._where(kind, name))
        return conn.execute(query).scalar()

    def _lock(self, conn: sa.Connection, kind: str, name: str) -> tuple[str | None, bool]:
        """The row's value, locked until the transaction ends, and whether it exists."""
        query = sa.select(values.c.value).where(self._where(kind, name)).with_for_update()
        row = conn.execute(query).first()
        return (None, False) if row is None else (row[0], True)

    def _put(
        self,
        conn: sa.Connection,
        kind: str,
        name: str,
        value: str,
        *,
        exists: bool | None,
    ) -> None:
        """Write a row read and locked in this transaction (``exists``: whether it was
        there), or, with ``exists`` ``None``, whatever is there (last writer wins)."""
        if exists is not False:
            update = sa.update(values).where(self._where(kind, name))
            if conn.execute(update.values(value=value)).rowcount or exists:
                return
        row = {"prefix": self.prefix, "kind": kind, "name": name, "value": value}
        conn.execute(sa.insert(values).values(**row))

    def _delete(self, conn: sa.Connection, kind: str, name: str) -> None:
        conn.execute(sa.delete(values).where(self._where(kind, name)))

    def _all(self, conn: sa.Connection, kind: str) -> list[tuple[str, str]]:
        query = sa.select(values.c.name, values.c.value).where(
            (values.c.prefix == self.prefix) & (values.c.kind == kind)
        )
        return [(row[0], row[1]) for row in conn.execute(query)]

    # -- transactions -----------------------------------------------------------------------
    def _run(self, work: Callable[[sa.Connection], T], *, write: bool = True) -> T:
        """Run ``work`` in one transaction, again if it lost a race."""
        self._prepare()
        for _ in range(ATTEMPTS):
            call: Call | None = None
            try:
                with self._failing(), self.engine.connect() as conn:
                    conn.execution_options(**{WRITE: write})
                    dbapi_connection = conn.connection.dbapi_connection
                    with self._watchdog.guard(dbapi_connection) as call, conn.begin():
                        return work(conn)
            except (Retry, StoreError) as exc:
                if call is not None and call.expired:
                    raise self.failed(f"no answer within {self.call_bound:g}s") from None
                if isinstance(exc, StoreError):
                    raise
        raise StoreError(f"pause store {self.display_url}: gave up after {ATTEMPTS} conflicts")

    def _prepare(self) -> None:
        """Fork safety, and the tables made (or checked) once per store."""
        if os.getpid() != self._pid:
            # A forked child must not share its parent's connections.
            self.engine.dispose(close=False)
            self._watchdog = Watchdog(self.call_bound)
            self._pid = os.getpid()
        if self._ready:
            return
        with self._ready_lock:
            for attempt in range(ATTEMPTS):
                if self._ready:
                    return
                try:
                    with self._failing():
                        prepare(self.engine)
                    self._ready = True
                except Retry:  # another process makes the tables at this moment
                    time.sleep(PREPARE_BACKOFF * (attempt + 1))
        if not self._ready:
            raise StoreError(f"pause store {self.display_url}: cannot make its tables, locked")

    def _server_time(self) -> float:
        return self._run(clock, write=False)

    @contextmanager
    def _failing(self) -> Iterator[None]:
        with failing(self.url):
            yield


def _name(hostname: str) -> str:
    if not hostname or len(hostname) > NAME_LENGTH:
        raise InvalidInput(f"a worker name must be 1-{NAME_LENGTH} characters: {hostname[:60]!r}")
    return hostname
