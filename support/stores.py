"""Every kind of store for the contract tests: one adapter per kind, in one registry.

An adapter says where a store of its kind lives in the tests (its URL), which service
must run, and how to read and write what the store holds around its own code and to
clean up after it. The store itself is opened through the package's alias table, so a
new store joins the contract suite (``tests/integration/stores``) with one entry in
:data:`ADAPTERS`.
"""

from __future__ import annotations

import multiprocessing
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import redis
import sqlalchemy as sa

from celery_pause.model.report import WorkerReport
from celery_pause.stores import base, load_store_class
from celery_pause.stores.aliases import alias_for
from celery_pause.stores.base import R, Store
from celery_pause.stores.file import FileStore
from celery_pause.stores.memory import MemoryStore, forget_all
from celery_pause.stores.redis import RedisStore
from celery_pause.stores.sql.schema import log, values
from celery_pause.stores.sql.store import SqlStore

REDIS_STORE = "redis://127.0.0.1:6379/14"
POSTGRESQL_STORE = "db+postgresql+psycopg://root@127.0.0.1/test"
MARIADB_STORE = "db+mysql+pymysql://root@127.0.0.1/test?charset=utf8mb4"

T = TypeVar("T")
Spec = tuple[str, str, str]
"""``(kind, url, prefix)`` of one store."""
STATE, RECORD, LOG = "state", "record", "log"
"""What :meth:`Adapter.raw` and :meth:`Adapter.write_raw` reach: the state, a record, a log."""


class Adapter(ABC):
    """One kind of store as the tests use it."""

    name: str
    store_class: type[Store]
    shared = True
    """Whether several processes can share the store."""
    service: tuple[str, int] | None = None
    """The service (name, port on 127.0.0.1) the store needs, if any."""

    @abstractmethod
    def url(self, tmp: Path) -> str:
        """The store's URL in a test whose scratch directory is ``tmp``."""

    def open(self, url: str, prefix: str) -> Store:
        """The store at ``url``, opened as the package opens it (through its alias table)."""
        alias = alias_for(url)
        assert alias is not None, f"no store serves {url}"
        return load_store_class(alias).open(url, prefix, timeout=2.0, options={})

    @abstractmethod
    def purge(self, url: str, prefix: str) -> None:
        """Remove what the store at ``url`` holds under ``prefix``."""

    @abstractmethod
    def raw(self, store: Store, kind: str, name: str) -> bytes | None:
        """The stored bytes of the state, a record or a log (its entries joined by newlines,
        newest first)."""

    @abstractmethod
    def write_raw(self, store: Store, kind: str, name: str, raw: bytes) -> None:
        """Store ``raw`` as the state or a record, or add it as the newest log entry."""


class RedisAdapter(Adapter):
    name, store_class, service = "redis", RedisStore, ("Redis", 6379)

    def url(self, tmp: Path) -> str:
        return REDIS_STORE

    def purge(self, url: str, prefix: str) -> None:
        client = redis.Redis.from_url(url)
        with suppress(redis.RedisError):
            for key in client.scan_iter(f"{prefix}:*"):
                client.delete(key)

    def raw(self, store: Store, kind: str, name: str) -> bytes | None:
        assert isinstance(store, RedisStore)
        if kind == LOG:
            return b"\n".join(store.client.lrange(f"{store.prefix}:log:{name}", 0, -1)) or None
        if kind == RECORD:
            return store.client.hget(store.records_key, name)  # type: ignore[no-any-return]
        return store.client.get(store.state_key)  # type: ignore[no-any-return]

    def write_raw(self, store: Store, kind: str, name: str, raw: bytes) -> None:
        assert isinstance(store, RedisStore)
        if kind == LOG:
            store.client.lpush(f"{store.prefix}:log:{name}", raw)
        elif kind == RECORD:
            store.client.hset(store.records_key, name, raw)
        else:
            store.client.set(store.state_key, raw)


