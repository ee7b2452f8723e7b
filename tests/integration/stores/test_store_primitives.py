"""One contract for the stores' shared counters, records and leases, run on every store."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis

from celery_pause.errors import InvalidInput, StoreError
from celery_pause.model.outcome import Outcome
from celery_pause.model.scope import EVERYTHING
from celery_pause.model.state import UNREADABLE, Hold, PauseState
from celery_pause.stores.base import Store
from celery_pause.stores.file import FileStore
from celery_pause.stores.memory import MemoryStore
from celery_pause.stores.redis import RedisStore
from support.harness import wait_for
from support.services import require
from support.stores import (
    REDIS_STORE,
    Spec,
    make_store,
    private,
    raw_value,
    run_in_processes,
    sql_rows,
    write_raw,
)

PROCESSES = 4
EACH = 25


def add_events(store: Store, key: str) -> list[int]:
    return [store.add_event(key, window=60, detail="x") for _ in range(EACH)]


def increment(store: Store, key: str) -> None:
    for _ in range(EACH):
        store.update_record(key, increment_once)


def increment_once(record: dict[str, Any] | None, now: float) -> Outcome[dict[str, Any], None]:
    return Outcome({"n": (record or {"n": 0})["n"] + 1}, None)


def pause_everything(state: PauseState, now: float) -> Outcome[PauseState, None]:
    return Outcome(state.with_holds([*state.holds, Hold(scope=EVERYTHING, paused_at=now)]), None)


def take_lease(store: Store, key: str) -> bool:
    return store.acquire_lease(key, f"owner-{uuid.uuid4().hex}", 30)


# -- sliding windows -----------------------------------------------------------------------
def test_events_count_within_the_window_and_keep_their_details(store: Store) -> None:
    # Given an empty window
    assert store.recent_events("breaker:a", window=60) == []

    # When three events are added
    counts = [store.add_event("breaker:a", window=60, detail=f"e{i}") for i in range(3)]

    # Then each add returns the new count, and the details come back oldest first
    assert counts == [1, 2, 3]
    events = store.recent_events("breaker:a", window=60)
    assert [e.detail for e in events] == ["e0", "e1", "e2"]
    assert events[0].at <= events[1].at <= events[2].at


def test_events_older_than_the_window_no_longer_count(store: Store) -> None:
    # Given an event
    store.add_event("breaker:old", window=0.3, detail="first")

    # When the window has passed
    wait_for(lambda: not store.recent_events("breaker:old", window=0.3), timeout=10, what="expiry")

    # Then a new event finds itself alone in the window
    assert store.add_event("breaker:old", window=0.3, detail="second") == 1
    assert [e.detail for e in store.recent_events("breaker:old", window=60)] == ["second"]


def test_events_are_capped_at_the_limit_and_can_be_cleared(store: Store) -> None:
    # Given five events added with a limit of three
    counts = [store.add_event("breaker:cap", window=60, limit=3) for _ in range(5)]

    # Then the window never holds more than three
    assert counts == [1, 2, 3, 3, 3]

    # When cleared, it is empty
    store.clear_events("breaker:cap")
    assert store.recent_events("breaker:cap", window=60) == []


def test_concurrent_events_are_counted_exactly_once_each(shared_spec: Spec) -> None:
    # When four processes add 25 events each at the same time
    results = run_in_processes(shared_spec, add_events, "breaker:race", processes=PROCESSES)
    store = make_store(*shared_spec)

    # Then every add saw a distinct count: no two adds interleaved
    seen = sorted(count for counts in results for count in counts)
    assert seen == list(range(1, PROCESSES * EACH + 1))
    assert len(store.recent_events("breaker:race", window=60)) == PROCESSES * EACH


# -- records -------------------------------------------------------------------------------
def test_records_are_created_changed_listed_and_deleted(store: Store) -> None:
    # Given no record
    assert store.read_record("breaker:r") is None

    # When one is created, and a change that declines is applied
    made = store.update_record("breaker:r", lambda rec, now: Outcome({"at": now, "v": 1}, 1))
    kept = store.update_record("breaker:r", lambda rec, now: Outcome(None, 2))
    created, same = made.record, kept.record

    # Then the record is stored as JSON, and the declined change wrote nothing
    assert made.changed and not kept.changed
    assert (made.result, kept.result) == (1, 2)
    assert created == same == store.read_record("breaker:r")
    assert created is not None and created["v"] == 1 and created["at"] > 0
    store.update_record("other:s", lambda rec, now: Outcome({"v": 2}, None))
    assert store.record_keys("breaker:") == ["breaker:r"]
    assert store.record_keys() == ["breaker:r", "other:s"]

    # When deleted, it is gone
    store.delete_record("breaker:r")
    assert store.read_record("breaker:r") is None
    assert store.record_keys("breaker:") == []


def test_a_change_that_leaves_a_record_empty_deletes_it(store: Store) -> None:
    # Given two records under one prefix
    store.update_record("limit:h:a:slots", lambda rec, now: Outcome({"slots": {"w/1": now}}, 1))
    store.update_record("limit:h:b:slots", lambda rec, now: Outcome({"slots": {"w/2": now}}, 1))
    assert set(store.read_records("limit:h:")) == {"limit:h:a:slots", "limit:h:b:slots"}

    # When a change writes one of them empty
    emptied = store.update_record("limit:h:a:slots", lambda rec, now: Outcome({}, True))

    # Then it is deleted, the other read in bulk as it was; an empty write of none is a no-op
    assert emptied.changed and emptied.record is None
    assert store.read_record("limit:h:a:slots") is None
    assert store.record_keys("limit:h:") == ["limit:h:b:slots"]
    assert list(store.read_records("limit:h:")) == ["limit:h:b:slots"]
    assert store.read_records("limit:h:")["limit:h:b:slots"]["slots"].keys() == {"w/2"}
    store.update_record("limit:h:none", lambda rec, now: Outcome({}, None))
    assert store.read_record("limit:h:none") is None


def test_concurrent_record_updates_lose_nothing(shared_spec: Spec) -> None:
    # When four processes increment one record 25 times each
    run_in_processes(shared_spec, increment, "breaker:count", processes=PROCESSES)
    store = make_store(*shared_spec)

    # Then every increment is there
    assert store.read_record("breaker:count") == {"n": PROCESSES * EACH}


def test_a_record_changed_or_deleted_by_another_process_is_changed_from_what_it_holds(
    shared_spec: Spec,
) -> None:
    # Given two processes' stores, the first having written a record last
    mine, theirs = make_store(*shared_spec), make_store(*shared_spec)
    bump = increment_once
    mine.update_record("breaker:n", bump)
    assert mine.read_record("breaker:n") == {"n": 1}

    # When the other changes it twice, then the first changes it again
    theirs.update_record("breaker:n", bump)
    theirs.update_record("breaker:n", bump)
    mine.update_record("breaker:n", bump)
    # Then the change was made to what the record held, not to what the first wrote
    assert theirs.read_record("breaker:n") == {"n": 4}

    # When the other deletes it, and the first changes it (it wrote last)
    theirs.delete_record("breaker:n")
    mine.update_record("breaker:n", bump)
    mine.update_record("breaker:n", bump)
    # Then the change starts from a missing record
    assert theirs.read_record("breaker:n") == {"n": 2}

    # When a process that never saw it creates it, and another that never saw it changes it
    # in a way that writes nothing (an outcome of no change)
    theirs.update_record("breaker:m", bump)
    third = make_store(*shared_spec)
    seen = third.update_record("breaker:m", lambda rec, now: Outcome(None, rec))
    # Then that change saw the record as it is, not as missing
    assert seen.result == {"n": 1}
    for opened in (mine, theirs, third):
        opened.close()


def test_the_state_and_a_record_read_together_are_each_as_read_alone(store: Store) -> None:
    # Given a pause in the state and no record
    store.update(pause_everything)
    alone = store.read().state

    # Then the state read with the missing record is the pause, the record none
    snapshot, record = store.read_with_record("parking:queues")
    assert snapshot.state == alone and snapshot.state.holds and record is None
    assert snapshot.now == pytest.approx(store.now(), abs=5)

    # When the record is written, Then it is read with the state
    store.update_record("parking:queues", increment_once)
    assert store.read_with_record("parking:queues")[1] == {"n": 1}

    # When the record is unreadable, Then the state is read all the same, and the record's
    # error is answered in its place (as the record's read alone raises it)
    write_raw(store, "record", "parking:queues", b"{not json")
    snapshot, record = store.read_with_record("parking:queues")
    assert snapshot.state == alone
    assert isinstance(record, StoreError) and "parking:queues" in str(record)
    with pytest.raises(StoreError, match="parking:queues"):
        store.read_record("parking:queues")


def test_records_read_each_are_as_read_alone(store: Store) -> None:
    # Given a record, a missing one and an unreadable one
    store.update_record("limit:h:a:slots", increment_once)
    write_raw(store, "record", "limit:h:c:slots", b"{not json")

    # Then all read together are each as read alone, the unreadable as its error
    found = store.read_each(["limit:h:a:slots", "limit:h:b:slots", "limit:h:c:slots"])
    assert found["limit:h:a:slots"] == {"n": 1} and found["limit:h:b:slots"] is None
    error = found["limit:h:c:slots"]
    assert isinstance(error, StoreError) and "limit:h:c:slots" in str(error)
    assert store.read_each([]) == {}


def changes_start_from_what_records_hold(mine: Store, theirs: Store) -> None:
    """``mine`` changes a record ``theirs`` changed since ``mine`` read it, and one
    ``theirs`` created that ``mine`` never saw: each change counts what the record held."""
    theirs.update_record("breaker:n", increment_once)
    assert mine.read_each(["breaker:n"]) == {"breaker:n": {"n": 1}}
    theirs.update_record("breaker:n", increment_once)
    mine.update_record("breaker:n", increment_once)
    assert theirs.read_record("breaker:n") == {"n": 3}

    theirs.update_record("breaker:m", increment_once)
    mine.update_record("breaker:m", increment_once)
    assert theirs.read_record("breaker:m") == {"n": 2}


def test_a_change_after_a_read_or_a_guess_of_missing_starts_from_what_the_record_holds(
    shared_spec: Spec,
) -> None:
    # Given two processes' stores, When one changes records the other read or created,
    # Then from what they hold, not from what was read or guessed missing
    mine, theirs = make_store(*shared_spec), make_store(*shared_spec)
    changes_start_from_what_records_hold(mine, theirs)
    for opened in (mine, theirs):
        opened.close()


def test_a_redis_server_without_set_nx_get_creates_records_all_the_same() -> None:
    require("Redis", "127.0.0.1", 6379)
    with private("redis", REDIS_STORE, f"create-{uuid.uuid4().hex[:8]}") as spec:
        # Given a Redis store that creates records as it must before Redis 7.0 (SET NX,
        # then GET when the record was there after all)
        mine, theirs = make_store(*spec), make_store(*spec)
        assert isinstance(mine, RedisStore)
        mine._create_reads = False
        # Then its changes start from what the records hold all the same
        changes_start_from_what_records_hold(mine, theirs)
        # ... and a record it creates is written (SET NX)
        mine.update_record("breaker:new", increment_once)
        assert theirs.read_record("breaker:new") == {"n": 1}


def test_a_state_key_of_another_type_reads_unreadable_with_a_record_too() -> None:
    require("Redis", "127.0.0.1", 6379)
    with private("redis", REDIS_STORE, f"typed-{uuid.uuid4().hex[:8]}") as spec:
        store = make_store(*spec)
        assert isinstance(store, RedisStore)
        # Given a Redis store whose state key someone made a list
        store.client.lpush(store.state_key, b"oops")

        # Then the state read with a record is the unreadable hold on everything, as alone
        snapshot, record = store.read_with_record("parking:queues")
        assert record is None and snapshot.state == store.read().state
        [hold] = snapshot.state.holds
        assert hold.source == UNREADABLE and hold.scope == EVERYTHING


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]"])
def test_an_unreadable_record_is_an_error_and_stays_as_it_is(store: Store, raw: bytes) -> None:
    # Given a record that is not a JSON object
    write_raw(store, "record", "breaker:bad", raw)

    # Then reading and updating it fail clearly, and nothing overwrites it
    with pytest.raises(StoreError, match="breaker:bad"):
        store.read_record("breaker:bad")
    with pytest.raises(StoreError, match="breaker:bad"):
        store.update_record("breaker:bad", lambda rec, now: Outcome({"state": "closed"}, None))
    with pytest.raises(StoreError):
        store.read_record("breaker:bad")

    # When it is deleted, Then it is gone (the way out of a damaged record)
    store.delete_record("breaker:bad")
    assert store.read_record("breaker:bad") is None and store.record_keys() == []


def test_only_json_objects_and_plain_keys_are_accepted(store: Store) -> None:
    with pytest.raises(InvalidInput, match="JSON"):
        store.update_record("breaker:x", lambda rec, now: Outcome({"v": object()}, None))
    with pytest.raises(InvalidInput, match="object"):
        store.update_record("breaker:x", lambda rec, now: Outcome([1], None))  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="store key"):
        store.add_event("../escape", window=1)
    with pytest.raises(InvalidInput, match="store key"):
        store.acquire_lease("a key with spaces", "me", 1)
    assert store.read_record("breaker:x") is None


# -- leases --------------------------------------------------------------------------------
def test_a_lease_has_one_owner_who_alone_extends_or_releases_it(store: Store) -> None:
    # Given a lease taken by a
    assert store.acquire_lease("breaker:l", "a", 30)

    # Then b cannot take it nor release it; a can extend it
    assert not store.acquire_lease("breaker:l", "b", 30)
    assert not store.release_lease("breaker:l", "b")
    assert store.acquire_lease("breaker:l", "a", 30)
    assert store.lease_owner("breaker:l") == "a"

    # When a releases it, b can take it
    assert store.release_lease("breaker:l", "a")
    assert store.lease_owner("breaker:l") is None
    assert store.acquire_lease("breaker:l", "b", 30)


def test_leases_taken_together_each_have_one_owner(store: Store) -> None:
    # Given a lease held by a
    assert store.acquire_lease("claim:held", "a", 30)

    # When b takes it and two free ones in one call, and c one of those after
    taken = store.acquire_leases({"claim:held": "b", "claim:x": "b", "claim:y": "b"}, 30)
    again = store.acquire_leases({"claim:x": "b", "claim:y": "c"}, 30)

    # Then b got the free ones only, may extend its own, and c gets none of b's
    assert taken == {"claim:held": False, "claim:x": True, "claim:y": True}
    assert again == {"claim:x": True, "claim:y": False}
    assert [store.lease_owner(k) for k in ("claim:held", "claim:x", "claim:y")] == ["a", "b", "b"]


def test_an_unrenewed_lease_expires(store: Store) -> None:
    # Given a lease that its owner stops renewing (it crashed)
    assert store.acquire_lease("breaker:crash", "dead", 0.3)
    assert not store.acquire_lease("breaker:crash", "alive", 30)

    # When its time is up, another owner gets it
    wait_for(lambda: store.lease_owner("breaker:crash") is None, timeout=10, what="expiry")
    assert store.acquire_lease("breaker:crash", "alive", 30)
    assert store.lease_owner("breaker:crash") == "alive"


@pytest.mark.parametrize(
    "stored",
    [b"not json", b"[1, 2]", b'"text"', b'{"owner": 7, "expires": 9e15}'],
    ids=["not-json", "array", "string", "owner-a-number"],
)
def test_a_damaged_lease_record_is_never_taken_over(store: Store, stored: bytes) -> None:
    # Given a lease record overwritten with something that is not a lease
    assert store.acquire_lease("breaker:damaged", "a", 30)
    write_raw(store, "record", "lease:breaker:damaged", stored)

    # Then taking it fails saying so, or (an owner it cannot read, not yet expired) finds it
    # held; the record stays as it was
    if stored.startswith(b"{"):
        assert not store.acquire_lease("breaker:damaged", "b", 30)
    else:
        with pytest.raises(StoreError, match="breaker:damaged"):
            store.acquire_lease("breaker:damaged", "b", 30)
    assert raw_value(store, "record", "lease:breaker:damaged") == stored


def test_exactly_one_of_many_racing_processes_gets_a_lease(shared_spec: Spec) -> None:
    # When four processes try to take the same free lease at once
    results = run_in_processes(shared_spec, take_lease, "breaker:race", processes=PROCESSES)
    store = make_store(*shared_spec)

    # Then exactly one holds it
    assert sorted(results) == [False] * (PROCESSES - 1) + [True]
    assert store.lease_owner("breaker:race") is not None


def test_events_leases_and_records_are_records_under_the_store_prefix(
    store_spec: Spec, store: Store
) -> None:
    # Given one of each
    store.add_event("breaker:p", window=60)
    store.update_record("breaker:p", lambda rec, now: Outcome({"v": 1}, None))
    store.acquire_lease("breaker:p", "me", 30)

    # Then each is a record of its own
    assert store.record_keys() == ["breaker:p", "events:breaker:p", "lease:breaker:p"]
    assert store.record_keys("lease:") == ["lease:breaker:p"]

    # ... and every key (or file) carries the store's prefix
    kind, url, prefix = store_spec
    if kind == "redis":
        client = redis.Redis.from_url(url)
        keys = sorted(k.decode() for k in client.scan_iter(f"{prefix}:*"))
        assert keys == [
            f"{prefix}:record:breaker:p",
            f"{prefix}:record:events:breaker:p",
            f"{prefix}:record:lease:breaker:p",
        ]
    elif isinstance(store, MemoryStore):
        assert MemoryStore(url, f"{prefix}-other").record_keys() == []
    elif isinstance(store, FileStore):
        files = sorted(str(p.relative_to(store.root)) for p in store.root.rglob("*.json"))
        assert files == [
            "records/breaker%3Ap.json",
            "records/events%3Abreaker%3Ap.json",
            "records/lease%3Abreaker%3Ap.json",
        ]
    else:
        assert sql_rows(store) == [
            ("record", "breaker:p"),
            ("record", "events:breaker:p"),
            ("record", "lease:breaker:p"),
        ]

    # When the lease is released and the events cleared, their records go
    assert store.release_lease("breaker:p", "me")
    store.clear_events("breaker:p")
    assert store.record_keys() == ["breaker:p"]


def test_the_records_hash_of_earlier_releases_moves_to_a_key_each_at_first_use() -> None:
    require("Redis", "127.0.0.1", 6379)
    with private("redis", REDIS_STORE, f"moved-{uuid.uuid4().hex[:8]}") as spec:
        store = make_store(*spec)
        assert isinstance(store, RedisStore)
        # Given records as an earlier release kept them, in one hash, and one of them
        # already written as a key of its own (by a process that moved it)
        old = {"breaker:a": b'{"n": 1}', "limit:h:x:slots": b'{"slots": {}}', "k": b'{"v": 1}'}
        store.client.hset(store.legacy_key, mapping=old)  # type: ignore[arg-type]
        store.client.set(store.record_key("k"), b'{"v": 2}')

        # Then they are read, listed and read in bulk; the key written since wins
        assert store.read_record("breaker:a") == {"n": 1}
        assert store.record_keys() == ["breaker:a", "k", "limit:h:x:slots"]
        assert store.read_records("limit:") == {"limit:h:x:slots": {"slots": {}}}
        assert store.read_record("k") == {"v": 2}

        # ... from their own keys: the hash is gone, and changes build on what it held
        assert not store.client.exists(store.legacy_key)
        increment(store, "breaker:a")
        store.delete_record("limit:h:x:slots")
        assert store.read_record("breaker:a") == {"n": 1 + EACH}
        assert store.record_keys() == ["breaker:a", "k"]
        store.close()


def test_processes_that_move_the_records_hash_at_once_lose_no_change() -> None:
    require("Redis", "127.0.0.1", 6379)
    with private("redis", REDIS_STORE, f"moving-{uuid.uuid4().hex[:8]}") as spec:
        # Given a counter in the records hash of an earlier release
        first = make_store(*spec)
        assert isinstance(first, RedisStore)
        first.client.hset(first.legacy_key, "breaker:count", b'{"n": 1000}')

        # When four fresh processes each move the hash (all at once) and increment it
        run_in_processes(spec, increment, "breaker:count", processes=PROCESSES)

        # Then every increment built on the moved value, and the hash is gone
        assert first.read_record("breaker:count") == {"n": 1000 + PROCESSES * EACH}
        assert not first.client.exists(first.legacy_key)
        first.close()


def test_an_event_window_or_lease_key_over_200_characters_is_refused(store: Store) -> None:
    with pytest.raises(InvalidInput, match="over 200"):
        store.add_event("k" * 201, window=1)
    with pytest.raises(InvalidInput, match="over 200"):
        store.acquire_lease("k" * 201, "me", 1)
    assert store.record_keys() == []
