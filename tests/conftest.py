from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

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
def world(redis_url: str, tmp_path: Path) -> Iterator[Cluster]:
    """A private namespace on the Redis broker and store, with no worker started yet."""
    cluster = Cluster(broker=redis_url, tmp=tmp_path)
    yield cluster
    cluster.close()


@pytest.fixture
def cluster(broker: str, tmp_path: Path) -> Iterator[Cluster]:
    world = Cluster(broker=broker, tmp=tmp_path)
    yield world
    world.close()


@pytest.fixture(params=["redis", "file"])
def store_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    """A private app on the Redis broker, with its pause state in each kind of store."""
    require("Redis", "127.0.0.1", 6379)
    store = f"file://{tmp_path}/store" if request.param == "file" else None
    world = Cluster(broker=REDIS_BROKER, tmp=tmp_path, store=store)
    yield world
    world.close()


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
