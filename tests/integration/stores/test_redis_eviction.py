"""A Redis whose ``maxmemory-policy`` may evict the pause state is named: in the store's
warnings, in ``pause status`` and in the worker's log at start."""

from __future__ import annotations

from pathlib import Path

import pytest

import celery_pause
from celery_pause.stores.redis import RedisStore
from support.harness import REDIS_BROKER, Cluster, wait_for
from support.redis_server import RedisServer

pytestmark = pytest.mark.skipif(not RedisServer.available(), reason="needs redis-server")


@pytest.mark.parametrize(
    ("policy", "warned"),
    [
        ("allkeys-lru", True),
        ("allkeys-random", True),
        ("volatile-lru", False),
        ("noeviction", False),
    ],
)
def test_an_eviction_policy_that_may_evict_the_state_is_warned_of(
    policy: str, warned: bool
) -> None:
    # Given a Redis with the eviction policy set
    with RedisServer() as server:
        server.client().config_set("maxmemory-policy", policy)

        # When a store on it is asked what may lose its state
        store = RedisStore(server.url(), "p", timeout=1.0)
        try:
            warnings = store.warnings()
        finally:
            store.close()

    # Then it names the policy exactly when the policy may evict the state key
    assert bool(warnings) is warned
    if warned:
        assert f"maxmemory-policy is {policy}" in warnings[0] and "p:state" in warnings[0]


def test_pause_status_and_a_starting_worker_warn_of_the_eviction_policy(tmp_path: Path) -> None:
    # Given an app whose store is a Redis that may evict any key
    with RedisServer() as server:
        server.client().config_set("maxmemory-policy", "allkeys-lru")
        cluster = Cluster(broker=REDIS_BROKER, tmp=tmp_path, store=server.url())
        try:
            # When a worker starts and the status is read
            worker = cluster.worker("w1")
            status = celery_pause.status(cluster.app)

            # Then both name the policy: the status as a store warning, the worker in its log
            [warning] = status.store_warnings
            assert "maxmemory-policy is allkeys-lru" in warning
            wait_for(
                lambda: worker.log_count("maxmemory-policy is allkeys-lru"),
                timeout=30,
                what="the worker's warning at start",
            )
            assert worker.log_count("maxmemory-policy is allkeys-lru") == 1
        finally:
            cluster.close()
