"""The Redis store through Sentinel: a failover while paused keeps the pause and loses no held
task, a state change that pauses waits for a replica, and a ``sentinel://`` broker doubles as
the store.

Each test runs its own master, replica and sentinel on free loopback ports.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
import redis
from celery import Celery

import celery_pause
from celery_pause.errors import ConfigurationError, PauseError, StoreError
from celery_pause.model.outcome import Outcome
from celery_pause.model.scope import EVERYTHING
from celery_pause.model.state import Hold
from celery_pause.settings import config_for
from celery_pause.stores import store_for
from celery_pause.stores.sentinel import SentinelStore
from support.harness import REDIS_BROKER, Cluster, wait_for
from support.observe import held, scheduled, stays_quiet
from support.proj import make_app
from support.sentinel import MASTER, SentinelSetup
from support.services import require

SECRET = "s3cret-" + uuid.uuid4().hex


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[SentinelSetup]:
    require("Redis", "127.0.0.1", 6379)
    if not SentinelSetup.available():
        if os.environ.get("CI"):
            pytest.fail("redis-server is not installed (CI must have it)")
        pytest.skip("redis-server is not installed")
    with SentinelSetup(tmp_path / "sentinel") as running:
        yield running


def pause_everything(state, now):  # type: ignore[no-untyped-def]
    return Outcome(state.with_holds([*state.holds, Hold(scope=EVERYTHING, paused_at=now)]), None)


def lift_everything(state, now):  # type: ignore[no-untyped-def]
    return Outcome(state.with_holds([]), None)


def paused(app: Celery) -> bool:
    try:
        return bool(celery_pause.status(app).paused.everything)
    except PauseError:
        return False  # the store's connection is moving to the new master


def resumed(app: Celery) -> bool:
    try:
        celery_pause.resume(app)
    except PauseError:
        return False
    return True


def test_a_failover_while_paused_keeps_the_pause_and_resume_works(
    setup: SentinelSetup, tmp_path: Path
) -> None:
    # Given a worker whose store is behind the sentinel, paused and confirmed
    options = {"master_name": MASTER}
    cluster = Cluster(
        broker=REDIS_BROKER, tmp=tmp_path, store=setup.url, pause_store_transport_options=options
    )
    try:
        worker = cluster.worker("w1")
        worker.wait_applied()
        celery_pause.pause(cluster.app, wait=True, timeout=20, reason="failover drill")
        prefix = config_for(cluster.app).key_prefix
        replica = redis.Redis(port=setup.replica_port)
        assert b"failover drill" in (replica.get(f"{prefix}:state") or b"")  # WAIT did its job

        # When the sentinel fails the master over to the replica, and tasks arrive
        setup.failover()
        window_start = time.time()
        sent = [cluster.send(f"t{i}") for i in range(3)]

        # Then the new master still holds the pause, and nothing starts
        wait_for(lambda: paused(cluster.app), timeout=30, what="the status from the new master")
        stays_quiet(cluster, window_start, 2.0)
        worker.check_alive()

        # When the worker is restarted after the failover, Then it starts paused
        assert worker.stop() == 0
        restarted = cluster.worker("w1")
        restarted.wait_applied(celery_pause.status(cluster.app).state.generation)
        stays_quiet(cluster, window_start, 1.0)

        # When resumed (through the new master), every task runs once, none before
        resuming_at = time.time()
        wait_for(lambda: resumed(cluster.app), timeout=30, what="a resume")
        cluster.wait_records(len(sent))
        assert sorted(r["id"] for r in cluster.records()) == sorted(sent)
        assert not cluster.started_between(window_start, resuming_at)
    finally:
        cluster.close()


def test_a_failover_of_a_sentinel_broker_loses_no_held_task(
    setup: SentinelSetup, tmp_path: Path
) -> None:
    # Given two prefork workers on a sentinel:// broker that doubles as the store, with
    # prefetched and ETA tasks held by a confirmed pause
    cluster = Cluster(
        broker=setup.url,
        tmp=tmp_path,
        store="",
        broker_transport_options={"master_name": MASTER},
    )
    try:
        workers = [cluster.worker("w1"), cluster.worker("w2")]
        for worker in workers:
            worker.wait_applied()
        eta = datetime.fromtimestamp(time.time() + 3, tz=timezone.utc)
        sent = [cluster.send(f"eta{i}", eta=eta) for i in range(4)]
        wait_for(
            lambda: sum(scheduled(cluster, w) for w in workers) == 4,
            timeout=15,
            what="the ETA tasks to be received",
        )
        sent += [cluster.send(f"t{i}", 0.4) for i in range(16)]
        cluster.wait_records(1)
        celery_pause.pause(cluster.app, wait=True, timeout=20, reason="failover drill")
        window_start = time.time()
        wait_for(
            lambda: not any(scheduled(cluster, w) for w in workers),
            timeout=15,
            what="the ETA tasks to fall due and be held",
        )
        assert all(held(w) for w in workers), "each worker should hold tasks"

        # When the sentinel fails the master over, and one worker is restarted
        setup.failover()
        wait_for(lambda: paused(cluster.app), timeout=30, what="the status from the new master")
        assert workers[0].stop() == 0
        restarted = cluster.worker("w1")
        restarted.wait_applied(celery_pause.status(cluster.app).state.generation)
        stays_quiet(cluster, window_start, 1.0)
        workers[1].check_alive()

        # Then a resume runs every task exactly once, none before it
        cluster.resume_and_check(sent, window_start)
    finally:
        cluster.close()


def test_a_state_change_no_replica_acknowledges_is_an_error(tmp_path: Path) -> None:
    require("Redis", "127.0.0.1", 6379)
    if not SentinelSetup.available():
        pytest.skip("redis-server is not installed")
    with SentinelSetup(tmp_path / "sentinel", replica=False) as setup:
        # Given a master with no replica
        store = SentinelStore(setup.url, "p", options={"master_name": MASTER}, timeout=0.3)

        # When the state changes; Then the change is not acknowledged
        with pytest.raises(StoreError, match="0 of 1 replica"):
            store.update(pause_everything)

        # ... but a change that only lifts holds is: losing it could only pause again
        assert store.read().state.holds
        assert store.update(lift_everything).changed
        assert not store.read().state.holds

        # ... unless the store is told not to wait for replicas
        lenient = SentinelStore(
            setup.url, "q", options={"master_name": MASTER, "wait_replicas": 0}, timeout=0.3
        )
        assert lenient.update(pause_everything).changed


def test_a_sentinel_broker_doubles_as_the_store(setup: SentinelSetup) -> None:
    # Given an app whose broker is the sentinel, with master_name in its transport options
    app = make_app(
        namespace="s" + uuid.uuid4().hex[:8],
        broker=setup.url,
        broker_transport_options={"master_name": MASTER, "visibility_timeout": 3600},
    )

    # When it pauses
    celery_pause.pause(app, notify=False)

    # Then the state is in the master that the sentinel names
    store = store_for(app)
    assert isinstance(store, SentinelStore) and store.url == setup.url
    master = redis.Redis(port=setup.master_address()[1])
    assert master.get(f"{config_for(app).key_prefix}:state") is not None


def test_sentinel_urls_are_checked_and_never_show_the_password() -> None:
    url = f"sentinel://:{SECRET}@127.0.0.1:1;sentinel://127.0.0.1:2/3"
    with pytest.raises(ConfigurationError, match="master_name") as caught:
        SentinelStore(url, "p", options={})
    assert SECRET not in str(caught.value)
    store = SentinelStore(url, "p", options={"master_name": MASTER}, timeout=0.3)
    assert store.display_url == "sentinel://:**@127.0.0.1:1/;sentinel://127.0.0.1:2/3"
    with pytest.raises(StoreError) as down:
        store.read()
    assert SECRET not in str(down.value)
    with pytest.raises(ConfigurationError, match="not a Sentinel URL"):
        SentinelStore(f"sentinel://:{SECRET}@h:1;redis://h:2", "p", options={"master_name": "m"})
    app = make_app(namespace="s", broker=REDIS_BROKER, store=url)
    app.conf.pause_store_transport_options = "master_name=m"
    with pytest.raises(ConfigurationError, match="pause_store_transport_options must be a dict"):
        config_for(app)
