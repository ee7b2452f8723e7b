"""Every store call is bounded: on a connection whose peer stops answering (a TCP proxy
that keeps the connection open and forwards nothing), a read fails with
:class:`StoreError` within three store timeouts and a margin, and reads again once the
peer answers; a file store's lock is waited for as long."""

from __future__ import annotations

import fcntl
import time
import uuid
from pathlib import Path

import pytest

from celery_pause.errors import StoreError
from celery_pause.model.outcome import Outcome
from celery_pause.stores.file import FileStore
from support.proxy import Proxy, through
from support.services import require
from support.stores import ADAPTERS

TIMEOUT = 1.0
BOUND = 3 * TIMEOUT + 1.0
"""Seconds a read on a blackholed connection may take: three store timeouts and a margin."""


@pytest.mark.parametrize("kind", ["redis", "postgresql", "mariadb"])
def test_a_read_on_a_blackholed_connection_fails_in_bounded_time(kind: str, tmp_path: Path) -> None:
    # Given a store reached through a proxy, with a connection open and in use
    adapter = ADAPTERS[kind]
    assert adapter.service is not None
    service, port = adapter.service
    require(service, "127.0.0.1", port)
    prefix = f"celery-pause-test:{uuid.uuid4().hex[:10]}"
    direct = adapter.url(tmp_path)
    with Proxy(port) as proxy:
        url = through(direct, proxy.port)
        store = adapter.store_class.open(url, prefix, timeout=TIMEOUT, options={})
        try:
            store.read()

            # When the proxy stops forwarding, connections left open
            proxy.blackhole()
            started = time.monotonic()
            with pytest.raises(StoreError):
                store.read()
            failed_after = time.monotonic() - started

            # Then the read failed within the bound, and reads again once it forwards
            assert failed_after <= BOUND, f"{kind}: failed after {failed_after:.1f}s"
            proxy.forward()
            assert store.read().state.holds == ()
        finally:
            store.close()
            adapter.purge(direct, prefix)


def test_a_file_store_lock_held_elsewhere_fails_the_update_in_bounded_time(
    tmp_path: Path,
) -> None:
    # Given a file store whose state lock another process's descriptor holds
    store = FileStore(f"file://{tmp_path}/store", "p", timeout=TIMEOUT)
    store.read()
    store.root.mkdir(parents=True, exist_ok=True)
    with open(store.root / "state.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)

        # When a change waits for that lock
        started = time.monotonic()
        with pytest.raises(StoreError, match="stayed locked"):
            store.update(lambda state, now: Outcome(None, None))
        failed_after = time.monotonic() - started

        # Then it failed within the bound, and succeeds once the lock is free
        assert failed_after <= BOUND, f"failed after {failed_after:.1f}s"
        fcntl.flock(held, fcntl.LOCK_UN)
    assert not store.update(lambda state, now: Outcome(None, None)).changed
