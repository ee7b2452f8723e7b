"""Test cells of the limit suites: a private cluster on one broker and store, and its workers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .harness import AMQP_BROKER, REDIS_BROKER, Cluster, Worker
from .services import require
from .stores import POSTGRESQL_STORE

TWO_CELLS = (
    pytest.param(("redis", "prefork", "redis"), id="redis-prefork-redis-store"),
    pytest.param(("amqp", "threads", "postgresql"), id="amqp-threads-postgresql-store"),
)
"""Two cells that between them cover both brokers, both thread models and both kinds of
store: (broker, pool, store)."""


def cell_cluster(broker: str, store: str, tmp: Path, **settings: Any) -> Cluster:
    """A private cluster on ``broker`` (``redis`` or ``amqp``) with the state in ``store``
    (``redis`` or ``postgresql``), once the services it needs answer."""
    require("Redis", "127.0.0.1", 6379)
    if broker == "amqp":
        require("RabbitMQ", "127.0.0.1", 5672)
    if store == "postgresql":
        require("PostgreSQL", "127.0.0.1", 5432)
    return Cluster(
        broker=AMQP_BROKER if broker == "amqp" else REDIS_BROKER,
        tmp=tmp,
        store=POSTGRESQL_STORE if store == "postgresql" else None,
        **settings,
    )


def four_workers(cluster: Cluster, pool: str, concurrency: int = 2) -> list[Worker]:
    """Four workers of ``pool``, each once it applied the state."""
    workers = [cluster.worker(f"w{i}", pool=pool, concurrency=concurrency) for i in range(4)]
    for worker in workers:
        worker.wait_applied()
    return workers
