"""The store contract, run against every store: Redis, file, memory, SQLite, PostgreSQL
and MariaDB."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from celery_pause.errors import StoreError
from celery_pause.model.outcome import Outcome
from celery_pause.model.report import APPLIED, WorkerReport
from celery_pause.model.scope import EVERYTHING, Scope
from celery_pause.model.state import Hold, PauseState
from celery_pause.stores.base import Store
from celery_pause.stores.file import FileStore
from celery_pause.stores.redis import RedisStore
from support.stores import Spec, make_store, raw_value, run_in_processes, write_raw

PROCESSES, EACH = 4, 50


def add(scope: Scope, **fields: object):  # type: ignore[no-untyped-def]
    """A change adding a hold on ``scope``; its result is the hold added."""

    def change(state: PauseState, now: float) -> Outcome[PauseState, Hold]:
        hold = Hold(scope=scope, paused_at=now, **fields)
        return Outcome(state.with_holds([*state.holds, hold]), hold)

    return change


def test_empty_store_reads_as_running_generation_zero(store: Store) -> None:
    snapshot = store.read()
    assert snapshot.state == PauseState()
    assert not snapshot.state.paused(snapshot.now)


def test_update_persists_and_increments_the_generation(store: Store) -> None:
    # When two holds are added one after the other
    first = store.update(add(Scope.of(["a"]), reason="one"))
    second = store.update(add(Scope.of(["b"]), reason="two"))

    # Then both are stored, in order, under growing generations
    assert first.changed
    assert (first.snapshot.state.generation, second.snapshot.state.generation) == (1, 2)
    read = store.read().state
    assert [h.reason for h in read.holds] == ["one", "two"]
    assert read.paused(store.now()) == Scope.of(["a", "b"])


def test_update_returning_none_changes_nothing(store: Store) -> None:
    store.update(add(EVERYTHING))
    kept = store.update(lambda state, now: Outcome(None, "unchanged"))
    assert not kept.changed
    assert kept.result == "unchanged"
    assert kept.snapshot.state.generation == 1 == store.read().state.generation


def test_update_error_leaves_the_state_untouched(store: Store) -> None:
    store.update(add(EVERYTHING, reason="keep"))

    def fail(state: PauseState, now: float) -> Outcome[PauseState, None]:
        raise RuntimeError("refused")

    with pytest.raises(RuntimeError):
        store.update(fail)
    assert [h.reason for h in store.read().state.holds] == ["keep"]


def bump(store: Store, rounds: int) -> list[int]:
    """``rounds`` updates that each only move the generation on; the generations seen."""

    def move_on(state: PauseState, now: float) -> Outcome[PauseState, int]:
        return Outcome(state.with_holds(state.holds), state.generation + 1)

    return [store.update(move_on).result for _ in range(rounds)]


def test_concurrent_processes_lose_no_update(shared_spec: Spec) -> None:
    # When four processes each update the state 50 times at once
    results = run_in_processes(shared_spec, bump, EACH, processes=PROCESSES)

    # Then every update got a generation of its own and none was lost
    seen = sorted(generation for generations in results for generation in generations)
    assert seen == list(range(1, PROCESSES * EACH + 1))
    assert make_store(*shared_spec).read().state.generation == PROCESSES * EACH


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


def test_update_returns_the_result_of_the_attempt_that_committed(store: Store) -> None:
    # Given 8 threads each adding holds at once, so that attempts collide and run again
    results: list[tuple[Hold, PauseState]] = []

    def writer(n: int) -> None:
        for i in range(10):
            updated = store.update(add(Scope.of([f"q{n}-{i}"])))
            results.append((updated.result, updated.snapshot.state))

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # Then each result is the hold its committed state ends with, never one of a lost attempt
    assert all(state.holds[-1] == hold for hold, state in results)
    stored = {hold.id for hold in store.read().state.holds}
    assert {hold.id for hold, _ in results} == stored


def test_store_clock_orders_auto_resume(store: Store) -> None:
    snapshot = store.update(add(EVERYTHING, resume_at=store.now() - 1)).snapshot
    assert not snapshot.state.paused(store.now())
    snapshot = store.update(add(EVERYTHING, resume_at=store.now() + 60)).snapshot
    assert snapshot.state.paused(store.now()) == EVERYTHING


def test_state_is_stored_as_json(store: Store) -> None:
    store.update(add(Scope.of(["a"]), reason="json"))
    raw = raw_value(store, "state", "state")
    assert raw is not None and raw.startswith(b"{") and b'"reason":"json"' in raw


def test_worker_reports_round_trip_and_removal(store: Store) -> None:
    report = WorkerReport(
        hostname="w1@host",
        pid=42,
        status=APPLIED,
        generation=3,
        paused=("a",),
        running=("id-1",),
        held=2,
        seen=store.now(),
    )
    store.put_worker(report)
    store.put_worker(WorkerReport(hostname="w2@host", pid=7, seen=store.now()))
    assert sorted(r.hostname for r in store.worker_reports()) == ["w1@host", "w2@host"]
    assert report in store.worker_reports()

    # ... and read by name: those asked for that it has, nothing for none asked
    assert store.reports_of(["w1@host", "w3@host"]) == [report]
    assert store.reports_of([]) == []

    store.remove_worker("w1@host")
    assert [r.hostname for r in store.worker_reports()] == ["w2@host"]
    assert store.reports_of(["w1@host"]) == []


def test_corrupt_state_reads_as_paused_everything(store: Store) -> None:
    # Given garbage where the state should be
    write_raw(store, "state", "state", b'{"schema": 1, "generation": 3, "holds": [')

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
