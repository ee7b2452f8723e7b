"""The Redis store's notifications on a real Redis: a ``notify()`` of one process wakes the
listener of another, and the listener comes back after its connection is killed."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest
import redis

from celery_pause.stores.base import Store
from celery_pause.stores.file import FileStore
from celery_pause.stores.redis import RedisStore
from support.harness import wait_for
from support.services import require
from support.stores import REDIS_STORE


class Calls:
    """Counts the listener's calls (from its own thread)."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            self.count += 1


@pytest.fixture
def pair() -> Iterator[tuple[RedisStore, RedisStore]]:
    """Two stores on one prefix, as a CLI process and a worker open it."""
    require("Redis", "127.0.0.1", 6379)
    prefix = f"celery-pause-test:{uuid.uuid4().hex[:10]}"
    named = f"{REDIS_STORE}?client_name={prefix.replace(':', '-')}"
    writer, worker = RedisStore(REDIS_STORE, prefix), RedisStore(named, prefix)
    yield writer, worker
    writer.close()
    worker.close()


def test_a_notify_wakes_the_listener_of_another_process(
    pair: tuple[RedisStore, RedisStore],
) -> None:
    writer, worker = pair
    # Given a worker's store listening (it asks for one read once subscribed)
    calls = Calls()
    stop = worker.listen(calls)
    assert stop is not None
    wait_for(lambda: calls.count == 1, timeout=5, what="the subscribe")

    # When another process's store notifies twice
    writer.notify()
    wait_for(lambda: calls.count == 2, timeout=5, what="the first notification")
    writer.notify()

    # Then the listener is called for each; after stop, no more
    wait_for(lambda: calls.count == 3, timeout=5, what="the second notification")
    stop()
    wait_for(lambda: not _listening(writer), timeout=5, what="the listener to unsubscribe")
    writer.notify()
    assert calls.count == 3


def test_the_listener_reconnects_after_its_connection_is_killed(
    pair: tuple[RedisStore, RedisStore],
) -> None:
    writer, worker = pair
    # Given a listening worker
    calls = Calls()
    stop = worker.listen(calls)
    assert stop is not None
    wait_for(lambda: calls.count == 1, timeout=5, what="the subscribe")

    # When Redis kills its pub/sub connection (only this worker's: others share the server)
    admin = redis.Redis.from_url(REDIS_STORE, decode_responses=True)
    name = worker.client.connection_pool.connection_kwargs["client_name"]
    mine = [c["id"] for c in admin.client_list(_type="pubsub") if c["name"] == name]
    assert len(mine) == 1
    assert admin.client_kill_filter(_id=mine[0]) == 1

    # Then it subscribes again (asking for a read: a change may have come meanwhile) ...
    wait_for(lambda: calls.count == 2, timeout=10, what="the listener to resubscribe")
    # ... and hears the next notification
    writer.notify()
    wait_for(lambda: calls.count == 3, timeout=5, what="a notification after the reconnect")
    stop()


def test_a_store_without_notifications_says_so(tmp_path: object) -> None:
    # Given a store with no notifications (the file store)
    store: Store = FileStore(f"file://{tmp_path}", "p")

    # When asked to listen / to notify / Then it declines, and notify does nothing
    assert store.listen(Calls()) is None
    store.notify()


def _listening(store: RedisStore) -> bool:
    counts = dict(store.client.pubsub_numsub(store.notify_channel))
    return bool(counts.get(store.notify_channel.encode(), 0))
