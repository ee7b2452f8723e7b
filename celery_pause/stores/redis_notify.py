"""The Redis store's notifications: a ``PUBLISH`` after each state write, and in each worker
a thread of its own subscribed to ``<prefix>:notify`` that re-reads the state on a message.

They carry the push without Celery's broadcast (SQS has none; large fleets switch remote
control off). A notification is only a hint to read now: one lost (the listener reconnecting)
is caught by the next poll, and the listener asks for a read after every (re)subscribe.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any, cast

import redis

from ..logs import ThrottledLog

logger = logging.getLogger(__name__)

BACKOFF = (0.1, 5.0)
"""Seconds before the first reconnect after a failure, and the most between two."""
PING_EVERY = 10.0
"""Seconds of silence after which the listener pings its connection."""
SILENT_AFTER = 3 * PING_EVERY
"""Seconds without any message (a pong included) after which it reconnects: a half-open
connection says nothing."""


class RedisNotifications:
    """``notify`` and ``listen`` for a Redis store (a mixin before the store's class)."""

    client: redis.Redis
    prefix: str

    @property
    def notify_channel(self) -> str:
        """The pub/sub channel of this key prefix."""
        return f"{self.prefix}:notify"

    def notify(self) -> None:
        try:
            self.client.publish(self.notify_channel, b"changed")
        except redis.RedisError as exc:
            logger.warning("celery-pause: could not publish the change (%s); workers poll", exc)

    def listen(self, callback: Callable[[], None]) -> Callable[[], None] | None:
        listener = Listener(self.client, self.notify_channel, callback)
        listener.start()
        return listener.stop


class Listener(threading.Thread):
    """Calls ``callback`` on every message of ``channel``, reconnecting with backoff."""

    def __init__(self, client: redis.Redis, channel: str, callback: Callable[[], None]) -> None:
        super().__init__(name="celery-pause-notify", daemon=True)
        self.client = client
        self.channel = channel
        self.callback = callback
        self._stopping = threading.Event()
        self._errors = ThrottledLog(logger)
        self.subscriptions = 0
        """How many times it (re)subscribed."""

    def stop(self) -> None:
        """Stop listening: within a second (not waited for; it is a daemon thread)."""
        self._stopping.set()

    def run(self) -> None:
        delay = BACKOFF[0]
        while not self._stopping.is_set():
            try:
                self._listen()
                delay = BACKOFF[0]
            except Exception as exc:  # a lost connection, or a bug: never end the thread
                self._errors.warning(
                    "celery-pause: store notifications on %s failed (%r); polling until they "
                    "work again, retrying in %gs",
                    self.channel,
                    exc,
                    delay,
                )
                self._stopping.wait(delay)
                delay = min(delay * 2, BACKOFF[1])

    def _listen(self) -> None:
        """Subscribe and hand on messages until stopped, or the connection goes silent."""
        pubsub = cast(Any, self.client).pubsub()  # typed from redis-py 8.2 on, untyped before
        try:
            pubsub.subscribe(self.channel)
            heard = pinged = time.monotonic()
            while not self._stopping.is_set():
                message = pubsub.get_message(timeout=1.0)
                now = time.monotonic()
                if message is not None:
                    heard = now
                    if message["type"] == "subscribe":
                        self.subscriptions += 1
                        self.callback()  # a change may have come while it was away
                    elif message["type"] == "message":
                        self.callback()
                elif now - heard >= SILENT_AFTER:
                    raise ConnectionError(f"no answer to a ping for {SILENT_AFTER:g}s")
                if now - max(heard, pinged) >= PING_EVERY:
                    pinged = now
                    pubsub.ping()
        finally:
            with suppress(Exception):
                pubsub.close()
