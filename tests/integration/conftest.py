"""The fixtures every test may use, and the names the test files give theirs.

A fixture that yields a :class:`support.harness.Cluster` (a private namespace, its app,
the workers a test starts) is named ``<what differs>_cluster``:

- ``cluster``: on each broker, Redis then RabbitMQ (``broker``); a behaviour test runs twice;
- ``redis_cluster``: on the Redis broker only;
- ``store_cluster``: its pause state in each kind of store (Redis, file);
- in a test file, for what that file sets: ``ramp_cluster`` (``pause_ramp_peak``),
  ``pool_cluster`` (one cell of pool and broker), ``probed_cluster`` (probes served),
  ``redelivering_cluster`` (kombu's short visibility timeout), ``slow_poll_cluster``,
  ``history_cluster`` (a short history), ``chaos_cluster`` (a private redis-server).

A fixture that yields a store is named for it: ``store_spec``/``shared_spec`` (where a store
of each kind is), ``store`` (one opened). A ``Cluster`` is never called a world: the
benchmark's :class:`bench.world.World` and the breaker tests' ``BreakerWorld`` are other things.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from celery_pause.stores.base import Store
from support.harness import AMQP_BROKER, REDIS_BROKER, Cluster
from support.services import require
from support.stores import ADAPTERS, KINDS, SHARED_KINDS, Spec, make_store, private


@pytest.fixture(params=["redis", "amqp"])
def broker(request: pytest.FixtureRequest) -> str:
    """Each behaviour test runs once on Redis and once on RabbitMQ."""
    require("Redis", "127.0.0.1", 6379)
    if request.param == "amqp":
        require("RabbitMQ", "127.0.0.1", 5672)
        return AMQP_BROKER
    return REDIS_BROKER


@pytest.fixture
def redis_url() -> str:
    require("Redis", "127.0.0.1", 6379)
    return REDIS_BROKER


@pytest.fixture
def cluster(broker: str, tmp_path: Path) -> Iterator[Cluster]:
    """A private app on each broker (Redis, then RabbitMQ), with no worker started yet."""
    yield from _cluster(broker=broker, tmp=tmp_path)


@pytest.fixture
def redis_cluster(redis_url: str, tmp_path: Path) -> Iterator[Cluster]:
    """A private app on the Redis broker only, with no worker started yet."""
    yield from _cluster(broker=redis_url, tmp=tmp_path)


@pytest.fixture(params=["redis", "file"])
def store_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    """A private app on the Redis broker, with its pause state in each kind of store."""
    require("Redis", "127.0.0.1", 6379)
    store = f"file://{tmp_path}/store" if request.param == "file" else None
    yield from _cluster(broker=REDIS_BROKER, tmp=tmp_path, store=store)


def _cluster(**options: Any) -> Iterator[Cluster]:
    cluster = Cluster(**options)
    yield cluster
    cluster.close()


def _store_spec(kind: str, tmp_path: Path) -> Iterator[Spec]:
    adapter = ADAPTERS[kind]
    if adapter.service is not None:
        service, port = adapter.service
        require(service, "127.0.0.1", port)
    prefix = f"celery-pause-test:{uuid.uuid4().hex[:10]}"
    with private(kind, adapter.url(tmp_path), prefix) as spec:
        yield spec


@pytest.fixture(params=KINDS)
def store_spec(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Spec]:
    """``(kind, url, prefix)`` of a private store of each kind, emptied afterwards."""
    yield from _store_spec(request.param, tmp_path)


@pytest.fixture(params=SHARED_KINDS)
def shared_spec(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Spec]:
    """Like ``store_spec``, for the kinds several processes can share (not memory)."""
    yield from _store_spec(request.param, tmp_path)


@pytest.fixture
def store(store_spec: Spec) -> Iterator[Store]:
    """A private store of each kind: the contract suite runs once per kind."""
    opened = make_store(*store_spec)
    yield opened
    opened.close()