class FileAdapter(Adapter):
    name, store_class = "file", FileStore

    def url(self, tmp: Path) -> str:
        return f"file://{tmp}/store"

    def purge(self, url: str, prefix: str) -> None:
        """Nothing: the files live in the test's scratch directory."""

    def raw(self, store: Store, kind: str, name: str) -> bytes | None:
        path = self._path(store, kind, name)
        return path.read_bytes() if path.exists() else None

    def write_raw(self, store: Store, kind: str, name: str, raw: bytes) -> None:
        path = self._path(store, kind, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind == LOG:
            with open(path, "ab") as handle:
                handle.write(raw + b"\n")
        else:
            path.write_bytes(raw)

    def _path(self, store: Store, kind: str, name: str) -> Path:
        assert isinstance(store, FileStore)
        if kind == LOG:
            return store.root / f"log-{name}.jsonl"
        if kind == RECORD:
            return store.records_dir / f"{quote(name, safe='')}.json"
        return store.state_path


class MemoryAdapter(Adapter):
    name, store_class, shared = "memory", MemoryStore, False

    def url(self, tmp: Path) -> str:
        return "memory://"

    def purge(self, url: str, prefix: str) -> None:
        forget_all()

    def raw(self, store: Store, kind: str, name: str) -> bytes | None:
        assert isinstance(store, MemoryStore)
        space = store.space
        if kind == LOG:
            return b"\n".join(space.logs.get(name, [])) or None
        return space.records.get(name) if kind == RECORD else space.state

    def write_raw(self, store: Store, kind: str, name: str, raw: bytes) -> None:
        assert isinstance(store, MemoryStore)
        if kind == LOG:
            store.space.logs[name] = [raw, *store.space.logs.get(name, [])]
        elif kind == RECORD:
            store.space.records[name] = raw
        else:
            store.space.state = raw


class SqlAdapter(Adapter):
    """The SQL store on one database (SQLite, PostgreSQL or MariaDB)."""

    def __init__(self, name: str, url: str, service: tuple[str, int] | None = None) -> None:
        self.name, self.store_class, self.service = name, SqlStore, service
        self._url = url

    def url(self, tmp: Path) -> str:
        return self._url.format(tmp=tmp)

    def purge(self, url: str, prefix: str) -> None:
        engine = sa.create_engine(url[len("db+") :])
        try:
            with suppress(sa.exc.SQLAlchemyError), engine.begin() as conn:
                conn.execute(sa.delete(values).where(values.c.prefix == prefix))
                conn.execute(sa.delete(log).where(log.c.prefix == prefix))
        finally:
            engine.dispose()

    def raw(self, store: Store, kind: str, name: str) -> bytes | None:
        engine = _engine(store)
        with engine.connect() as conn:
            if kind == LOG:
                where = (log.c.prefix == store.prefix) & (log.c.name == name)
                rows = conn.execute(sa.select(log.c.entry).where(where).order_by(log.c.id.desc()))
                return "\n".join(rows.scalars()).encode() or None
            where = (values.c.prefix == store.prefix) & (values.c.kind == kind)
            value = conn.execute(sa.select(values.c.value).where(where & (values.c.name == name)))
            text = value.scalar()
        return None if text is None else str(text).encode()

    def write_raw(self, store: Store, kind: str, name: str, raw: bytes) -> None:
        engine = _engine(store)
        store.read()  # the tables exist from here on
        with engine.begin() as conn:
            if kind == LOG:
                row = {"prefix": store.prefix, "name": name, "entry": raw.decode()}
                conn.execute(sa.insert(log).values(**row))
                return
            where = (values.c.prefix == store.prefix) & (values.c.kind == kind)
            conn.execute(sa.delete(values).where(where & (values.c.name == name)))
            row = {"prefix": store.prefix, "kind": kind, "name": name, "value": raw.decode()}
            conn.execute(sa.insert(values).values(**row))


ADAPTERS: dict[str, Adapter] = {
    adapter.name: adapter
    for adapter in (
        RedisAdapter(),
        FileAdapter(),
        MemoryAdapter(),
        SqlAdapter("sqlite", "db+sqlite:///{tmp}/store.db"),
        SqlAdapter("postgresql", POSTGRESQL_STORE, ("PostgreSQL", 5432)),
        SqlAdapter("mariadb", MARIADB_STORE, ("MariaDB", 3306)),
    )
}
"""Every kind of store the contract suite runs against, by name."""

KINDS = tuple(ADAPTERS)
SHARED_KINDS = tuple(name for name, adapter in ADAPTERS.items() if adapter.shared)
"""The stores several processes can share."""


def adapter_for(store: Store) -> Adapter:
    """The adapter of ``store``'s class."""
    return next(a for a in ADAPTERS.values() if type(store) is a.store_class)


def make_store(kind: str, url: str, prefix: str) -> Store:
    return ADAPTERS[kind].open(url, prefix)


@contextmanager
def private(kind: str, url: str, prefix: str) -> Iterator[Spec]:
    """The spec of a store under ``prefix``; everything under it is removed afterwards."""
    try:
        yield kind, url, prefix
    finally:
        ADAPTERS[kind].purge(url, prefix)


def purge(url: str, prefix: str) -> None:
    """Remove what the store at ``url`` holds under ``prefix`` (files are left to tmp)."""
    alias = alias_for(url)
    store_class = None if alias is None else load_store_class(alias)
    for adapter in ADAPTERS.values():
        if adapter.store_class is store_class:
            adapter.purge(url, prefix)
            return


def raw_value(store: Store, kind: str, name: str) -> bytes | None:
    """The stored bytes of the state (``state``), a record (``record``) or a log (``log``,
    its entries joined by newlines, newest first)."""
    return adapter_for(store).raw(store, kind, name)


def write_raw(store: Store, kind: str, name: str, raw: bytes) -> None:
    """Store ``raw`` as the state or a record, or add it as the newest log entry."""
    adapter_for(store).write_raw(store, kind, name, raw)


def sql_rows(store: Store) -> list[tuple[str, str]]:
    """``(kind, name)`` of every value row under the store's prefix, sorted."""
    query = sa.select(values.c.kind, values.c.name).where(values.c.prefix == store.prefix)
    with _engine(store).connect() as conn:
        return sorted((row[0], row[1]) for row in conn.execute(query))


def _engine(store: Store) -> sa.Engine:
    assert isinstance(store, SqlStore)
    return store.engine


def run_in_processes(spec: Spec, job: Callable[..., T], *args: Any, processes: int) -> list[T]:
    """Run ``job(store, *args)`` in ``processes`` forked processes at once; their results."""
    context = multiprocessing.get_context("fork")
    with context.Pool(processes) as pool:
        results = [pool.apply_async(_job, (spec, job, args)) for _ in range(processes)]
        return [result.get(timeout=120) for result in results]


def _job(spec: Spec, job: Callable[..., T], args: tuple[Any, ...]) -> T:
    opened = make_store(*spec)
    try:
        return job(opened, *args)
    finally:
        opened.close()


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
