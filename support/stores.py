"""Every kind of store for the contract tests: opening one under a private prefix,
reading and writing what it holds around its own code, and cleaning up after."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import redis

from celery_pause.stores.base import Store
from celery_pause.stores.file import FileStore
from celery_pause.stores.memory import MemoryStore, forget_all
from celery_pause.stores.redis import RedisStore

REDIS_STORE = "redis://127.0.0.1:6379/14"
POSTGRESQL_STORE = "db+postgresql+psycopg://root@127.0.0.1/test"
MARIADB_STORE = "db+mysql+pymysql://root@127.0.0.1/test?charset=utf8mb4"
KINDS = ("redis", "file", "memory", "sqlite", "postgresql", "mariadb")
SHARED_KINDS = tuple(kind for kind in KINDS if kind != "memory")
"""The stores several processes can share."""
SERVICES = {
    "redis": ("Redis", 6379),
    "postgresql": ("PostgreSQL", 5432),
    "mariadb": ("MariaDB", 3306),
}

T = TypeVar("T")
Spec = tuple[str, str, str]
"""``(kind, url, prefix)`` of one store."""


def store_url(kind: str, tmp: Path) -> str:
    return {
        "redis": REDIS_STORE,
        "file": f"file://{tmp}/store",
        "memory": "memory://",
        "sqlite": f"db+sqlite:///{tmp}/store.db",
        "postgresql": POSTGRESQL_STORE,
        "mariadb": MARIADB_STORE,
    }[kind]


def make_store(kind: str, url: str, prefix: str) -> Store:
    if kind == "redis":
        return RedisStore(url, prefix)
    if kind == "file":
        return FileStore(url, prefix)
    if kind == "memory":
        return MemoryStore(url, prefix)
    from celery_pause.stores.sql.store import SqlStore

    return SqlStore(url, prefix)


@contextmanager
def private(kind: str, url: str, prefix: str) -> Iterator[Spec]:
    """The spec of a store under ``prefix``; everything under it is removed afterwards."""
    try:
        yield kind, url, prefix
    finally:
        purge(url, prefix)


def purge(url: str, prefix: str) -> None:
    """Remove what the store at ``url`` holds under ``prefix`` (files are left to tmp)."""
    if url.startswith("redis"):
        client = redis.Redis.from_url(url)
        with suppress(redis.RedisError):
            for key in client.scan_iter(f"{prefix}:*"):
                client.delete(key)
    elif url.startswith("memory"):
        forget_all()
    elif url.startswith("db+"):
        import sqlalchemy as sa

        from celery_pause.stores.sql.schema import log, values

        engine = sa.create_engine(url[len("db+") :])
        try:
            with suppress(sa.exc.SQLAlchemyError), engine.begin() as conn:
                conn.execute(sa.delete(values).where(values.c.prefix == prefix))
                conn.execute(sa.delete(log).where(log.c.prefix == prefix))
        finally:
            engine.dispose()


# -- what a store holds, read and written around its own code ---------------------------------
def raw_value(store: Store, kind: str, name: str) -> bytes | None:
    """The stored bytes of the state (``state``), a record (``record``) or a log (``log``,
    its entries joined by newlines, newest first)."""
    if isinstance(store, RedisStore):
        if kind == "log":
            return b"\n".join(store.client.lrange(f"{store.prefix}:log:{name}", 0, -1)) or None
        if kind == "record":
            return store.client.hget(store.records_key, name)  # type: ignore[no-any-return]
        return store.client.get(store.state_key)  # type: ignore[no-any-return]
    if isinstance(store, FileStore):
        path = _file_path(store, kind, name)
        return path.read_bytes() if path.exists() else None
    if isinstance(store, MemoryStore):
        space = store.space
        if kind == "log":
            return b"\n".join(space.logs.get(name, [])) or None
        return space.records.get(name) if kind == "record" else space.state
    return _sql_raw(store, kind, name)


def write_raw(store: Store, kind: str, name: str, raw: bytes) -> None:
    """Store ``raw`` as the state or a record, or add it as the newest log entry."""
    if isinstance(store, RedisStore):
        if kind == "log":
            store.client.lpush(f"{store.prefix}:log:{name}", raw)
        elif kind == "record":
            store.client.hset(store.records_key, name, raw)
        else:
            store.client.set(store.state_key, raw)
    elif isinstance(store, FileStore):
        path = _file_path(store, kind, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind == "log":
            with open(path, "ab") as handle:
                handle.write(raw + b"\n")
        else:
            path.write_bytes(raw)
    elif isinstance(store, MemoryStore):
        if kind == "log":
            store.space.logs[name] = [raw, *store.space.logs.get(name, [])]
        elif kind == "record":
            store.space.records[name] = raw
        else:
            store.space.state = raw
    else:
        _sql_write(store, kind, name, raw)


def _file_path(store: FileStore, kind: str, name: str) -> Path:
    if kind == "log":
        return store.root / f"log-{name}.jsonl"
    if kind == "record":
        return store.records_dir / f"{quote(name, safe='')}.json"
    return store.state_path


def _sql_raw(store: Store, kind: str, name: str) -> bytes | None:
    import sqlalchemy as sa

    from celery_pause.stores.sql.schema import log, values
    from celery_pause.stores.sql.store import SqlStore

    assert isinstance(store, SqlStore)
    with store.engine.connect() as conn:
        if kind == "log":
            where = (log.c.prefix == store.prefix) & (log.c.name == name)
            rows = conn.execute(sa.select(log.c.entry).where(where).order_by(log.c.id.desc()))
            return "\n".join(rows.scalars()).encode() or None
        where = (values.c.prefix == store.prefix) & (values.c.kind == kind)
        value = conn.execute(sa.select(values.c.value).where(where & (values.c.name == name)))
        text = value.scalar()
    return None if text is None else str(text).encode()


def _sql_write(store: Store, kind: str, name: str, raw: bytes) -> None:
    import sqlalchemy as sa

    from celery_pause.stores.sql.schema import log, values
    from celery_pause.stores.sql.store import SqlStore

    assert isinstance(store, SqlStore)
    store.read()  # the tables exist from here on
    with store.engine.begin() as conn:
        if kind == "log":
            conn.execute(sa.insert(log).values(prefix=store.prefix, name=name, entry=raw.decode()))
            return
        where = (values.c.prefix == store.prefix) & (values.c.kind == kind)
        conn.execute(sa.delete(values).where(where & (values.c.name == name)))
        row = {"prefix": store.prefix, "kind": kind, "name": name, "value": raw.decode()}
        conn.execute(sa.insert(values).values(**row))


def sql_rows(store: Store) -> list[tuple[str, str]]:
    """``(kind, name)`` of every value row under the store's prefix, sorted."""
    import sqlalchemy as sa

    from celery_pause.stores.sql.schema import values
    from celery_pause.stores.sql.store import SqlStore

    assert isinstance(store, SqlStore)
    query = sa.select(values.c.kind, values.c.name).where(values.c.prefix == store.prefix)
    with store.engine.connect() as conn:
        return sorted((row[0], row[1]) for row in conn.execute(query))


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
