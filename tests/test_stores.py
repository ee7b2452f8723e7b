"""The store contract, run against every store: Redis and file."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from celery_pause.errors import StoreError
from celery_pause.report import APPLIED, WorkerReport
from celery_pause.scope import EVERYTHING, Scope
from celery_pause.state import Hold, PauseState
from celery_pause.stores.base import Store
from celery_pause.stores.file import FileStore
from celery_pause.stores.redis import RedisStore
from support.harness import REDIS_STORE

from .services import require


@pytest.fixture(params=["redis", "file"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    prefix = f"celery-pause-test:{uuid.uuid4().hex[:10]}"
    if request.param == "file":
        yield FileStore(f"file://{tmp_path}", prefix)
        return
    require("Redis", "127.0.0.1", 6379)
    store = RedisStore(REDIS_STORE, prefix)
    yield store
    client = redis.Redis.from_url(REDIS_STORE)
    for key in client.scan_iter(f"{prefix}:*"):
        client.delete(key)
    store.close()


def add(scope: Scope, **fields: object):  # type: ignore[no-untyped-def]
    def change(state: PauseState, now: float) -> PauseState:
        return state.with_holds([*state.holds, Hold(scope=scope, paused_at=now, **fields)])

    return change


def test_empty_store_reads_as_running_generation_zero(store: Store) -> None:
    snapshot = store.read()
    assert snapshot.state == PauseState()
    assert not snapshot.state.paused(snapshot.now)


def test_update_persists_and_increments_the_generation(store: Store) -> None:
    # When two holds are added one after the other
    first, changed = store.update(add(Scope.of(["a"]), reason="one"))
    second, _ = store.update(add(Scope.of(["b"]), reason="two"))

    # Then both are stored, in order, under growing generations
    assert changed
    assert (first.state.generation, second.state.generation) == (1, 2)
    read = store.read().state
    assert [h.reason for h in read.holds] == ["one", "two"]
    assert read.paused(store.now()) == Scope.of(["a", "b"])


def test_update_returning_none_changes_nothing(store: Store) -> None:
    store.update(add(EVERYTHING))
    snapshot, changed = store.update(lambda state, now: None)
    assert not changed
    assert snapshot.state.generation == 1 == store.read().state.generation


def test_update_error_leaves_the_state_untouched(store: Store) -> None:
    store.update(add(EVERYTHING, reason="keep"))

    def fail(state: PauseState, now: float) -> PauseState:
        raise RuntimeError("refused")

    with pytest.raises(RuntimeError):
        store.update(fail)
    assert [h.reason for h in store.read().state.holds] == ["keep"]


def test_concurrent_updates_lose_nothing(store: Store) -> None:
    # Given 8 threads each adding 10 holds through read-modify-write
    def writer(n: int) -> None:
        for i in range(10):
            store.update(add(Scope.of([f"q{n}-{i}"])))

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # Then every one of the 80 holds is there, one generation each
    state = store.read().state
    assert len(state.holds) == 80
    assert state.generation == 80


def test_store_clock_orders_auto_resume(store: Store) -> None:
    snapshot, _ = store.update(add(EVERYTHING, resume_at=store.now() - 1))
    assert not snapshot.state.paused(store.now())
    snapshot, _ = store.update(add(EVERYTHING, resume_at=store.now() + 60))
    assert snapshot.state.paused(store.now()) == EVERYTHING


def test_state_is_stored_as_json(store: Store) -> None:
    store.update(add(Scope.of(["a"]), reason="json"))
    raw = _raw_state(store)
    assert raw.startswith(b"{") and b'"reason":"json"' in raw


def test_worker_reports_round_trip_and_removal(store: Store) -> None:
    report = WorkerReport(
        hostname="w1@host",
        pid=42,
        status=APPLIED,
        generation=3,
        paused=["a"],
        running=("id-1",),
        held=2,
        seen=store.now(),
    )
    store.put_worker(report)
    store.put_worker(WorkerReport(hostname="w2@host", pid=7, seen=store.now()))
    assert sorted(r.hostname for r in store.worker_reports()) == ["w1@host", "w2@host"]
    assert report in store.worker_reports()

    store.remove_worker("w1@host")
    assert [r.hostname for r in store.worker_reports()] == ["w2@host"]


def test_corrupt_state_reads_as_paused_everything(store: Store) -> None:
    # Given garbage where the state should be
    _write_raw_state(store, b'{"schema": 1, "generation": 3, "holds": [')

    # Then it reads as a pause of every queue, never as running
    snapshot = store.read()
    assert snapshot.state.paused(snapshot.now) == EVERYTHING
    assert snapshot.state.holds[0].source == "unreadable"


def test_unreachable_redis_raises_store_error_without_password(tmp_path: Path) -> None:
    store = RedisStore("redis://:s3cret@127.0.0.1:1/0", "p", timeout=0.5)
    with pytest.raises(StoreError) as failure:
        store.read()
    assert "s3cret" not in str(failure.value)
    assert "127.0.0.1:1" in str(failure.value)


def test_unwritable_file_store_raises_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    store = FileStore(f"file://{blocker}", "p")
    with pytest.raises(StoreError):
        store.update(add(EVERYTHING))


def _raw_state(store: Store) -> bytes:
    if isinstance(store, RedisStore):
        raw = store.client.get(store.state_key)
        assert isinstance(raw, bytes)
        return raw
    assert isinstance(store, FileStore)
    return store.state_path.read_bytes()


def _write_raw_state(store: Store, raw: bytes) -> None:
    if isinstance(store, RedisStore):
        store.client.set(store.state_key, raw)
    else:
        assert isinstance(store, FileStore)
        store.state_path.parent.mkdir(parents=True, exist_ok=True)
        store.state_path.write_bytes(raw)
