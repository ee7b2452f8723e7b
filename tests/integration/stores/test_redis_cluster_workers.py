"""Real workers on the Redis Cluster store (Redis broker, the state in a three-master
cluster on loopback): a pause, a limit, a limit per tenant whose partitions land on every
master, and a master failing over while paused (its own cluster, the replica promoted).

The store URL is given as the ``pause_store_url`` setting, not as ``Cluster(store=...)``:
:meth:`Cluster.close` reads a ``redis*`` store URL as one server's to purge it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

import celery_pause
from celery_pause.errors import PauseError
from celery_pause.model.limit_keys import partition_id, rate_key, records_prefix, slots_key
from celery_pause.model.slots import live_slots
from celery_pause.settings import config_for
from celery_pause.stores import store_for
from celery_pause.stores.redis_cluster import RedisClusterStore
from support.harness import REDIS_BROKER, Cluster, stop_all, wait_for
from support.observe import most_at_once, most_within, stays_quiet
from support.redis_cluster import ClusterSetup, shared_cluster
from support.services import require
from support.stores import purge

LABELS = {"tenant": "tenant_id"}


def on(url: str, tmp: Path) -> Cluster:
    require("Redis", "127.0.0.1", 6379)
    return Cluster(
        broker=REDIS_BROKER,
        tmp=tmp,
        store="",
        pause_store_url=url,
        pause_labels=LABELS,
        pause_worker_ttl=6.0,
    )


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A private app whose store is the run's Redis Cluster, with no worker started yet."""
    url = shared_cluster().url
    cluster = on(url, tmp_path)
    yield cluster
    stop_all(cluster.workers)  # at once; close() stops them one by one
    cluster.close()
    purge(url, config_for(cluster.app).key_prefix)


def cluster_store(app: Celery) -> RedisClusterStore:
    store = store_for(app)
    assert isinstance(store, RedisClusterStore)
    return store


def test_a_pause_holds_every_task_with_the_state_on_one_master(cluster: Cluster) -> None:
    # Given a worker whose store is the Redis Cluster
    worker = cluster.worker("w1")
    worker.wait_applied()

    # When paused (confirmed) and tasks sent
    celery_pause.pause(cluster.app, wait=True, timeout=20, reason="cluster drill")
    since = time.time()
    sent = [cluster.send(f"t{i}") for i in range(4)]

    # Then none starts, and the state and the worker's report are on one master
    stays_quiet(cluster, since, 1.0)
    setup, store = shared_cluster(), cluster_store(cluster.app)
    master = setup.primary_of(store.state_key)
    assert setup.primary_of(store.workers_key) == master
    assert b"cluster drill" in (setup.node(master).get(store.state_key) or b"")
    assert setup.node(master).hexists(store.workers_key, worker.hostname)

    # When resumed, Then every task runs once, none before
    cluster.resume_and_check(sent, since)


def test_a_rate_and_concurrency_limit_hold_the_workers_to_it(cluster: Cluster) -> None:
    # Given two workers (four slots) limited to 10 starts a second and 2 at once
    workers = [cluster.worker(f"w{i}", concurrency=2) for i in range(2)]
    for worker in workers:
        worker.wait_applied()
    hold = celery_pause.throttle(cluster.app, rate="10/s", concurrency=2, wait=True).hold

    # When 12 tasks of 0.4 s (the concurrency holds them back) and 12 of none (the rate
    # does) are sent at once
    sent = [cluster.send(f"long{i}", 0.4) for i in range(12)]
    sent += [cluster.send(f"short{i}") for i in range(12)]

    # Then while they run, the limit's records are keys of their own on their masters
    store, setup = cluster_store(cluster.app), shared_cluster()
    names = [store.record_key(key) for key in (slots_key(hold.id), rate_key(hold.id))]
    wait_for(
        lambda: all(setup.node(setup.primary_of(name)).exists(name) for name in names),
        timeout=20,
        what="the limit's records on their masters",
    )
    records = cluster.wait_records(24, timeout=60)
    ran = cluster.spans(24)

    # And every task ran once, never more than 2 at once, and no faster than the rate
    assert sorted(r["id"] for r in records) == sorted(sent), "lost or duplicated tasks"
    assert most_at_once(list(ran.values())) <= 2, "more than 2 ran at once"
    short = sorted(r["started"] for r in records if r["tag"].startswith("short"))
    assert short[-1] - short[0] >= 11 * 0.1 * 0.9, f"12 starts in {short[-1] - short[0]:.2f} s"
    assert most_within([start for start, _ in ran.values()], 1.0) <= 20, "a burst"
    assert len({r["worker"] for r in records}) == 2, "the limit was not shared"

    # And once they ended, the workers hold no slot of it
    wait_for(
        lambda: not live_slots(store.read_record(slots_key(hold.id)), store.now()),
        timeout=10,
        what="the slots to be given back",
    )


