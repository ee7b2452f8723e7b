"""A worker's permits of a rate: start times spent in time or dropped, and booked again past
what the store forgot; slots asked for again at the cost of a read (the keeper on a real
in-memory store)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import cast

from celery.worker.request import Request

from celery_pause.errors import StoreError
from celery_pause.limits.keeper import LimitKeeper
from celery_pause.limits.permits import Permits
from celery_pause.model.limit import HORIZON, KEPT_KEY, Limit, kept_since
from celery_pause.model.limit_keys import rate_key, slots_key
from celery_pause.model.scope import EVERYTHING
from celery_pause.model.state import Hold
from celery_pause.stores.base import RecordUpdated
from celery_pause.stores.memory import MemoryStore
from celery_pause.stores.primitives import R, Record, RecordChange
from support.polling import wait_for

T = 1_800_000_000.0


def waiting(permits: Permits, count: int) -> list[tuple[Request, float]]:
    """``count`` requests of cost 1 waiting for ``permits``, in arrival order."""
    requests = [(cast(Request, object()), 1.0) for _ in range(count)]
    for request, cost in requests:
        permits.wait(request, cost)
    return requests


def spend_first(permits: Permits) -> None:
    """The first waiting request starts (the gate then takes it out of the wait)."""
    first, *rest = permits._waiting
    permits.spend(first[0])
    permits.clear_waiting()
    for request, cost in rest:
        permits.wait(request, cost)


def first(permits: Permits) -> Request:
    return permits._waiting[0][0]


def limited(rate: float) -> Permits:
    return Permits.of_hold(Hold(id="h1", scope=EVERYTHING, limit=Limit(rate=rate)))


def ramp(start: float, duration: float, peak: float) -> Permits:
    """The permits of a ramp rising to ``peak`` over ``duration`` seconds from ``start``."""
    return Permits.of_hold(
        Hold(id="r1", scope=EVERYTHING, limit=Limit(rate=peak, rise=(start, duration)))
    )


def test_a_worker_that_stalled_spends_only_the_start_times_still_in_time() -> None:
    # Given a worker holding four start times of 10/s, with tasks waiting for each
    permits = limited(10.0)
    booked = waiting(permits, 4)
    permits.add_starts(booked, [T, T + 0.1, T + 0.2, T + 0.3], retry_at=T, known=T + 0.4)

    # When its loop comes back 0.23 s after the first turn (a stall)
    now = T + 0.23

    # Then it starts one task, the first, on the one start time late by less than half an
    # interval (the third task's); the two older ones are dropped, not spent at once
    assert permits.ready(now, first(permits))
    spend_first(permits)
    assert not permits.ready(now, first(permits))
    assert permits.next_start() == T + 0.3
    # ... and it books anew for the tasks without a start time now, in turn
    assert permits.starts_wanted(now) == [booked[1], booked[2]]


def test_start_times_spent_on_their_turn_are_all_spent() -> None:
    # Given four start times of 10/s, and a loop a few milliseconds late at each turn
    permits = limited(10.0)
    booked = waiting(permits, 4)
    permits.add_starts(booked, [T, T + 0.1, T + 0.2, T + 0.3], retry_at=T, known=T + 0.4)

    # Then each starts a task, none before its turn
    for i in range(4):
        assert not permits.ready(T + i * 0.1 - 0.001, first(permits))
        assert permits.ready(T + i * 0.1 + 0.004, first(permits))
        spend_first(permits)
    assert permits.next_start() is None


def test_a_ramps_start_times_are_as_late_as_its_rate_at_the_time_allows() -> None:
    # Given a ramp at 40/s now (half of 80/s, halfway through)
    permits = ramp(T - 10, 20.0, 80.0)
    booked = waiting(permits, 2)
    permits.add_starts(booked, [T, T], retry_at=T, known=T + 0.05)

    # Then a start time 20 ms late is spent, one 30 ms late is dropped (40/s: 25 ms)
    assert permits.ready(T + 0.02, first(permits))
    spend_first(permits)
    assert not permits.ready(T + 0.03, first(permits))
    assert permits.next_start() is None


def test_the_keeper_books_a_rate_the_store_forgot_past_every_start_time_held() -> None:
    # Given two workers' keepers on an in-memory store that kept its records for an hour,
    # the first holding start times of 10/s booked for ten waiting tasks
    store = MemoryStore("memory://permits", uuid.uuid4().hex)
    store.update_record(KEPT_KEY, lambda record, now: kept_since(record, now - 3600))
    early, second = limited(10.0), limited(10.0)
    for permits in (early, second):
        waiting(permits, 10)
    keeper(store).pace((early,), [])
    assert early.next_start() is not None and early.known > time.time()
    held = early.known

    # When the store forgets everything, and the second worker books, knowing nothing
    store.space.clear()
    keeper(store).pace((second,), [])

    # Then the record restarts past the times held (a horizon and an interval ahead), and
    # the store says since when it kept its records again
    restored = store.read_record(rate_key("h1"))
    assert restored is not None and held <= restored["tat"] <= time.time() + HORIZON + 0.1
    kept = store.read_record(KEPT_KEY)
    assert kept is not None and time.time() - 1 < kept["since"] <= time.time()
    # ... and the first worker, which saw the record ahead, books after it
    early.retry_at = float("-inf")
    keeper(store).pace((early,), [])
    again = store.read_record(rate_key("h1"))
    assert again is not None and again["tat"] >= restored["tat"]


def keeper(store: MemoryStore, hostname: str = "w1") -> LimitKeeper:
    return LimitKeeper(store=store, hostname=hostname, clock=store.now, ttl=6.0, pump=lambda: None)


def test_a_returning_tenant_is_booked_at_once_on_a_store_that_kept_its_records() -> None:
    # Given a store that kept its records for an hour, and a partition's record deleted
    # (its tenant went idle)
    store = MemoryStore("memory://permits", uuid.uuid4().hex)
    store.update_record(KEPT_KEY, lambda record, now: kept_since(record, now - 3600))
    permits = limited(10.0)
    waiting(permits, 1)

    # When its next task comes
    asked = time.time()
    keeper(store).pace((permits,), [])

    # Then its start time is now, not a horizon ahead
    booked = permits.next_start()
    assert booked is not None and booked - asked < 0.1


def test_once_a_ramp_is_over_every_waiting_task_starts() -> None:
    # Given a ramp's permits holding a start time of its last second
    permits = ramp(T - 20, 20.0, 40.0)
    booked = waiting(permits, 3)
    permits.add_starts(booked[:1], [T - 0.5], retry_at=T, known=T)

    # Then from its end on the scope is unlimited: each waiting task may start
    for _ in range(3):
        assert permits.ready(T + 0.1, first(permits))
        spend_first(permits)


def test_a_request_holds_its_slot_from_its_start_until_its_end_is_seen() -> None:
    # Given a concurrency limit with a slot taken, and two requests waiting for it
    permits = Permits.of_hold(Hold(id="c1", scope=EVERYTHING, limit=Limit(concurrency=1)))
    first_request, second_request = (request for request, _ in waiting(permits, 2))
    permits.add_slots(["w1/a"])
    assert not permits.runs(first_request)

    # When the first starts, Then it holds the slot, the other does not
    assert permits.ready(T, first_request)
    permits.spend(first_request)
    assert permits.runs(first_request) and not permits.runs(second_request)

    # When its end is seen, Then it holds it no more
    permits.ended(lambda request: False, reuse=True)
    assert not permits.runs(first_request)


class CountedStore(MemoryStore):
    """An in-memory store that counts its record reads and changes."""

    def __init__(self, url: str, prefix: str) -> None:
        super().__init__(url, prefix)
        self.reads = 0
        self.changes = 0

    def read_each(self, keys: Sequence[str]) -> dict[str, Record | StoreError | None]:
        self.reads += 1
        return super().read_each(keys)

    def update_record(self, key: str, change: RecordChange[R]) -> RecordUpdated[R]:
        self.changes += 1
        return super().update_record(key, change)


def test_asking_again_for_a_slot_another_worker_holds_reads_and_writes_nothing() -> None:
    # Given two workers with a task each of one tenant under concurrency 1, the first
    # holding the slot, and the second refused it once
    store = CountedStore("memory://slots", uuid.uuid4().hex)
    hold = Hold(id="c1", scope=EVERYTHING, limit=Limit(concurrency=1))
    mine, theirs = (Permits(id="c1:t", scope=hold.scope, limit=hold.limit, value="t") for _ in "12")
    for permits in (mine, theirs):
        waiting(permits, 1)
    first_keeper, second_keeper = keeper(store), keeper(store)
    first_keeper.pace((mine,), [])
    second_keeper.pace((theirs,), [])
    assert mine.slots_held() == 1 and theirs.refused and not theirs.slots_held()

    # When the second asks again while the slot is held
    changes, reads = store.changes, store.reads

    def second_asks() -> None:
        second_keeper.pace((theirs,), [])

    wait_for(lambda: second_asks() or store.reads > reads, timeout=5, what="an ask again")
    # Then it read the record once, wrote nothing, and is refused still
    assert store.reads == reads + 1 and store.changes == changes
    assert theirs.refused and not theirs.slots_held()

    # When the first's task ends (its slot given back), Then the second's next ask takes it
    spend_first(mine)
    mine.clear_waiting()
    first_keeper.pace((mine,), [])
    wait_for(lambda: second_asks() or theirs.slots_held(), timeout=5, what="the slot taken")
    assert not theirs.refused


def test_an_ended_tasks_slot_goes_to_another_tenant_only_if_the_store_grants_it_one() -> None:
    # Given a worker of one pool process under concurrency 1 per tenant, running the first
    # of tenant a's three tasks, a task of tenant b waiting, and b's slot held by another worker
    store = MemoryStore("memory://share", uuid.uuid4().hex)
    limit = Limit(concurrency=1, per="tenant")
    a, b, elsewhere = (
        Permits(id=f"c1:{v}", scope=EVERYTHING, limit=limit, value=v) for v in ("a", "b", "b")
    )
    waiting(elsewhere, 1)
    other = keeper(store, "w2")
    other.pace((elsewhere,), [])
    mine = keeper(store)
    waiting(a, 3)
    mine.pace((a,), [])
    spend_first(a)
    waiting(b, 1)
    (a_slot,) = a.held_slots()

    # When a's task ends while b's slot is held elsewhere
    mine.pace((a, b), [])

    # Then b was refused, and a kept its slot for its next task (not given back and taken
    # again)
    assert b.refused and not b.slots_held()
    assert a.held_slots() == [a_slot] and store.read_record(slots_key("c1:a")) is not None

    # When b's slot is given back elsewhere, and a's second task ends once b may ask again
    spend_first(elsewhere)
    elsewhere.clear_waiting()
    other.pace((elsewhere,), [])
    wait_for(lambda: b.slots_wanted(1) > 0, timeout=5, what="b's next ask")
    spend_first(a)
    mine.pace((a, b), [])

    # Then b took a slot, and a gave back the pool's room (its third task waits)
    assert b.slots_held() == 1 and a.waiting == 1
    assert not a.slots_held() and store.read_record(slots_key("c1:a")) is None
