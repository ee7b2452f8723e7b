"""Logs, event windows and leases built on records: the pure changes, with store time given."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from celery_pause.errors import InvalidInput, StoreError
from celery_pause.stores import primitives
from celery_pause.stores.primitives import Event, Record, RecordChange

JSON = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False) | st.integers() | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=20,
)


def apply(record: Record | None, change: RecordChange[Any], now: float) -> tuple[Any, Any]:
    """The record after ``change`` at ``now`` (``None``: deleted) and its result."""
    outcome = change(record, now)
    after = record if outcome.value is None else (outcome.value or None)
    return after, outcome.result


def test_events_count_within_their_window_up_to_the_limit() -> None:
    record, count = apply(None, primitives.add_event(10, "a", 3), now=100)
    assert count == 1
    record, count = apply(record, primitives.add_event(10, "b", 3), now=105)
    assert count == 2
    # An event older than the window is dropped, and the newest `limit` are kept
    record, count = apply(record, primitives.add_event(10, "c", 3), now=112)
    assert count == 2
    record, count = apply(record, primitives.add_event(10, "d", 2), now=113)
    assert count == 2
    assert primitives.events_of(record) == [Event(112, "c"), Event(113, "d")]


def test_unreadable_events_are_a_store_error() -> None:
    with pytest.raises(StoreError, match=r"events .*unreadable"):
        primitives.events_of({"events": [["soon", "x"]]}, "breaker:x")
    with pytest.raises(StoreError, match=r"events .*unreadable"):
        apply({"events": 3}, primitives.add_event(10, "a", 3), now=1)


def test_a_lease_has_one_owner_until_it_expires_or_is_released() -> None:
    lease, taken = apply(None, primitives.acquire("a", 30), now=100)
    assert taken and primitives.lease_holder(lease, 100) == "a"
    assert apply(lease, primitives.acquire("b", 30), now=110) == (lease, False)
    assert apply(lease, primitives.release("b"), now=110) == (lease, False)
    # The owner extends it; past its time anyone may take it
    lease, taken = apply(lease, primitives.acquire("a", 30), now=120)
    assert taken and lease["expires"] == 150
    assert primitives.lease_holder(lease, 150) is None
    lease, taken = apply(lease, primitives.acquire("b", 30), now=151)
    assert taken and primitives.lease_holder(lease, 151) == "b"
    # Released by its owner, the record goes
    assert apply(lease, primitives.release("b"), now=152) == (None, True)
    assert apply(None, primitives.release("b"), now=152) == (None, False)


def test_a_lease_of_unknown_owner_is_held_until_it_expires() -> None:
    lease = {"owner": 7, "expires": 200}
    assert primitives.lease_holder(lease, 100) == "<unreadable>"
    assert apply(lease, primitives.acquire("a", 30), now=100) == (lease, False)
    assert primitives.lease_holder({"owner": "a", "expires": "never"}, 100) is None


def test_a_log_keeps_its_newest_entries_and_takes_over_an_older_layout() -> None:
    older = [{"n": 2}, {"n": 1}]
    log, _ = apply(None, primitives.prepend({"n": 3}, 3, older), now=0)
    assert primitives.entries_of(log) == [{"n": 3}, {"n": 2}, {"n": 1}]
    log, _ = apply(log, primitives.prepend({"n": 4}, 3, older), now=0)
    assert primitives.entries_of(log) == [{"n": 4}, {"n": 3}, {"n": 2}]
    # A damaged entry is reported, and kept as it is by the next entry
    [damaged] = primitives.entries_of({"entries": 7})
    assert damaged == {"unreadable": "expected an object, got int"}
    log, _ = apply({"entries": [7, {"n": 1}]}, primitives.prepend({"n": 2}, 3, []), now=0)
    assert log == {"entries": [{"n": 2}, 7, {"n": 1}]}


def test_names_keys_and_entries_are_checked() -> None:
    with pytest.raises(InvalidInput, match="log name"):
        primitives.log_key("../state")
    with pytest.raises(InvalidInput, match="store key"):
        primitives.events_key("a b")
    with pytest.raises(InvalidInput, match="JSON"):
        primitives.checked_entry({"at": float("nan")})
    assert primitives.lease_key("breaker:x") == "lease:breaker:x"


@given(JSON)
def test_no_stored_value_raises_anything_but_a_store_error(value: Any) -> None:
    record = {"events": value, "entries": value, "owner": value, "expires": value}
    assert all(isinstance(entry, dict) for entry in primitives.entries_of(record))
    primitives.lease_holder(record, 0.0)
    with contextlib.suppress(StoreError):
        primitives.events_of(record)
