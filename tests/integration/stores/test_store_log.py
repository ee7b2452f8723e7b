"""The bounded JSON logs every store keeps (the pause history lives in one), on every store."""

from __future__ import annotations

import json
import threading

import pytest
import redis

from celery_pause.errors import InvalidInput
from celery_pause.model.outcome import Outcome
from celery_pause.model.state import PauseState
from celery_pause.stores.base import Store
from celery_pause.stores.redis import RedisStore
from support.stores import raw_value, write_raw


def test_entries_come_back_newest_first_and_the_log_stays_bounded(store: Store) -> None:
    # Given an empty log
    assert store.read_log("history") == []

    # When more entries are appended than it keeps
    for n in range(7):
        store.append_log("history", {"n": n, "text": f"entry {n}"}, keep=5)

    # Then the newest five are kept, newest first, and a limit takes the newest
    assert [e["n"] for e in store.read_log("history")] == [6, 5, 4, 3, 2]
    assert [e["n"] for e in store.read_log("history", limit=2)] == [6, 5]
    assert store.read_log("history", limit=0) == []
    assert store.read_log("other") == []


def test_entries_are_stored_as_json_under_the_prefix(store: Store) -> None:
    # When an entry is appended
    store.append_log("history", {"action": "pause", "queues": None, "at": 1.5}, keep=10)

    # Then the store holds plain JSON for it, under the store's prefix
    [raw] = (raw_value(store, "log", "history") or b"").splitlines()
    assert json.loads(raw) == {"action": "pause", "queues": None, "at": 1.5}
    if isinstance(store, RedisStore):
        client = redis.Redis.from_url(store.url)
        assert [k.decode() for k in client.scan_iter(f"{store.prefix}*")] == [
            f"{store.prefix}:log:history"
        ]


def test_bad_names_and_entries_are_refused_and_lose_nothing(store: Store) -> None:
    # Given a log with one entry
    store.append_log("history", {"n": 1}, keep=10)

    # When a bad name or a value JSON cannot hold is given, Then a clear error
    with pytest.raises(InvalidInput, match="log name"):
        store.append_log("../state", {"n": 2}, keep=10)
    with pytest.raises(InvalidInput, match="JSON"):
        store.append_log("history", {"n": object()}, keep=10)
    with pytest.raises(InvalidInput, match="JSON"):
        store.append_log("history", {"n": float("nan")}, keep=10)

    # ... and the log is as it was
    assert store.read_log("history") == [{"n": 1}]


def test_a_damaged_entry_is_reported_not_dropped(store: Store) -> None:
    # Given a log with a good entry and one that is not JSON
    store.append_log("history", {"n": 1}, keep=10)
    write_raw(store, "log", "history", b"{not json")

    # When it is read, Then both come back, the damaged one marked unreadable
    newest, oldest = store.read_log("history")
    assert "unreadable" in newest
    assert oldest == {"n": 1}


def test_appending_does_not_disturb_atomic_updates(store: Store) -> None:
    # Given threads that increase the state's generation and threads that append
    rounds = 25

    def bump(state: PauseState, now: float) -> Outcome[PauseState, None]:
        return Outcome(state.with_holds(state.holds), None)

    def updater() -> None:
        for _ in range(rounds):
            store.update(bump)

    def appender(name: str) -> None:
        for n in range(rounds):
            store.append_log("history", {"by": name, "n": n}, keep=1000)

    threads = [threading.Thread(target=updater) for _ in range(3)]
    threads += [threading.Thread(target=appender, args=(f"a{i}",)) for i in range(3)]

    # When they all run at once
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    # Then no update was lost and no entry was lost
    assert store.read().state.generation == 3 * rounds
    entries = store.read_log("history")
    assert len(entries) == 3 * rounds
    for i in range(3):
        mine = [e["n"] for e in entries if e["by"] == f"a{i}"]
        assert mine == sorted(mine, reverse=True) == list(range(rounds - 1, -1, -1))