def tenants_on_every_master(store: RedisClusterStore, hold_id: str) -> list[str]:
    """Three tenants whose partitions' slot records land on three different masters."""
    setup, chosen = shared_cluster(), {}
    for n in range(300):
        key = store.record_key(slots_key(partition_id(hold_id, f"T{n}")))
        chosen.setdefault(setup.primary_of(key), f"T{n}")
    assert len(chosen) == 3
    return sorted(chosen.values())


def masters_holding(store: RedisClusterStore, hold_id: str) -> set[int]:
    """The masters that hold a record of ``hold_id``'s partitions, each asked alone."""
    setup = shared_cluster()
    pattern = store.record_key(records_prefix(hold_id)) + "*"
    return {p for p in setup.ports if setup.role(p) == "master" and setup.node(p).keys(pattern)}


def test_a_limit_per_tenant_spreads_its_partitions_over_the_masters(cluster: Cluster) -> None:
    # Given two workers (four slots) and every tenant limited to one task at once
    for worker in [cluster.worker(f"w{i}", concurrency=2) for i in range(2)]:
        worker.wait_applied()
    result = celery_pause.throttle(cluster.app, concurrency=1, per="tenant", wait=True)
    store = cluster_store(cluster.app)
    tenants = tenants_on_every_master(store, result.hold.id)

    # When 4 tasks of 0.4 s of each of three tenants are sent, interleaved
    sent = [
        cluster.send(f"{t}-{i}", 0.4, kwargs={"tenant_id": t}) for i in range(4) for t in tenants
    ]

    # Then while they run, the tenants' records are on all three masters, and the status
    # (a scan of every master) counts the tenants in use
    wait_for(
        lambda: len(masters_holding(store, result.hold.id)) == 3,
        timeout=20,
        what="every tenant's partition in use",
    )
    wait_for(
        lambda: (celery_pause.status(cluster.app).usage[result.hold.id].partitions or 0) >= 2,
        timeout=10,
        what="the status to count the tenants in use",
    )

    # And every task ran once; never two of one tenant at once, the tenants side by side
    records = cluster.wait_records(len(sent), timeout=60)
    assert sorted(r["id"] for r in records) == sorted(sent), "lost or duplicated tasks"
    ran = cluster.spans(len(sent))
    by_tenant: dict[str, list[tuple[float, float]]] = {}
    for record in records:
        by_tenant.setdefault(record["labels"]["tenant_id"], []).append(ran[record["id"]])
    assert all(most_at_once(by_tenant[t]) == 1 for t in tenants), "two of a tenant at once"
    assert most_at_once(list(ran.values())) >= 2, "the tenants did not run side by side"

    # And once idle, the partitions' records are gone from every master
    wait_for(
        lambda: not store.record_keys(records_prefix(result.hold.id)),
        timeout=20,
        what="the idle tenants' records to be deleted",
    )


def paused(app: Celery) -> bool:
    try:
        return bool(celery_pause.status(app).paused.everything)
    except PauseError:
        return False  # the cluster is failing the master over


def resumed(app: Celery) -> bool:
    try:
        celery_pause.resume(app)
    except PauseError:
        return False
    return True


def test_a_master_failing_over_while_paused_keeps_the_pause_and_loses_nothing(
    tmp_path: Path,
) -> None:
    with ClusterSetup(tmp_path / "cluster", node_timeout_ms=1000) as setup:
        cluster = on(setup.url, tmp_path)
        try:
            # Given a worker paused and confirmed, with tasks held, and the pause on the
            # replica of the state's master
            worker = cluster.worker("w1")
            worker.wait_applied()
            celery_pause.pause(cluster.app, wait=True, timeout=20, reason="failover drill")
            since = time.time()
            sent = [cluster.send(f"held{i}") for i in range(3)]
            state_key = cluster_store(cluster.app).state_key
            master = setup.primary_of(state_key)
            replica = setup.replica_of(master)
            assert b"failover drill" in (setup.replica_get(replica, state_key) or b"")

            # When that master dies, its replica is promoted, and more tasks arrive
            setup.kill(master)
            setup.wait_promoted(replica)
            sent += [cluster.send(f"after{i}") for i in range(3)]

            # Then the new master holds the pause, nothing starts, the worker lives on
            wait_for(lambda: paused(cluster.app), timeout=30, what="the status from the cluster")
            assert setup.primary_of(state_key) == replica
            stays_quiet(cluster, since, 2.0)
            worker.check_alive()

            # When a second worker starts, Then it starts paused
            second = cluster.worker("w2")
            second.wait_applied(celery_pause.status(cluster.app).state.generation)
            stays_quiet(cluster, since, 1.0)

            # When resumed through the new master, every task runs once, none before
            resuming_at = time.time()
            wait_for(lambda: resumed(cluster.app), timeout=30, what="a resume")
            records: list[dict[str, Any]] = cluster.wait_records(len(sent))
            assert sorted(r["id"] for r in records) == sorted(sent), "lost or duplicated tasks"
            assert not cluster.started_between(since, resuming_at)
        finally:
            stop_all(cluster.workers)
            cluster.close()
