"""The bounded JSON logs every store keeps (the pause history lives in one), on every store."""

from __future__ import annotations

import json
import threading

import pytest

from celery_pause.errors import InvalidInput
from celery_pause.model.outcome import Outcome
from celery_pause.model.state import PauseState
from celery_pause.stores.base import Store
from support.stores import Spec, make_store, raw_value, write_raw


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


def test_a_log_is_one_json_record(store: Store) -> None:
    # When an entry is appended
    store.append_log("history", {"action": "pause", "queues": None, "at": 1.5}, keep=10)

    # Then the store holds plain JSON for it, in the record of the log
    raw = raw_value(store, "record", "log:history") or b""
    assert json.loads(raw) == {"entries": [{"action": "pause", "queues": None, "at": 1.5}]}
    assert store.record_keys() == ["log:history"]


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
    # Given a log with good entries and one that is not a JSON object
    write_raw(store, "record", "log:history", b'{"entries": [{"n": 2}, "text", {"n": 1}]}')

    # When it is read, Then all come back, the damaged one marked unreadable
    newest, damaged, oldest = store.read_log("history")
    assert (newest, oldest) == ({"n": 2}, {"n": 1})
    assert "unreadable" in damaged


def test_a_log_of_earlier_releases_is_read_then_taken_over(shared_spec: Spec) -> None:
    # Given a history as earlier releases kept it (a Redis list, a file of lines, rows of
    # the SQL log table), one entry damaged
    store = make_store(*shared_spec)
    for raw in (b'{"n": 1}', b"{not json", b'{"n": 3}'):
        write_raw(store, "log", "history", raw)

    # Then it is read, newest first, the damaged entry reported
    first, damaged, last = store.read_log("history")
    assert (first, last) == ({"n": 3}, {"n": 1})
    assert "unreadable" in damaged

    # When an entry is appended, Then the log holds it before the old ones, bounded, and the
    # old layout is gone
    store.append_log("history", {"n": 4}, keep=3)
    assert [e.get("n") for e in store.read_log("history")] == [4, 3, None]
    assert store.record_keys("log:") == ["log:history"]
    assert raw_value(store, "log", "history") is None
    assert store.legacy_log("history") == []


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
