"""A rate's pure rules under faults: start times spent late by a stalled worker, and records
the store lost while workers held start times booked ahead."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from celery_pause.model.limit import (
    DELAY,
    HORIZON,
    LATE,
    kept_since,
    lateness,
    lost_by,
    reserve,
    run_length,
)
from celery_pause.model.ramp import Ramp, book
from celery_pause.model.scope import EVERYTHING

PROPERTIES = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
NOW = 1_800_000_000.0


def most_in_a_second(starts: list[float]) -> int:
    """The most of ``starts`` in any half-open window of one second (less what rounding
    store times near ``NOW`` may shift them by)."""
    ordered = sorted(starts)
    return max(
        (sum(1 for t in ordered[i:] if t < at + 1.0 - 1e-6) for i, at in enumerate(ordered)),
        default=0,
    )


# -- lateness ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("rate", "late"),
    [
        (10.0, 0.05),  # half an interval at a whole rate
        (5.0, 0.1),
        (1.0, 0.5),
        (100 / 60, 0.1),  # 100/m: half of the 1/3 start a second leaves, over 1.67/s
        (0.7, 0.15 / 0.7),
        (20.0, DELAY),  # widened up to the whole room for a loaded host's delay
        (40.0, 0.025),
        (10.7, 0.3 / 10.7),
        (0.2, HORIZON),  # at most a horizon
        (1000.0, LATE),  # at least LATE
        (0.0, HORIZON),
        (math.inf, LATE),  # a ramp over: nothing waits for a time
    ],
)
def test_lateness_is_half_the_room_the_rate_plus_one_leaves_or_the_delay_it_allows(
    rate: float, late: float
) -> None:
    assert lateness(rate) == pytest.approx(late)


@given(
    rate=st.one_of(st.integers(min_value=1, max_value=100).map(float), st.floats(0.05, 100.0)),
    offset=st.floats(min_value=0.0, max_value=1.0),
    spent=st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=40, max_size=40),
)
@PROPERTIES
def test_starts_each_within_its_lateness_never_put_more_than_the_rate_plus_one_in_a_second(
    rate: float, offset: float, spent: list[float]
) -> None:
    # Given the cluster's start times an interval apart (as the store books them)
    interval = 1.0 / rate
    times = [NOW + offset + i * interval for i in range(len(spent))]

    # When each is spent anywhere within its lateness (a stalled worker's come at once)
    late = lateness(rate)
    starts = [t + share * late for t, share in zip(times, spent, strict=True)]

    # Then no second holds more than the rate plus one start (but where the floor, LATE,
    # is over the room the rate plus one leaves: just below a whole rate, one more)
    whole = abs(rate - round(rate)) < 1e-9
    fraction = 0.0 if whole else rate % 1.0
    room = 1 if late * rate <= 1 - fraction + 1e-9 else 2
    assert most_in_a_second(starts) <= (round(rate) if whole else math.floor(rate)) + room


def test_half_an_interval_would_put_three_starts_in_a_second_at_100_a_minute() -> None:
    # Given 100/m: start times 0.6 s apart
    rate, interval = 100 / 60, 0.6

    # When the first of three is spent half an interval late, the others on time
    half = [NOW + 0.3, NOW + interval, NOW + 2 * interval]
    kept = [NOW + lateness(rate), NOW + interval, NOW + 2 * interval]

    # Then half an interval puts three in a second (above the rate plus one), lateness two
    assert most_in_a_second(half) == 3 > rate + 1
    assert most_in_a_second(kept) == 2


# -- a record the store lost ------------------------------------------------------------------
def test_a_missing_record_asks_since_when_the_store_kept_its_records() -> None:
    # When a record is missing and since when the store kept its records is not known
    asked = reserve(None, NOW, interval=0.1, want=3, kept=None)

    # Then nothing is booked nor written: the worker is to ask again, knowing it
    assert (asked.value, asked.result.count, asked.result.unknown) == (None, 0, True)
    # ... and the store says since when, writing it if it does not say (it just forgot)
    assert kept_since({"since": NOW - 600}, NOW) == kept_since({"since": NOW - 600}, NOW + 1)
    assert kept_since({"since": NOW - 600}, NOW).result == NOW - 600
    fresh = kept_since(None, NOW)
    assert (fresh.value, fresh.result) == ({"since": NOW}, NOW)


def test_a_tenant_that_comes_back_starts_at_once() -> None:
    # Given a store that kept its records for long, and a partition's record deleted once
    # its start times all passed (the tenant idle), this worker's last booking long past
    known = NOW - 10

    # When the tenant's next task comes
    booked = reserve(None, NOW, interval=0.1, want=3, known=known, kept=NOW - 3600)

    # Then its run starts now, as after any idle stretch
    assert booked.result.times() == pytest.approx([NOW, NOW + 0.1, NOW + 0.2])


def test_a_record_the_store_forgot_is_booked_past_every_start_time_held() -> None:
    # Given workers holding start times of 10/s booked up to a horizon ahead
    interval, held = 0.1, []
    record: dict[str, Any] | None = None
    for step in range(30):
        outcome = reserve(record, NOW + step * 0.05, interval=interval, want=3)
        record = outcome.value or record
        held += outcome.result.times()

    # When the store forgets everything a moment later, and a worker that booked none of
    # them books (the store then says it kept its records from now)
    now = NOW + 30 * 0.05
    kept = kept_since(None, now).result
    first = reserve(None, now, interval=interval, want=3, kept=kept)

    # Then the record restarts an interval past every time held, written though nothing fits
    assert first.result.count == 0
    assert first.value == {"tat": kept + HORIZON + interval}
    assert first.value["tat"] >= max(held) + interval
    # ... and at its retry time, the run goes on from there: no gap over a horizon
    again = reserve(first.value, first.result.retry_at, interval=interval, want=3)
    assert again.result.times()[0] == pytest.approx(kept + HORIZON + interval)
    assert again.result.times()[0] - now <= HORIZON + interval + 1e-9


def test_a_record_behind_what_this_worker_saw_ahead_was_lost() -> None:
    # Given this worker saw the record's next start time half a second ahead
    known = NOW + 0.5

    # When it finds it missing, or behind (a failover lost the last writes)
    for stored in (None, {"tat": NOW + 0.2}):
        booked = reserve(stored, NOW, interval=0.1, want=1, known=known, kept=None)

        # Then it books a horizon and an interval from now, asking nothing more
        assert not booked.result.unknown
        assert booked.value == {"tat": NOW + HORIZON + 0.1}
    # ... and a record ahead of it, or a known time passed, is no loss
    assert lost_by(NOW + 0.6, NOW, known=known, kept=None) == -math.inf
    assert lost_by(NOW - 0.2, NOW, known=NOW - 0.1, kept=None) == -math.inf
    assert lost_by(-math.inf, NOW, known=NOW - 0.1, kept=None) is None


# -- a ramp -----------------------------------------------------------------------------------
RAMP = Ramp(EVERYTHING, start=NOW - 10, duration=20.0, peak=40.0)


def test_a_ramp_whose_record_the_store_forgot_goes_on_past_every_start_held() -> None:
    # Given workers booking a ramp's starts in turn, halfway through
    record: dict[str, Any] | None = None
    held: list[float] = []
    now = NOW - 1
    while now < NOW:
        done = book(record, now, ramp=RAMP, want=run_length(RAMP.rate(now), 100))
        record = done.value or record
        held += done.result.starts
        now += 0.05

    # When the store forgets it and a worker books, knowing nothing, then since when kept
    assert book(None, NOW, ramp=RAMP, want=5, kept=None).result.unknown
    lost = book(None, NOW, ramp=RAMP, want=5, kept=NOW)

    # Then it books nothing before every start held has passed, nor saves any up
    assert lost.result.starts == ()
    assert lost.value is not None and lost.value["granted"] >= RAMP.allowance(max(held))
    later = book(lost.value, lost.result.retry_at, ramp=RAMP, want=5)
    assert min(later.result.starts) > NOW + HORIZON - 1e-9 >= max(held)


def test_a_ramp_books_its_saved_starts_now_not_in_the_past() -> None:
    # When a backlog comes halfway through a ramp nothing asked for before
    done = book(None, NOW, ramp=RAMP, want=1000)

    # Then the starts it saved up are booked now (late already, they would be dropped)
    assert min(done.result.starts) == NOW
    assert all(NOW <= at <= NOW + HORIZON for at in done.result.starts)
