"""A store that forgets the pause (a restart without persistence, a flush, a deleted key or
row) does not un-pause: the worker that knew it writes it back, and only an operator's resume
lifts it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa

import celery_pause
from celery_pause.stores import store_for
from celery_pause.stores.redis import RedisStore
from celery_pause.stores.sql.schema import values
from support.harness import Cluster
from support.holds import wait_restored
from support.observe import stays_quiet
from support.redis_server import RedisServer
from support.services import require
from support.stores import POSTGRESQL_STORE

Forget = Callable[[Cluster], None]


SERVERS: dict[str, RedisServer] = {}
"""The private servers running, by store URL (for :func:`restart`)."""


def restart(cluster: Cluster) -> None:
    SERVERS[cluster.store_url].restart()


def flushdb(cluster: Cluster) -> None:
    redis.Redis.from_url(cluster.store_url).flushdb()


def delete_key(cluster: Cluster) -> None:
    store = store_for(cluster.app)
    assert isinstance(store, RedisStore)
    assert redis.Redis.from_url(cluster.store_url).delete(store.state_key) == 1


def delete_row(cluster: Cluster) -> None:
    prefix = store_for(cluster.app).prefix
    engine = sa.create_engine(POSTGRESQL_STORE[len("db+") :])
    try:
        with engine.begin() as conn:
            where = (values.c.prefix == prefix) & (values.c.kind == "state")
            assert conn.execute(sa.delete(values).where(where)).rowcount == 1
    finally:
        engine.dispose()


@contextmanager
def private_redis() -> Iterator[str]:
    if not RedisServer.available():
        pytest.skip("needs redis-server")
    with RedisServer() as server:
        SERVERS[server.url()] = server
        try:
            yield server.url()
        finally:
            del SERVERS[server.url()]


@contextmanager
def postgresql() -> Iterator[str]:
    require("PostgreSQL", "127.0.0.1", 5432)
    yield POSTGRESQL_STORE


@pytest.mark.parametrize(
    ("store", "forget"),
    [
        (private_redis, restart),
        (private_redis, flushdb),
        (private_redis, delete_key),
        (postgresql, delete_row),
    ],
    ids=["redis-restart", "redis-flushdb", "redis-del-state-key", "postgresql-delete-state-row"],
)
def test_a_store_that_forgets_the_pause_gets_it_back_from_the_worker(
    store: Callable[[], AbstractContextManager[str]], forget: Forget, redis_url: str, tmp_path: Path
) -> None:
    with store() as url:
        cluster = Cluster(broker=redis_url, tmp=tmp_path, store=url)
        try:
            # Given a paused worker with tasks waiting
            worker = cluster.worker("w1")
            worker.wait_applied()
            window_start = time.time()
            paused = celery_pause.pause(
                cluster.app, reason="deploy", by="alice@ops", resume_after=3600, wait=True
            )
            sent = [cluster.send(f"t{i}") for i in range(10)]

            # When the store forgets the state
            forget(cluster)

            # Then the worker writes the hold back as placed and nothing starts
            lost = "the store held no state"
            wait_restored(cluster, paused.hold, by=worker.hostname, lost=lost)
            stays_quiet(cluster, window_start, 2.0)
            assert worker.log_count("restored the 1 hold(s)") == 1

            # And the operator's resume lifts it: every task runs exactly once
            cluster.resume_and_check(sent, window_start)
        finally:
            cluster.close()


def test_a_failover_that_lost_the_last_write_gets_it_back_from_the_worker(
    redis_url: str, tmp_path: Path
) -> None:
    with private_redis() as url:
        cluster = Cluster(broker=redis_url, tmp=tmp_path, store=url)
        try:
            # Given a worker that applied two pauses, the second of which the store then loses
            # (as a replica promoted before it got the last write would)
            worker = cluster.worker("w1")
            worker.wait_applied()
            window_start = time.time()
            first = celery_pause.pause(cluster.app, queues=["other"], reason="first")
            store = store_for(cluster.app)
            assert isinstance(store, RedisStore)
            client = redis.Redis.from_url(url)
            older = client.get(store.state_key)
            second = celery_pause.pause(
                cluster.app, queues=[cluster.queue()], reason="second", wait=True
            )
            sent = [cluster.send(f"t{i}") for i in range(10)]
            client.set(store.state_key, older)

            # Then the worker writes both back, above the generation it knew, and nothing starts
            lost = f"the store held an older generation {first.generation}"
            state = wait_restored(cluster, first.hold, second.hold, by=worker.hostname, lost=lost)
            assert state.generation == second.generation + 1
            stays_quiet(cluster, window_start, 2.0)

            # And the operator's resume lifts it: every task runs exactly once
            cluster.resume_and_check(sent, window_start)
        finally:
            cluster.close()
