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
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

import redis
import sqlalchemy as sa

from celery_pause.stores import load_store_class
from celery_pause.stores.aliases import alias_for
from celery_pause.stores.base import Store
from celery_pause.stores.file import FileStore
from celery_pause.stores.memory import MemoryStore, forget_all
from celery_pause.stores.redis import RedisStore, glob_escape
from celery_pause.stores.redis_cluster import RedisClusterStore
from celery_pause.stores.sql.schema import log, values
from celery_pause.stores.sql.store import SqlStore

from .forwarding import ForwardingStore as ForwardingStore

if TYPE_CHECKING:
    from .redis_cluster import ClusterSetup

REDIS_STORE = "redis://127.0.0.1:6379/14"
POSTGRESQL_STORE = "db+postgresql+psycopg://root@127.0.0.1/test"
MARIADB_STORE = "db+mysql+pymysql://root@127.0.0.1/test?charset=utf8mb4"

T = TypeVar("T")
Spec = tuple[str, str, str]
"""``(kind, url, prefix)`` of one store."""
STATE, RECORD, LOG = "state", "record", "log"
"""What :meth:`Adapter.raw` and :meth:`Adapter.write_raw` reach: the state, a record, or a log
as the stores of earlier releases kept it (a Redis list, a file of lines, the SQL log table)."""


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
        """The stored bytes of the state, a record or a log as earlier releases kept it (its
        entries joined by newlines, newest first)."""

    @abstractmethod
    def write_raw(self, store: Store, kind: str, name: str, raw: bytes) -> None:
        """Store ``raw`` as the state or a record, or add it as the newest entry of a log as
        earlier releases kept it."""

    def rows(self, store: Store) -> list[tuple[str, str]]:
        """``(kind, name)`` of every value the store holds under its prefix, sorted (the
        stores that keep each value apart: a row, a key)."""
        raise NotImplementedError(f"{self.name} does not list its values")


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
            return store.client.get(store.record_key(name))  # type: ignore[no-any-return]
        return store.client.get(store.state_key)  # type: ignore[no-any-return]

    def write_raw(self, store: Store, kind: str, name: str, raw: bytes) -> None:
        assert isinstance(store, RedisStore)
        if kind == LOG:
            store.client.lpush(f"{store.prefix}:log:{name}", raw)
        elif kind == RECORD:
            store.client.set(store.record_key(name), raw)
        else:
            store.client.set(store.state_key, raw)


class RedisClusterAdapter(Adapter):
    """The Redis Cluster store on the run's private cluster (started at its first use)."""

    name, store_class = "redis-cluster", RedisClusterStore

    def url(self, tmp: Path) -> str:
        return _shared_cluster().url

    def purge(self, url: str, prefix: str) -> None:
        client = _shared_cluster().client()
        with suppress(redis.RedisError):
            for start in (f"{{{prefix}}}:", f"{prefix}:"):
                for key in client.scan_iter(match=glob_escape(start) + "*"):
                    client.delete(key)
        client.close()

    def raw(self, store: Store, kind: str, name: str) -> bytes | None:
        client = self._cluster(store)
        if kind == LOG:
            return b"\n".join(client.lrange(f"{store.prefix}:log:{name}", 0, -1)) or None
        if kind == RECORD:
            return client.get(self._store(store).record_key(name))  # type: ignore[no-any-return]
        return client.get(self._store(store).state_key)  # type: ignore[no-any-return]

    def write_raw(self, store: Store, kind: str, name: str, raw: bytes) -> None:
        client = self._cluster(store)
        if kind == LOG:
            client.lpush(f"{store.prefix}:log:{name}", raw)
        elif kind == RECORD:
            client.set(self._store(store).record_key(name), raw)
        else:
            client.set(self._store(store).state_key, raw)

    def rows(self, store: Store) -> list[tuple[str, str]]:
        """Every key of the store's on every primary: ``{<prefix>}:<kind>`` as ``(kind, "")``,
        ``<prefix>:<kind>:<name>`` as ``(kind, name)``."""
        client, prefix = self._cluster(store), store.prefix
        tagged = f"{{{prefix}}}:"
        found: list[tuple[str, str]] = []
        for pattern in (tagged, f"{prefix}:"):
            for raw in client.scan_iter(match=glob_escape(pattern) + "*"):
                key = raw.decode()[len(pattern) :]
                kind, _, name = key.partition(":")
                found.append((key, "") if pattern == tagged else (kind, name))
        return sorted(found)

    @staticmethod
    def _store(store: Store) -> RedisClusterStore:
        assert isinstance(store, RedisClusterStore)
        return store

    def _cluster(self, store: Store) -> Any:
        """The store's own cluster client."""
        return self._store(store).cluster


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
        assert isinstance(store, MemoryStore) and kind != LOG, "no earlier layout in memory"
        return store.space.records.get(name) if kind == RECORD else store.space.state

    def write_raw(self, store: Store, kind: str, name: str, raw: bytes) -> None:
        assert isinstance(store, MemoryStore) and kind != LOG, "no earlier layout in memory"
        if kind == RECORD:
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

    def rows(self, store: Store) -> list[tuple[str, str]]:
        query = sa.select(values.c.kind, values.c.name).where(values.c.prefix == store.prefix)
        with _engine(store).connect() as conn:
            return sorted((row[0], row[1]) for row in conn.execute(query))


ADAPTERS: dict[str, Adapter] = {
    adapter.name: adapter
    for adapter in (
        RedisAdapter(),
        RedisClusterAdapter(),
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


def _shared_cluster() -> ClusterSetup:
    """The run's private Redis Cluster (imported here: it runs on the harness, which imports
    this module)."""
    from .redis_cluster import shared_cluster

    return shared_cluster()


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
    """``(kind, name)`` of every value under the store's prefix, sorted: the SQL store's
    rows, the Redis Cluster store's keys (:meth:`Adapter.rows`)."""
    return adapter_for(store).rows(store)


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
