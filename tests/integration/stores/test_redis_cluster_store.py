"""The Redis Cluster store on a real cluster (three masters, three replicas, on loopback):
where its keys land, which node its ``WAIT`` and clock go to, and how it opens, checks its
URL and fails without showing the password. The contract itself runs in the suite
(``redis-cluster`` in :data:`support.stores.ADAPTERS`)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
import redis

from celery_pause.errors import ConfigurationError, StoreError
from celery_pause.model.outcome import Outcome
from celery_pause.model.report import APPLIED, WorkerReport
from celery_pause.model.scope import EVERYTHING
from celery_pause.model.state import Hold
from celery_pause.stores import store_for
from celery_pause.stores.redis_cluster import RedisClusterStore, parse
from support.harness import REDIS_BROKER
from support.proj import make_app
from support.redis_cluster import ClusterSetup, shared_cluster
from support.stores import purge

SECRET = "s3cret-" + uuid.uuid4().hex


@pytest.fixture
def setup() -> ClusterSetup:
    return shared_cluster()


@pytest.fixture
def store(setup: ClusterSetup) -> Iterator[RedisClusterStore]:
    prefix = f"celery-pause-test:{uuid.uuid4().hex[:10]}"
    opened = RedisClusterStore(setup.url, prefix, options={})
    yield opened
    opened.close()
    purge(setup.url, prefix)


def pause_everything(state, now):  # type: ignore[no-untyped-def]
    return Outcome(state.with_holds([*state.holds, Hold(scope=EVERYTHING, paused_at=now)]), None)


def waits(setup: ClusterSetup, port: int) -> int:
    """How many ``WAIT`` commands the node on ``port`` has answered."""
    stats = setup.node(port).info("commandstats")
    return int(stats.get("cmdstat_wait", {}).get("calls", 0))


def test_the_state_and_reports_share_a_primary_and_records_spread_over_all(
    setup: ClusterSetup, store: RedisClusterStore
) -> None:
    # Given a paused state, a worker's report, and one record on each of the three masters
    store.update(pause_everything)
    store.put_worker(WorkerReport(hostname="w1@h", pid=1, status=APPLIED, seen=store.now()))
    masters: dict[int, str] = {}
    for n in range(200):
        masters.setdefault(setup.primary_of(store.record_key(f"limit:h:{n}:slots")), str(n))
    assert len(masters) == 3, f"200 record keys landed on {len(masters)} masters"
    for n in masters.values():
        store.update_record(f"limit:h:{n}:slots", lambda rec, now, n=n: Outcome({"n": n}, None))

    # Then the state and the reports are on one master, as JSON
    primary = setup.primary_of(store.state_key)
    assert setup.primary_of(store.workers_key) == primary
    node = setup.node(primary)
    assert json.loads(node.get(store.state_key) or b"")["holds"]
    assert json.loads(node.hget(store.workers_key, "w1@h") or b"")["hostname"] == "w1@h"

    # And each record is a key of its own on its master, JSON too
    for port, n in masters.items():
        raw = setup.node(port).get(store.record_key(f"limit:h:{n}:slots"))
        assert json.loads(raw or b"") == {"n": n}

    # And a read of them all scans every master
    expected = {f"limit:h:{n}:slots": {"n": n} for n in masters.values()}
    assert store.read_records("limit:h:") == expected
    assert store.record_keys("limit:") == sorted(expected)
    assert store.record_keys("limit:h:x") == []


def test_a_state_change_waits_for_a_replica_of_the_state_s_master(
    setup: ClusterSetup, store: RedisClusterStore
) -> None:
    # Given the master of the state's slot and its replica
    primary = setup.primary_of(store.state_key)
    replica = setup.replica_of(primary)
    before = {port: waits(setup, port) for port in setup.ports}

    # When the state changes
    store.update(pause_everything)

    # Then the change waited (WAIT) on that master, none other, and the replica has it
    after = {port: waits(setup, port) for port in setup.ports}
    assert {port for port in setup.ports if after[port] > before[port]} == {primary}
    assert json.loads(setup.replica_get(replica, store.state_key) or b"")["holds"]

    # ... unless told not to wait, and a record's change never waits
    lenient = RedisClusterStore(setup.url, store.prefix, options={"wait_replicas": 0})
    lenient.update(pause_everything)
    lenient.update_record("breaker:x", lambda rec, now: Outcome({"v": 1}, None))
    assert waits(setup, primary) == after[primary]
    lenient.close()


def test_a_cluster_store_opens_from_the_alias_table_and_reads_the_masters_clock(
    setup: ClusterSetup,
) -> None:
    # Given an app whose store URL is the cluster's
    app = make_app(namespace="c" + uuid.uuid4().hex[:8], broker=REDIS_BROKER, store=setup.url)

    # When it pauses
    store = store_for(app)
    store.update(pause_everything)

    # Then the store is the cluster's, and its clock is the state master's TIME
    assert isinstance(store, RedisClusterStore)
    seconds, micros = setup.node(setup.primary_of(store.state_key)).time()
    assert abs(store.now() - (seconds + micros / 1e6)) < 1.0
    assert store.read().state.holds
    assert store.warnings() == []  # the masters' maxmemory-policy is noeviction
    store.close()
    purge(setup.url, store.prefix)


def test_a_cluster_that_is_down_fails_calls_not_the_opening_and_hides_the_password() -> None:
    # Given a store whose nodes do not answer
    url = f"redis+cluster://:{SECRET}@127.0.0.1:1,127.0.0.1:2"
    store = RedisClusterStore(url, "p", options={}, timeout=0.3)  # Then opening is fine

    # When it is read, Then the call fails with StoreError, the password masked
    assert store.display_url == "redis+cluster://:**@127.0.0.1:1,127.0.0.1:2"
    for call in (store.read, store.now, lambda: store.update(pause_everything)):
        with pytest.raises(StoreError) as down:
            call()
        assert SECRET not in str(down.value) and "127.0.0.1" in str(down.value)
    assert store.warnings() == []
    store.close()


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        (f"redis+cluster://:{SECRET}@h1:7000/3", "only database 0"),
        (f"redis+cluster://:{SECRET}@h1:port", "not a Redis Cluster URL"),
        (f"redis+cluster://:{SECRET}@h1:99999999,h2:1", "not a Redis Cluster URL"),
        (f"redis+cluster://:{SECRET}@", "names no node"),
        (f"redis://:{SECRET}@h1:1", "not a Redis Cluster URL"),
    ],
)
def test_a_url_that_is_no_cluster_url_is_refused_without_the_password(
    url: str, problem: str
) -> None:
    # When a store is opened on it, Then it is refused, saying why, the password masked
    with pytest.raises(ConfigurationError, match=problem) as refused:
        RedisClusterStore(url, "p", options={})
    assert SECRET not in str(refused.value)


def test_a_cluster_url_names_its_nodes_login_and_tls() -> None:
    # Given a TLS URL with a user, an escaped password, three nodes (one IPv6, one on the
    # default port) and a query option; When it is read
    nodes, options = parse("rediss+cluster://u:p%40ss@h1:7000,[::1]:7001,h3?ssl_cert_reqs=none")

    # Then it names those nodes, and redis-py's options of the login, TLS and the query
    assert nodes == [("h1", 7000), ("::1", 7001), ("h3", 6379)]
    assert options == {"username": "u", "password": "p@ss", "ssl": True, "ssl_cert_reqs": "none"}
    assert parse("redis+cluster://h1:7000/0") == ([("h1", 7000)], {})

    # And a wrong wait_replicas is refused
    with pytest.raises(ConfigurationError, match="wait_replicas"):
        RedisClusterStore("redis+cluster://h1:7000", "p", options={"wait_replicas": -1})


def test_a_record_key_of_another_type_is_an_error_and_stays(
    setup: ClusterSetup, store: RedisClusterStore
) -> None:
    # Given a record key someone made a list
    cluster = setup.client()
    cluster.rpush(store.record_key("breaker:bad"), b"x")

    # When it is read or changed, Then the store says so and leaves it
    with pytest.raises(StoreError, match="WRONGTYPE"):
        store.read_record("breaker:bad")
    with pytest.raises(StoreError, match="WRONGTYPE"):
        store.update_record("breaker:bad", lambda rec, now: Outcome({"v": 1}, None))
    assert cluster.lrange(store.record_key("breaker:bad"), 0, -1) == [b"x"]
    with pytest.raises(redis.ResponseError):
        cluster.get(store.record_key("breaker:bad"))
    cluster.close()
