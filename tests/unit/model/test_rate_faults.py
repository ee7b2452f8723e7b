"""A rate's pure rules under faults: start times spent late by a stalled worker, and records
the store lost while workers held start times booked ahead."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from itertools import repeat
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from celery_pause.model.limit import (
    DELAY,
    HORIZON,
    LATE,
    Limit,
    kept_since,
    lateness,
    lost_by,
    reserve,
    run_length,
)

PROPERTIES = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
NOW = 1_800_000_000.0


def ones(count: int) -> Iterator[float]:
    """``count`` tasks of cost 1."""
    return repeat(1.0, count)


def every(interval: float) -> Limit:
    """A rate of one start per ``interval`` seconds."""
    return Limit(rate=1 / interval)


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
    asked = reserve(None, NOW, limit=every(0.1), costs=[1.0] * 3, kept=None)

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
    booked = reserve(None, NOW, limit=every(0.1), costs=[1.0] * 3, known=known, kept=NOW - 3600)

    # Then its run starts now, as after any idle stretch
    assert booked.result.times() == pytest.approx([NOW, NOW + 0.1, NOW + 0.2])


def test_a_record_the_store_forgot_is_booked_past_every_start_time_held() -> None:
    # Given workers holding start times of 10/s booked up to a horizon ahead
    interval, held = 0.1, []
    record: dict[str, Any] | None = None
    for step in range(30):
        outcome = reserve(record, NOW + step * 0.05, limit=every(interval), costs=[1.0] * 3)
        record = outcome.value or record
        held += outcome.result.times()

    # When the store forgets everything a moment later, and a worker that booked none of
    # them books (the store then says it kept its records from now)
    now = NOW + 30 * 0.05
    kept = kept_since(None, now).result
    first = reserve(None, now, limit=every(interval), costs=[1.0] * 3, kept=kept)

    # Then the record restarts an interval past every time held, written though nothing fits
    assert first.result.count == 0
    assert first.value == {"tat": kept + HORIZON + interval}
    assert first.value["tat"] >= max(held) + interval
    # ... and at its retry time, the run goes on from there: no gap over a horizon
    again = reserve(first.value, first.result.retry_at, limit=every(interval), costs=[1.0] * 3)
    assert again.result.times()[0] == pytest.approx(kept + HORIZON + interval)
    assert again.result.times()[0] - now <= HORIZON + interval + 1e-9


def test_a_record_behind_what_this_worker_saw_ahead_was_lost() -> None:
    # Given this worker saw the record's next start time half a second ahead
    known = NOW + 0.5

    # When it finds it missing, or behind (a failover lost the last writes)
    for stored in (None, {"tat": NOW + 0.2}):
        booked = reserve(stored, NOW, limit=every(0.1), costs=[1.0] * 1, known=known, kept=None)

        # Then it books a horizon and an interval from now, asking nothing more
        assert not booked.result.unknown
        assert booked.value == {"tat": NOW + HORIZON + 0.1}
    # ... and a record ahead of it, or a known time passed, is no loss
    assert lost_by(NOW + 0.6, NOW, known=known, kept=None) == -math.inf
    assert lost_by(NOW - 0.2, NOW, known=NOW - 0.1, kept=None) == -math.inf
    assert lost_by(-math.inf, NOW, known=NOW - 0.1, kept=None) is None


# -- a ramp -----------------------------------------------------------------------------------
RAMP = Limit(rate=40.0, rise=(NOW - 10, 20.0))
"""A rate rising to 40/s over 20 s, halfway there at ``NOW``."""


def allowance(ramp: Limit, at: float) -> float:
    """How many starts ``ramp`` allows from its start to ``at``: the area under its curve."""
    assert ramp.rise is not None and ramp.rate is not None
    return ramp.rate * ramp.rise[1] * ramp.progress(at) ** 2 / 2


def test_booking_a_ramp_follows_its_curve_whoever_asks() -> None:
    # Given workers booking runs of start times in turn, every 10 ms of a ramp
    ramp = Limit(rate=40.0, rise=(0.0, 20.0))
    record = None
    granted: list[float] = []
    for tick in range(2000):
        now = tick / 100
        want = run_length(max(1.0, ramp.rate_at(now)), ones(3))
        done = reserve(record, now, limit=ramp, costs=[1.0] * want)
        record = done.value or record
        granted += done.result.starts
        assert all(now <= at <= now + HORIZON for at in done.result.starts)
        assert done.result.retry_at >= now

    # Then the cluster's starts follow the curve: never ahead, at most a run behind
    assert granted == sorted(granted)
    for count, at in enumerate(granted, start=1):
        if at < 20.0:  # from its end on, the ramp's hold ends: its scope is unlimited
            assert count <= allowance(ramp, at) + 1e-6, (count, at)
    assert len([t for t in granted if t < 19.99]) >= allowance(ramp, 19.99) - 3


def test_a_ramp_whose_record_the_store_forgot_goes_on_past_every_start_held() -> None:
    # Given workers booking a ramp's starts in turn, halfway through
    record: dict[str, Any] | None = None
    held: list[float] = []
    now = NOW - 1
    while now < NOW:
        want = run_length(RAMP.rate_at(now), ones(100))
        done = reserve(record, now, limit=RAMP, costs=[1.0] * want)
        record = done.value or record
        held += done.result.starts
        now += 0.05

    # When the store forgets it and a worker books, knowing nothing, then since when kept
    assert reserve(None, NOW, limit=RAMP, costs=[1.0] * 5, kept=None).result.unknown
    lost = reserve(None, NOW, limit=RAMP, costs=[1.0] * 5, kept=NOW)

    # Then it books nothing before every start held has passed, nor saves any up
    assert lost.result.starts == ()
    assert lost.value is not None and lost.value["tat"] > max(held)
    later = reserve(lost.value, lost.result.retry_at, limit=RAMP, costs=[1.0] * 5)
    assert min(later.result.starts) > NOW + HORIZON - 1e-9 >= max(held)


def test_a_ramp_books_from_now_not_in_the_past() -> None:
    # When a backlog comes halfway through a ramp nothing asked for before
    want = run_length(RAMP.rate_at(NOW), ones(1000))
    done = reserve(None, NOW, limit=RAMP, costs=[1.0] * want)

    # Then its run starts now, at the ramp's current rate (20/s), not from its start
    assert done.result.count == want == 10
    assert min(done.result.starts) == NOW
    gaps = [b - a for a, b in itertools.pairwise(done.result.starts)]
    assert all(1 / 21 < gap < 1 / 19 for gap in gaps), gaps


def test_a_ramp_rises_from_zero_to_its_rate_and_goes_on_at_it() -> None:
    # Given a ramp to 40/s over 20 s
    ramp = Limit(rate=40.0, rise=(100.0, 20.0))

    # Then its first start comes when its curve allows one, each later one sooner
    first = ramp.after(-math.inf, 1)
    assert first == pytest.approx(100.0 + 20.0 * math.sqrt(1 / 400))
    assert ramp.after(110.0, 1) - 110.0 == pytest.approx(1 / 20, rel=0.01)
    # ... and past its end, one start every 1/40 s
    assert ramp.after(130.0, 4) == pytest.approx(130.1)
    assert (ramp.rate_at(90.0), ramp.rate_at(110.0), ramp.rate_at(200.0)) == (0.0, 20.0, 40.0)
    # And it round-trips as stored, refusing what is no rise
    assert Limit.from_json(ramp.to_json()) == ramp
    for rise in ([100.0, 0], [100.0, 86401], ["x", 5], [1.0]):
        with pytest.raises((ValueError, TypeError)):
            Limit.from_json({"rate": 40.0, "rise": rise})
    with pytest.raises(ValueError):
        Limit(concurrency=3, rise=(0.0, 10.0))
