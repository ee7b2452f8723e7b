"""How many messages wait in each queue, where the broker can tell.

Redis: the length of the queue's lists (kombu's priority sub-queues included).
AMQP: a passive ``queue_declare``. Any other transport, or a broker that does
not answer, gives ``None``: unknown.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from contextlib import suppress
from typing import Any

from celery import Celery

logger = logging.getLogger(__name__)

COUNTING_DRIVERS = ("redis", "amqp")


def queue_depths(app: Celery, names: Iterable[str], timeout: float = 2.0) -> dict[str, int | None]:
    """Messages waiting in each of ``names``; ``None`` where the broker cannot tell.

    A queue that does not exist holds nothing: 0.
    """
    queues = sorted(set(names))
    unknown: dict[str, int | None] = dict.fromkeys(queues)
    if not queues:
        return unknown
    try:
        with app.connection_for_read(connect_timeout=timeout) as conn:
            if conn.transport.driver_type not in COUNTING_DRIVERS:
                return unknown
            conn.ensure_connection(max_retries=1, timeout=timeout)
            return {name: waiting(conn, name) for name in queues}
    except Exception as exc:  # the broker is down: the depths are unknown, not an error
        logger.debug("celery-pause: cannot count queued messages: %r", exc)
        return unknown


def waiting(conn: Any, name: str) -> int | None:
    """Messages waiting in queue ``name`` on ``conn``'s broker (0: no such queue; ``None``:
    the broker did not say)."""
    # One channel per queue: on AMQP a passive declare of a missing queue closes it. On
    # Redis a declare creates nothing, and a passive one misses a ``global_keyprefix``.
    channel = conn.channel()
    try:
        passive = conn.transport.driver_type == "amqp"
        _, count, _ = channel.queue_declare(queue=name, passive=passive)
        return int(count)
    except conn.channel_errors as exc:
        if _not_found(exc):
            return 0
        logger.debug("celery-pause: cannot count %r: %r", name, exc)
        return None
    finally:
        with suppress(Exception):
            channel.close()


def _not_found(exc: BaseException) -> bool:
    return getattr(exc, "code", None) == 404 or "NOT_FOUND" in str(exc)
