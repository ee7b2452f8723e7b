"""Giving held messages back to the broker (to the master the sentinels name now).

A graceful failover (``SENTINEL FAILOVER``) leaves the old master a writable master for
seconds after the sentinels named the new one, until they demote it (``+convert-to-slave``,
which closes its clients' connections). A worker's idle broker connections still point at
it, and a held message returned there (``LPUSH``) lands in data the old master discards
when it resyncs from the new one, while the new master keeps the message in kombu's
``unacked`` hash, to come back only after ``visibility_timeout`` (an hour by default).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from celery.worker import state as worker_state
from celery.worker.request import Request
from redis.exceptions import RedisError
from redis.sentinel import SentinelConnectionPool

logger = logging.getLogger(__name__)


def follow_master(requests: Iterable[Request]) -> None:
    """Before ``requests`` go back to the broker: point each sentinel-managed pool of their
    channels at the master the sentinels name now.

    redis-py drops a pool's idle connections when the master it asks for has moved, so the
    return that follows connects to the new master. Other brokers are left alone.
    """
    pools = {}
    for request in requests:
        channel = getattr(request.message, "channel", None)
        if channel is None or getattr(channel, "closed", True):
            continue  # a closed channel's messages are restored by kombu, or left unacked
        pool = getattr(channel, "pool", None)
        if isinstance(pool, SentinelConnectionPool):
            pools[id(pool)] = pool
    for pool in pools.values():
        try:
            pool.get_master_address()  # type: ignore[no-untyped-call]
        except RedisError as exc:  # no sentinel answers: return through the pool as it is
            logger.warning("celery-pause: cannot ask the sentinels for the master: %r", exc)


def give_back(requests: list[Request]) -> int:
    """Return each of ``requests`` to the broker (``reject(requeue=True)``) and forget it;
    how many."""
    follow_master(requests)  # not to an old master that a failover left writable
    for request in requests:
        # Not ``request.reject``, which defers to the loop: at warm shutdown it no longer runs.
        if not request.acknowledged:
            try:
                request.message.reject(requeue=True)
            except Exception as exc:  # channel gone: the broker redelivers unacked messages
                logger.debug("celery-pause: task %s left to the broker: %r", request.id, exc)
            request.acknowledged = True
        worker_state.task_ready(request)
    return len(requests)
