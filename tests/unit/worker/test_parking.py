"""Parking's decisions: what a copy claims as, what is parked, and who wins a claim."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from celery import Celery
from celery.worker.request import Request
from hypothesis import given, settings

from celery_pause.model import parking as parking_module
from celery_pause.model.outcome import Outcome
from celery_pause.model.parking import (
    MIN_MAX_HELD,
    PARKED_HEADER,
    REGISTRY,
    SOURCE_COPY,
    Marker,
    claim_key,
    claim_life,
    forgotten,
    lifted,
    max_held_for,
    named,
    parked_at,
    parked_values,
    parking_queue,
    parking_queues,
    value_parked,
    value_queue,
)
from celery_pause.model.scope import Scope, Target
from celery_pause.model.state import Hold
from celery_pause.stores.memory import MemoryStore
from celery_pause.stores.primitives import lease_key
from celery_pause.worker.claims import hand_claim
from celery_pause.worker.parking import Parking
from celery_pause.worker.unparking import Unparking
from support.hostile import values
from support.requests import request_of


class Channel:
    """Where a message's acknowledgement goes (the broker's channel, as kombu calls it)."""

    no_ack_consumers = None

    def __init__(self) -> None:
        self.acked: list[Any] = []

    def basic_ack(self, delivery_tag: Any, multiple: bool = False) -> None:
        self.acked.append(delivery_tag)


def parking(store: MemoryStore | None = None) -> Parking:
    app = Celery("parking", broker="memory://", set_as_current=False)
    return Parking(
        app,
        store or MemoryStore("memory://parking", uuid.uuid4().hex),
        prefix="celery-pause:proj",
        life=3600.0,
        max_held=2,
    )


def unparking_of(park: Parking) -> Unparking:
    """The thread that brings back what ``park`` parked (not started: its steps are called)."""
    app = Celery("parking", broker="memory://", set_as_current=False)
    return Unparking(
        app, park.store, hostname="w1", interval=1.0, parking=park, prefix="p", holds=tuple
    )


def delivered(headers: dict[str, Any] | None = None, *, redelivered: Any = False) -> Request:
    """A request whose message came through a channel, with ``headers`` added."""
    request = request_of("A", **(headers or {}))
    request.message.channel = Channel()
    request.message.delivery_tag = uuid.uuid4().hex
    request.message.delivery_info["redelivered"] = redelivered
    request._on_ack = request.message.ack_log_error  # as a worker's strategy sets it
    return request


def marker(copy: str = "c1") -> dict[str, str]:
    return Marker(copy, "h1", "celery", "celery").to_header()


def test_a_copy_claims_as_its_marker_says_a_redelivered_one_as_the_source() -> None:
    assert Parking.copy_of(delivered()) is None
    assert Parking.copy_of(delivered(redelivered=True)) == SOURCE_COPY
    assert Parking.copy_of(delivered({PARKED_HEADER: marker("c7")})) == "c7"
    assert Parking.copy_of(delivered(redelivered="yes")) is None  # only True says redelivered


@settings(max_examples=200, deadline=None)
@given(header=values, redelivered=values)
def test_no_header_content_raises_out_of_copy_of(header: Any, redelivered: Any) -> None:
    copy = Parking.copy_of(delivered({PARKED_HEADER: header}, redelivered=redelivered))
    assert copy is None or isinstance(copy, str)


def test_marker_reads_only_what_it_wrote() -> None:
    assert Marker.from_header(marker("c1")) == Marker("c1", "h1", "celery", "celery")
    claimed = Marker("c1", "h1", "celery", "celery", claimed=True)
    assert Marker.from_header(claimed.to_header()) == claimed
    every = Marker("c1", "h1", "celery", "celery", True, True, True, True)
    assert Marker.from_header(every.to_header()) == every
    assert set(every.to_header()) - set(claimed.to_header()) == {"turn", "owned", "sent"}
    assert Marker.from_header({**marker(), "claimed": "yes"}) == Marker.from_header(marker())
    for bad in (None, "c1", [], {"copy": "", "hold": "h", "exchange": "", "routing_key": "q"}):
        assert Marker.from_header(bad) is None
    assert Marker.from_header({**marker(), "routing_key": 7}) is None


def test_the_first_copy_to_start_wins_the_claim_the_same_copy_again_too() -> None:
    # Given one store, and two copies of one task id, each parked once
    store = MemoryStore("memory://claims", uuid.uuid4().hex)
    first = delivered({PARKED_HEADER: marker("c1")})
    twin = delivered({PARKED_HEADER: marker("c2"), "id": first.id})
    again = delivered({PARKED_HEADER: marker("c1"), "id": first.id})

    # When each asks to start, the first copy, its twin, then the first copy delivered again
    outcomes = [parking(store).claims(request) for request in (first, twin, again)]

    # Then the first starts (its marker taken off), the twin is acknowledged and dropped, and
    # the first copy delivered again starts, as an acks_late task does after a lost worker
    assert outcomes == [True, False, True]
    assert PARKED_HEADER not in first._request_dict
    assert twin.message.channel.acked == [twin.message.delivery_tag]
    assert first.message.channel.acked == []


def test_a_copy_that_claimed_and_moves_on_hands_its_claim_to_its_next_copy() -> None:
    # Given a copy that claimed its task id and was then held again (a pause came first)
    store = MemoryStore("memory://claims", uuid.uuid4().hex)
    first = delivered({PARKED_HEADER: marker("c1")})
    assert parking(store).claims(first)

    # When it is parked again as copy c2 (and an unknown copy tries the same)
    handed = hand_claim(store, first.id, "c1", "c2", 3600.0)
    stranger = hand_claim(store, first.id, "c9", "c10", 3600.0)

    # Then c2 holds the claim and starts, and the c1 left behind (a twin) is dropped
    assert (handed, stranger) == (True, None)
    assert parking(store).claims(delivered({PARKED_HEADER: marker("c2"), "id": first.id}))
    assert not parking(store).claims(delivered({PARKED_HEADER: marker("c1"), "id": first.id}))
    assert hand_claim(store, uuid.uuid4().hex, "c1", "c2", 3600.0) is False  # nothing claimed


def test_a_request_never_moved_claims_nothing() -> None:
    store = MemoryStore("memory://claims", uuid.uuid4().hex)
    assert parking(store).claims(delivered())
    assert store.record_keys("") == []


def test_the_newest_past_the_bound_are_parked_under_the_pause_that_covers_them() -> None:
    # Given a parking that keeps two, a pause of tenant A, and five held requests (A, B, A, A, A)
    park = parking()
    park.under([Hold(id="hA", scope=Scope.of(labels=["tenant=A"]))])
    tenants = ["A", "B", "A", "A", "A"]
    held = [(request_of(t), float(i)) for i, t in enumerate(tenants)]

    def target_of(request: Request) -> Target:
        return Target(queue="celery", label=(f"tenant={request.kwargs['tenant_id']}",))

    # When it chooses what to park
    over = park.overflow(held, 2, target_of)

    # Then the three newest of A go, newest first; the oldest A and the B stay
    assert [since for _, since in over] == [4.0, 3.0, 2.0]
    assert park.hold_of(target_of(held[1][0])) is None


def test_the_default_bound_is_four_prefetch_windows_and_at_least_64() -> None:
    assert max_held_for(0) == MIN_MAX_HELD
    assert max_held_for(8) == MIN_MAX_HELD
    assert max_held_for(40) == 160


@pytest.mark.parametrize(
    ("prefix", "hold", "expected"),
    [
        ("celery-pause:proj", "a1b2", "celery-pause:proj.parked.a1b2"),
        ("my app\n", "h/1", "my_app_.parked.h_1"),
    ],
)
def test_a_parking_queue_is_named_after_the_prefix_and_hold(
    prefix: str, hold: str, expected: str
) -> None:
    assert parking_queue(prefix, hold) == expected


def test_a_claim_outlives_twice_a_long_visibility_timeout() -> None:
    assert claim_life(None) == 6 * 3600
    assert claim_life(36000) == 72000


def test_the_registry_names_marks_lifted_and_forgets_each_parking_queue() -> None:
    store = MemoryStore("memory://registry", uuid.uuid4().hex)
    assert store.update_record(REGISTRY, named("h1", "q1")).changed
    assert not store.update_record(REGISTRY, named("h1", "q1")).changed  # no write twice
    store.update_record(REGISTRY, named("h2", "q2"))
    assert parking_queues(store.read_record(REGISTRY)) == {"h1": "q1", "h2": "q2"}

    first = store.update_record(REGISTRY, lifted("h1", "q1")).result
    assert store.update_record(REGISTRY, lifted("h1", "q1")).result == first  # kept, not moved
    assert store.update_record(REGISTRY, named("h1", "q1")).changed  # a late park names it again

    store.update_record(REGISTRY, forgotten("h1"))
    store.update_record(REGISTRY, forgotten("h2"))
    assert parking_queues(store.read_record(REGISTRY)) == {}
    assert parked_at(store.read_record(REGISTRY)) is not None  # claims still needed a while
    assert parking_queues({"queues": {"h": {"queue": 7}, "g": "x"}}) == {}


def test_a_pause_by_label_names_a_queue_per_value_up_to_the_bound_and_keeps_them_when_lifted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = MemoryStore("memory://registry", uuid.uuid4().hex)
    own = parking_queue("p", "h1")

    def park(value: str) -> Any:
        return store.update_record(
            REGISTRY, value_parked("h1", own, value, value_queue("p", "h1", value))
        )

    # Each value is given a queue of its own, named once; the hold's own queue is named too
    assert park("A").result == value_queue("p", "h1", "A")
    assert not park("A").changed
    assert park("C").result == value_queue("p", "h1", "C")
    record = store.read_record(REGISTRY)
    assert parking_queues(record) == {"h1": own}
    assert parked_values(record, "h1") == {
        "A": value_queue("p", "h1", "A"),
        "C": value_queue("p", "h1", "C"),
    }

    # Past the bound, a new value shares the hold's own queue; a named one keeps its own
    monkeypatch.setattr(parking_module, "MAX_PARKED_VALUES", 2)
    assert park("D").result == own
    assert park("A").result == value_queue("p", "h1", "A")
    assert set(parked_values(store.read_record(REGISTRY), "h1")) == {"A", "C"}

    # Lifted, or named again by a late park, the values' queues are kept (they hold messages)
    store.update_record(REGISTRY, lifted("h1", own))
    assert set(parked_values(store.read_record(REGISTRY), "h1")) == {"A", "C"}
    store.update_record(REGISTRY, named("h1", own))
    assert set(parked_values(store.read_record(REGISTRY), "h1")) == {"A", "C"}
    store.update_record(REGISTRY, forgotten("h1"))
    assert parked_values(store.read_record(REGISTRY), "h1") == {}
    assert parked_values({"queues": {"h1": {"queue": own, "values": {"A": 7, 3: "q"}}}}, "h1") == {}


def test_the_value_queues_a_record_named_are_remembered_when_the_store_forgets_it() -> None:
    # Given a worker that read the parking record naming tenant A's queue of pause h1
    store = MemoryStore("memory://remembered", uuid.uuid4().hex)
    unparking = unparking_of(parking(store))
    own, queue_a = parking_queue("p", "h1"), value_queue("p", "h1", "A")
    store.update_record(REGISTRY, value_parked("h1", own, "A", queue_a))
    unparking.tick()

    # When the store forgets the record, Then the worker still brings A's queue back with h1's
    store.update_record(REGISTRY, lambda current, now: Outcome({}, None))
    assert store.read_record(REGISTRY) is None
    assert unparking.queues_of(None, "h1", own) == [own, queue_a]
    assert unparking.queues_of(None, "h2", parking_queue("p", "h2")) == [parking_queue("p", "h2")]


def test_a_value_queue_is_named_after_the_hold_and_the_value_and_never_shared() -> None:
    assert value_queue("celery-pause:proj", "h1", "acme").startswith(
        "celery-pause:proj.parked.h1.acme."
    )
    assert value_queue("p", "h1", "a b") != value_queue("p", "h1", "a_b")
    assert set(value_queue("p", "h1", "x/\n\x00é")) <= set(
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-"
    )


def test_a_sweep_deletes_the_expired_claims_and_keeps_those_in_force() -> None:
    # Given a claim in force and one expired
    store = MemoryStore("memory://sweep", uuid.uuid4().hex)
    store.acquire_lease(claim_key("live"), "c1", 3600.0)
    store.update_record(
        lease_key(claim_key("old")), lambda _, now: Outcome({"owner": "c", "expires": now - 1}, 0)
    )
    unparking = unparking_of(parking(store))

    # When a worker sweeps, Then the expired claim is gone and the other is kept
    assert unparking.sweep() == 1
    assert store.lease_owner(claim_key("live")) == "c1"
    assert store.read_record(lease_key(claim_key("old"))) is None


def test_a_redelivered_message_claims_only_while_parking_is_recent() -> None:
    # Given a store whose record says nothing was ever parked
    store = MemoryStore("memory://recent", uuid.uuid4().hex)
    park = parking(store)
    app = Celery("parking", broker="memory://", set_as_current=False)
    unparking = Unparking(
        app, store, hostname="w1", interval=1.0, parking=park, prefix="p", holds=tuple
    )
    unparking.tick()

    # Then a redelivered message starts without a claim, a parked copy still claims
    assert park.claims(delivered(redelivered=True))
    assert store.record_keys("lease:") == []
    assert park.claims(delivered({PARKED_HEADER: marker("c1")}))
    assert len(store.record_keys("lease:")) == 1

    # When a queue is named (something was parked) and the store thread reads the record
    # with the state, Then redelivered messages claim too
    store.update_record(REGISTRY, named("h1", "q1"))
    unparking.tick()
    assert not park.recent  # the tick took the store thread's read, a second old at most
    unparking.noted(store.read_with_record(REGISTRY)[1], time.monotonic())
    assert park.recent
    assert park.claims(delivered(redelivered=True))
    assert len(store.record_keys("lease:")) == 2

    # When no read of the store thread is recent (it failed, or is late), Then the tick reads
    # the record itself
    late = parking(store)
    late.recent = False
    Unparking(app, store, hostname="w2", interval=0.0, parking=late, prefix="p", holds=tuple).tick()
    assert late.recent


def test_an_owned_copy_starts_without_asking_unless_it_is_delivered_again() -> None:
    # Given a copy whose claim was taken as it was moved, and a store where another copy of
    # the task id holds the claim now (this one was parked again, and its next copy claimed)
    store = MemoryStore("memory://claims", uuid.uuid4().hex)
    park = parking(store)
    owned = Marker("c2", "h1", "celery", "celery", owned=True).to_header()
    first = delivered({PARKED_HEADER: owned})
    again = delivered({PARKED_HEADER: owned, "id": first.id}, redelivered=True)
    assert store.acquire_lease(claim_key(first.id), "c3", 3600.0)

    # Then delivered first it starts at once (no store call: the claim stays c3's); delivered
    # again it asks, and is dropped as the twin it is
    assert park.claims(first)
    assert store.lease_owner(claim_key(first.id)) == "c3"
    assert not park.claims(again)
