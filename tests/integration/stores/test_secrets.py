"""A password in the store URL never shows: not in worker logs, errors, status or ``inspect conf``.

The store is a private ``redis-server`` that requires a password; the broker is the
shared Redis (no password), so every password in sight belongs to the store URL.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery.app.utils import filter_hidden_settings

import celery_pause
from celery_pause.errors import ConfigurationError, StoreError
from celery_pause.stores import store_for
from celery_pause.stores.file import FileStore
from support.harness import REDIS_BROKER, Cluster, free_port, wait_for
from support.proj import make_app
from support.redis_server import RedisServer

SECRET = "s3cret-" + uuid.uuid4().hex
WRONG = "wr0ng-" + uuid.uuid4().hex


@pytest.fixture
def server(redis_url: str) -> Iterator[RedisServer]:
    if not RedisServer.available():
        pytest.skip("redis-server is not installed")
    with RedisServer(password=SECRET) as running:
        yield running


def assert_hidden(text: str, *secrets: str) -> None:
    for secret in secrets or (SECRET, WRONG):
        assert secret not in text, f"a password leaked into: {text[:300]}"


def test_a_worker_with_a_password_in_the_store_url_never_shows_it(
    server: RedisServer, tmp_path: Path
) -> None:
    # Given a worker whose store URL carries a password, running at debug level
    cluster = Cluster(broker=REDIS_BROKER, tmp=tmp_path, store=server.url())
    try:
        worker = cluster.worker("w1", args=("-l", "debug"))
        worker.wait_applied()
        celery_pause.pause(cluster.app, wait=True, timeout=30)

        # When the status is read, and the worker's configuration inspected
        status = celery_pause.status(cluster.app)
        conf = cluster.app.control.inspect([worker.hostname], timeout=5).conf() or {}
        worker_conf = conf.get(worker.hostname)
        report = cluster.app.conf.humanize(with_defaults=False, censored=True)

        # Then the store shows with its password masked, and nowhere in full
        assert status.store == f"redis://:**@127.0.0.1:{server.port}/0"
        assert worker_conf is not None, "the worker did not answer inspect conf"
        assert_hidden(repr(status))
        assert_hidden(repr(worker_conf))
        assert_hidden(report)
        assert_hidden(repr(store_for(cluster.app)))
        celery_pause.resume(cluster.app)
        worker.stop()
        log = worker.log.read_text(errors="replace")
        assert "generation" in log  # the worker did log its pause and resume
        assert_hidden(log)
    finally:
        cluster.close()


def test_a_worker_with_a_wrong_password_logs_the_failure_without_it(
    server: RedisServer, tmp_path: Path
) -> None:
    # Given a worker whose store URL carries a wrong password
    cluster = Cluster(broker=REDIS_BROKER, tmp=tmp_path, store=server.url(password=WRONG))
    try:
        worker = cluster.worker("w1")

        # When it starts; Then it says it holds every queue, naming the store masked
        def logged() -> str | None:
            worker.check_alive()
            text = worker.log.read_text(errors="replace")
            return text if "holding every queue" in text else None

        log = wait_for(logged, timeout=60, what="the worker to log the store failure")
        assert f"redis://:**@127.0.0.1:{server.port}/0" in log
        assert_hidden(log)

        # ... and a caller with the same wrong URL gets a clear error without it
        with pytest.raises(StoreError) as caught:
            celery_pause.status(cluster.app)
        assert "**" in str(caught.value)
        assert_hidden(str(caught.value))
        assert caught.value.__cause__ is None and caught.value.__suppress_context__
    finally:
        cluster.store_url = server.url()  # clean up with the right password
        cluster.close()


@pytest.mark.parametrize(
    "url",
    [
        f"redis://:{SECRET}@127.0.0.1:{free_port()}/0",  # nothing listens there
        f"redis://user:{SECRET}@127.0.0.1:{free_port()}/0",
        f"unix://:{SECRET}@/nonexistent/redis.sock",
        # several hosts (kombu cannot parse them) and the password in the query
        f"redis+cluster://127.0.0.1:{free_port()},127.0.0.1:{free_port()}?password={SECRET}",
    ],
    ids=["refused", "user-and-password", "unix-socket", "cluster-query-password"],
)
def test_store_errors_never_show_the_password(url: str) -> None:
    # Given a client whose store URL has a password, and a store that cannot be reached
    app = make_app(namespace="secret-" + uuid.uuid4().hex[:8], broker=REDIS_BROKER, store=url)
    # When the status is asked for; Then the error names the store with the password masked
    with pytest.raises(StoreError) as caught:
        celery_pause.status(app)
    assert "**" in str(caught.value)
    assert_hidden(str(caught.value), SECRET)
    # ... and Celery's own configuration report masks the setting
    assert_hidden(repr(filter_hidden_settings(app.conf.table())), SECRET)


def test_a_bad_file_store_url_never_shows_the_password() -> None:
    # A URL a store cannot use is a configuration error, for every store.
    with pytest.raises(ConfigurationError) as caught:
        FileStore(f"file://user:{SECRET}@", "prefix")
    assert_hidden(str(caught.value), SECRET)
