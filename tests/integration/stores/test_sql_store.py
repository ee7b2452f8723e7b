"""What the SQL store adds to the contract: its schema and its version, the errors of an
unreachable or misconfigured database (never showing the password), and ``pause init-store``.

The contract itself runs on SQLite, PostgreSQL and MariaDB in ``test_stores.py``,
``test_store_primitives.py`` and ``test_store_log.py``.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

import celery_pause
from celery_pause.errors import ConfigurationError, SchemaError, StoreError
from celery_pause.model.outcome import Outcome
from celery_pause.settings import PauseConfig
from celery_pause.stores import open_store
from celery_pause.stores.sql.schema import SCHEMA_VERSION
from celery_pause.stores.sql.store import SqlStore
from support.harness import AMQP_BROKER, REDIS_BROKER, ROOT, Cluster, free_port, wait_for
from support.observe import stays_quiet
from support.services import require
from support.stores import MARIADB_STORE, POSTGRESQL_STORE

SECRET = "s3cret-" + uuid.uuid4().hex


def config(url: str) -> PauseConfig:
    return PauseConfig(
        store_url=url, key_prefix="p", poll_interval=1, max_hold=60, worker_ttl=10, store_timeout=1
    )


def tables(url: str) -> set[str]:
    engine = sa.create_engine(url[len("db+") :])
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_first_use_creates_the_tables_with_their_schema_version(tmp_path: Path) -> None:
    # Given an empty SQLite database
    url = f"db+sqlite:///{tmp_path}/pause.db"
    store = SqlStore(url, "app")

    # When the store is first used
    assert store.read().state.generation == 0

    # Then its tables exist, the schema version is recorded, and init-store finds them
    assert tables(url) >= {"celery_pause_values", "celery_pause_log", "celery_pause_schema"}
    assert "the tables are there" in store.init()
    assert f"schema version {SCHEMA_VERSION}" in store.init()
    store.close()


def test_a_newer_schema_version_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    # Given tables written by a later release (schema version 2)
    url = f"db+sqlite:///{tmp_path}/pause.db"
    SqlStore(url, "app").init()
    engine = sa.create_engine(url[len("db+") :])
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE celery_pause_schema SET version = 2")

    # When this release opens the store; Then every use fails clearly, as a store error
    store = SqlStore(url, "app")
    for use in (
        store.read,
        store.init,
        lambda: store.update(lambda s, now: Outcome(s.with_holds(()), None)),
    ):
        with pytest.raises(SchemaError, match="schema version 2, newer than this celery-pause"):
            use()
    assert issubclass(SchemaError, StoreError)  # a worker holds every queue on it
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM celery_pause_values").scalar() == 0
    engine.dispose()


@pytest.mark.parametrize(
    "url",
    [
        f"db+postgresql+psycopg://root:{SECRET}@127.0.0.1:{free_port()}/test",
        f"db+mysql+pymysql://root:{SECRET}@127.0.0.1:{free_port()}/test",
    ],
    ids=["postgresql", "mariadb"],
)
def test_an_unreachable_database_is_a_store_error_without_the_password(url: str) -> None:
    # Given a store URL with a password, where nothing listens
    store = open_store(config(url))

    # When it is used; Then a StoreError names the database, the password masked
    with pytest.raises(StoreError) as caught:
        store.read()
    message = str(caught.value)
    assert SECRET not in message and ":**@127.0.0.1:" in message
    assert "refused" in message.lower() or "can't connect" in message.lower()
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_a_connection_the_database_dropped_is_replaced_without_an_error() -> None:
    # Given a PostgreSQL store whose pooled connection the server then terminates
    require("PostgreSQL", "127.0.0.1", 5432)
    store = SqlStore(POSTGRESQL_STORE, f"dropped-{uuid.uuid4().hex[:8]}")
    store.read()
    with store.engine.connect() as conn:
        pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
    admin = sa.create_engine(POSTGRESQL_STORE[len("db+") :])
    try:
        with admin.connect() as conn:
            assert conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar()
        # When the store is used again, Then the call succeeds on a new connection
        assert store.read().state.generation == 0
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT pg_backend_pid()").scalar() != pid
    finally:
        admin.dispose()
        store.close()


def test_a_wrong_password_or_database_is_a_store_error_without_the_password() -> None:
    require("MariaDB", "127.0.0.1", 3306)
    require("PostgreSQL", "127.0.0.1", 5432)
    wrong = MARIADB_STORE.replace("root@", f"root:{SECRET}@")
    with pytest.raises(StoreError) as caught:
        open_store(config(wrong)).read()
    assert "Access denied" in str(caught.value) and SECRET not in str(caught.value)

    missing = "db+postgresql+psycopg://root@127.0.0.1/no_such_database_here"
    with pytest.raises(StoreError, match="no_such_database_here"):
        open_store(config(missing)).read()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (f"db+postgresql+nosuchdriver://root:{SECRET}@h/db", "no driver"),
        (f"db+oracle://root:{SECRET}@h/db", "PostgreSQL, MySQL/MariaDB and SQLite"),
        ("db+sqlite://", "needs a file"),
        (f"db+://root:{SECRET}@h/db", "not a SQLAlchemy URL"),
        (f"dbx+postgresql://root:{SECRET}@h/db", r"db\+<SQLAlchemy URL>"),
    ],
    ids=["driver", "database-kind", "sqlite-in-memory", "not-a-url", "scheme"],
)
def test_a_misconfigured_url_is_a_configuration_error(url: str, expected: str) -> None:
    with pytest.raises(ConfigurationError, match=expected) as caught:
        open_store(config(url))
    assert SECRET not in str(caught.value)


def celery(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", "support.proj", "pause", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_init_store_creates_the_tables_once_and_refuses_a_newer_schema(tmp_path: Path) -> None:
    require("Redis", "127.0.0.1", 6379)
    url = f"db+sqlite:///{tmp_path}/pause.db"
    cluster = Cluster(broker=REDIS_BROKER, tmp=tmp_path, store=url)
    try:
        # When the operator runs init-store twice
        first = celery(cluster.env(), "init-store")
        second = celery(cluster.env(), "init-store")

        # Then the first creates the tables and the second finds them
        assert first.returncode == 0, first.stderr
        assert "created the tables" in first.stdout and f"db+sqlite:///{tmp_path}" in first.stdout
        assert second.returncode == 0 and "the tables are there" in second.stdout

        # When the tables carry a newer schema version, Then it refuses, exit 1
        engine = sa.create_engine(url[len("db+") :])
        with engine.begin() as conn:
            conn.exec_driver_sql("UPDATE celery_pause_schema SET version = 7")
        engine.dispose()
        newer = celery(cluster.env(), "init-store")
        assert newer.returncode == 1
        assert "schema version 7, newer than this celery-pause" in newer.stderr
        assert "Traceback" not in newer.stderr

        # And against an unreachable database it fails without showing the password
        down_url = f"db+postgresql+psycopg://root:{SECRET}@127.0.0.1:1/x"
        env = {**cluster.env(), "PAUSE_TEST_STORE": down_url}
        down = celery(env, "init-store")
        assert down.returncode == 1 and "cannot prepare the pause store" in down.stderr
        assert SECRET not in down.stdout + down.stderr and ":**@127.0.0.1:1" in down.stderr
    finally:
        cluster.close()


def test_a_worker_that_cannot_reach_its_sql_store_holds_every_queue(tmp_path: Path) -> None:
    # Given a worker whose SQL store is down
    require("Redis", "127.0.0.1", 6379)
    url = f"db+postgresql+psycopg://root:{SECRET}@127.0.0.1:{free_port()}/test"
    cluster = Cluster(broker=REDIS_BROKER, tmp=tmp_path, store=url)
    try:
        worker = cluster.worker("w1")
        log = wait_for(
            lambda: worker.log_count("cannot read the pause state") and worker.log.read_text(),
            timeout=60,
            what="the worker to report the unreachable store",
        )

        # When tasks arrive; Then none starts, and the log names the store masked
        cluster.send("t0")
        cluster.send("t1")
        stays_quiet(cluster, 0.0, 1.5)
        worker.check_alive()
        assert SECRET not in log and ":**@127.0.0.1:" in log
    finally:
        cluster.close()


def test_workers_on_rabbitmq_pause_and_resume_through_the_cli_with_postgresql(
    tmp_path: Path,
) -> None:
    # Given two workers on RabbitMQ whose pause state lives in PostgreSQL, busy with tasks
    require("RabbitMQ", "127.0.0.1", 5672)
    require("PostgreSQL", "127.0.0.1", 5432)
    require("Redis", "127.0.0.1", 6379)  # where the test tasks record their starts
    cluster = Cluster(broker=AMQP_BROKER, tmp=tmp_path, store=POSTGRESQL_STORE)
    try:
        workers = [cluster.worker(name) for name in ("w1", "w2")]
        for worker in workers:
            worker.wait_applied()
        sent = [cluster.send(f"t{i}", 0.3) for i in range(12)]
        cluster.wait_records(2)

        # When the operator pauses through the CLI and waits for it
        paused = celery(cluster.env(), "--wait", "--reason", "maintenance")
        window_start = time.time()

        # Then both workers confirm, and nothing starts while paused
        assert paused.returncode == 0, paused.stderr
        assert "Confirmed by 2 workers: nothing in scope is running." in paused.stdout
        sent += [cluster.send(f"late{i}") for i in range(4)]
        stays_quiet(cluster, window_start, 2.0)
        status = celery_pause.status(cluster.app)
        assert status.paused.everything and status.store == POSTGRESQL_STORE

        # When resumed through the CLI, every task runs, exactly once
        resuming_at = time.time()
        resumed = subprocess.run(
            [sys.executable, "-m", "celery", "-A", "support.proj", "resume"],
            cwd=ROOT, env=cluster.env(), capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert resumed.returncode == 0, resumed.stderr
        records = cluster.wait_records(len(sent))
        assert not [r for r in records if window_start <= r["started"] < resuming_at]
        assert sorted(r["id"] for r in records) == sorted(sent)
    finally:
        cluster.close()


@pytest.mark.parametrize(
    ("url", "service", "port"),
    [(POSTGRESQL_STORE, "PostgreSQL", 5432), (MARIADB_STORE, "MariaDB", 3306)],
    ids=["postgresql", "mariadb"],
)
def test_workers_apply_a_pause_committed_by_another_client_at_its_broadcast(
    tmp_path: Path, url: str, service: str, port: int
) -> None:
    # Given two workers on RabbitMQ, their state in the database, busy with short tasks, and
    # a poll interval far longer than the wait: only the read at the broadcast can confirm
    require("RabbitMQ", "127.0.0.1", 5672)
    require(service, "127.0.0.1", port)
    require("Redis", "127.0.0.1", 6379)  # where the test tasks record their starts
    cluster = Cluster(broker=AMQP_BROKER, tmp=tmp_path, store=url, poll_interval=60.0)
    try:
        workers = [cluster.worker(name) for name in ("w1", "w2")]
        for worker in workers:
            worker.wait_applied()
        sent = [cluster.send(f"t{i}", 0.02) for i in range(100)]
        wait_for(
            lambda: {r["worker"] for r in cluster.records()} >= {w.hostname for w in workers},
            timeout=30,
            what="both workers to start tasks",
        )

        # When this process (another client than the workers) commits a pause and waits
        result = celery_pause.pause(cluster.app, wait=True, timeout=5)
        confirmed_at = time.time()

        # Then both workers confirmed the generation just committed, read at the broadcast
        # (the next poll is a minute away), and nothing starts any more
        assert {w.hostname for w in result.workers} == {w.hostname for w in workers}
        assert all(w.generation >= result.generation for w in result.workers)
        stays_quiet(cluster, confirmed_at, 0.5)

        # And on resume every task runs, exactly once
        celery_pause.resume(cluster.app)
        records = cluster.wait_records(len(sent))
        assert sorted(r["id"] for r in records) == sorted(sent)
    finally:
        cluster.close()
