"""Limits as pure logic: the Limit itself, its JSON, the GCRA rate, the concurrency slots,
how a throttle is placed beside other holds, and how much of a limit is used."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator
from itertools import repeat
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from celery_pause.errors import AlreadyPaused, InvalidInput
from celery_pause.model.limit import (
    HORIZON,
    MAX_CONCURRENCY,
    MAX_RATE,
    Limit,
    forget_rate,
    format_rate,
    reserve,
    run_length,
)
from celery_pause.model.limit_keys import partition_id, rate_key, records_prefix, slots_key, tagged
from celery_pause.model.placing import Placing, place
from celery_pause.model.scope import EVERYTHING, NOTHING, Scope, Target
from celery_pause.model.slots import give_back, live_slots, renew_slots, take_slots
from celery_pause.model.state import UNREADABLE, Hold, PauseState
from celery_pause.model.usage import Usage
from celery_pause.model.validation import check_limit, parse_rate

PROPERTIES = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
NOW = 1_800_000_000.0  # store time (a power-of-two interval added to it stays exact)
SLACK = 4 * math.ulp(NOW)  # what rounding store times near NOW may shift a start by


def ones(count: int) -> Iterator[float]:
    """``count`` tasks of cost 1."""
    return repeat(1.0, count)


# -- Limit ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"rate": None, "concurrency": None},
        {"rate": 0.0},
        {"rate": -1.0},
        {"rate": math.nan},
        {"rate": math.inf},
        {"rate": MAX_RATE * 1.000001},
        {"concurrency": 0},
        {"concurrency": -1},
        {"concurrency": MAX_CONCURRENCY + 1},
        {"rate": 10.0, "concurrency": 0},
        {"rate": 0.0, "concurrency": 3},
    ],
)
def test_a_limit_refuses_no_value_and_values_out_of_bounds(kwargs: dict[str, Any]) -> None:
    # When a limit is built without a value, or with one out of bounds, then it is refused
    with pytest.raises(ValueError):
        Limit(**kwargs)


def every(interval: float) -> Limit:
    """A rate of one start per ``interval`` seconds."""
    return Limit(rate=1 / interval)


def test_a_limit_takes_its_bounds_and_states_its_interval() -> None:
    # Given limits at the edges of what is allowed
    fastest = Limit(rate=MAX_RATE)
    widest = Limit(concurrency=MAX_CONCURRENCY)
    both = Limit(rate=4.0, concurrency=1)

    # Then they hold their values and the rate's interval
    assert (fastest.rate, fastest.concurrency, fastest.interval) == (MAX_RATE, None, 1e-6)
    assert (widest.rate, widest.concurrency, widest.interval) == (None, MAX_CONCURRENCY, 0.0)
    assert both.interval == 0.25
    assert both.describe() == "4/s, at most 1 at once"
    assert Limit(concurrency=3).describe() == "at most 3 at once"
    assert Limit(rate=0.5).describe() == "30/m"


# -- JSON of a hold with a limit --------------------------------------------------------------
def test_a_hold_with_a_limit_round_trips_through_json() -> None:
    # Given a throttle of a queue to 10/s and 3 at once, and one of the rate alone
    both = Hold(
        scope=Scope.of(["emails"]),
        paused_by="ann@ops",
        paused_at=NOW,
        resume_at=NOW + 60,
        limit=Limit(rate=10.0, concurrency=3),
    )
    rate_only = Hold(scope=Scope.of(["sms"]), paused_at=NOW, limit=Limit(rate=0.25))

    # When encoded (as the store keeps them) and decoded
    doc = json.loads(PauseState(generation=4, holds=(both, rate_only), epoch="e").encode())
    decoded = PauseState.decode(json.dumps(doc))

    # Then the JSON carries the rate and concurrency, and decoding gives the same holds
    assert (doc["holds"][0]["rate"], doc["holds"][0]["concurrency"]) == (10.0, 3)
    assert (doc["holds"][1]["rate"], doc["holds"][1]["concurrency"]) == (0.25, None)
    assert decoded.holds == (both, rate_only)
    assert decoded.holds[0].limit == Limit(rate=10.0, concurrency=3)
    assert not decoded.holds[0].pauses and not decoded.holds[1].pauses


def test_a_hold_without_a_limit_has_no_rate_or_concurrency_keys() -> None:
    # Given a plain pause
    hold = Hold(scope=Scope.of(["emails"]), paused_at=NOW)

    # When encoded
    doc = hold.to_json()

    # Then it has no limit keys, and decodes back to a pause
    assert "rate" not in doc and "concurrency" not in doc
    decoded = Hold.from_json(doc)
    assert decoded == hold
    assert decoded.limit is None and decoded.pauses


def test_a_stored_hold_with_null_rate_and_concurrency_decodes_as_a_pause() -> None:
    # Given a stored hold whose limit keys are both null
    doc = {**Hold(scope=Scope.of(["q"]), id="h1").to_json(), "rate": None, "concurrency": None}

    # Then it is a pause (the safe side), not a limit
    hold = Hold.from_json(doc)
    assert (hold.id, hold.limit, hold.pauses) == ("h1", None, True)


@pytest.mark.parametrize(
    "fields",
    [
        {"rate": "ten"},
        {"rate": "10/s"},
        {"rate": True},
        {"rate": False, "concurrency": 3},
        {"rate": 0},
        {"rate": -5},
        {"rate": 2e6},
        {"rate": [10]},
        {"rate": {"per": "s"}},
        {"concurrency": 2.5},
        {"concurrency": True},
        {"concurrency": "3"},
        {"concurrency": 0},
        {"concurrency": -1},
        {"concurrency": MAX_CONCURRENCY + 1},
        {"rate": 10, "concurrency": 2.5},
    ],
)
def test_a_corrupt_limit_decodes_to_an_unreadable_hold_that_pauses_everything(
    fields: dict[str, Any],
) -> None:
    # Given a stored throttle of one queue whose limit is corrupt
    hold = {**Hold(scope=Scope.of(["emails"]), id="h1").to_json(), **fields}
    raw = json.dumps({"schema": 1, "generation": 2, "holds": [hold]})

    # When the state is decoded
    state = PauseState.decode(raw)

    # Then the hold is unreadable, and it pauses every task of every queue on every worker
    (decoded,) = state.holds
    assert (decoded.source, decoded.id, decoded.limit) == (UNREADABLE, UNREADABLE, None)
    assert state.generation == 2
    assert state.paused(NOW) == EVERYTHING
    assert state.paused(NOW).covers(Target(queue="other", task="any.task", worker="w9@h"))
    assert state.limits(NOW) == ()


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_non_finite_stored_rate_decodes_to_an_unreadable_hold(literal: str) -> None:
    # Given a stored throttle whose rate is NaN or infinite (Python's json reads these)
    hold = json.dumps(Hold(scope=Scope.of(["emails"]), id="h1").to_json())
    hold = hold[:-1] + f',"rate":{literal}}}'
    raw = '{"schema":1,"generation":1,"holds":[' + hold + "]}"

    # When decoded
    state = PauseState.decode(raw)

    # Then it pauses everything
    assert state.holds[0].source == UNREADABLE
    assert state.paused(NOW) == EVERYTHING


# -- the state: limits do not pause ------------------------------------------------------------
def test_paused_ignores_limits_and_limits_lists_the_active_ones() -> None:
    # Given a pause of one queue, an active limit, a limit that ran out, and a scheduled one
    pause = Hold(scope=Scope.of(["a"]), paused_at=NOW - 10, id="pause")
    active = Hold(scope=Scope.of(["b"]), paused_at=NOW - 10, limit=Limit(rate=5.0), id="active")
    ended = Hold(
        scope=Scope.of(["c"]),
        paused_at=NOW - 10,
        resume_at=NOW - 1,
        limit=Limit(concurrency=2),
        id="ended",
    )
    later = Hold(
        scope=Scope.of(["d"]),
        paused_at=NOW - 10,
        start_at=NOW + 100,
        resume_at=NOW + 200,
        limit=Limit(rate=1.0),
        id="later",
    )
    everywhere = Hold(scope=EVERYTHING, paused_at=NOW - 10, limit=Limit(rate=1.0), id="all")
    state = PauseState(holds=(pause, active, ended, later, everywhere))

    # Then only the pause pauses; the limits slow, not stop
    assert state.paused(NOW) == Scope.of(["a"])
    assert not state.paused(NOW).covers(Target(queue="b"))
    # ... and the limits in force are those started and not yet ended
    assert [h.id for h in state.limits(NOW)] == ["active", "all"]
    assert [h.id for h in state.limits(NOW + 150)] == ["active", "later", "all"]
    assert [h.id for h in state.limits(NOW + 200)] == ["active", "all"]
    assert [h.id for h in state.limits(NOW - 5)] == ["active", "ended", "all"]


def test_a_state_of_limits_alone_pauses_nothing() -> None:
    state = PauseState(holds=(Hold(scope=EVERYTHING, limit=Limit(concurrency=1)),))
    assert state.paused(NOW) == NOTHING
    assert len(state.limits(NOW)) == 1


# -- parse_rate and check_limit ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "per_second"),
    [
        ("10/s", 10.0),
        ("100/m", 100 / 60),
        ("5/h", 5 / 3600),
        ("2.5", 2.5),
        (" 10 / s ", 10.0),
        (".5/s", 0.5),
        ("3.", 3.0),
        ("1000000/s", MAX_RATE),
        ("60000000/m", MAX_RATE),
        (7, 7.0),
        (0.25, 0.25),
        (MAX_RATE, MAX_RATE),
    ],
)
def test_parse_rate_reads_celery_notation_and_numbers(text: str | float, per_second: float) -> None:
    assert parse_rate(text) == pytest.approx(per_second, rel=1e-12)


@pytest.mark.parametrize(
    "text",
    [
        "ten",
        "",
        "/s",
        "10/",
        "10/d",
        "10/S",
        "10 per s",
        "1e3",
        "-5/s",
        "10/s/s",
        "0/s",
        "0",
        "0.0/m",
        "2000000/s",
        "1000001/s",
        "60000001/m",
        "9" * 400,
        0,
        -1,
        0.0,
        2e6,
        math.nan,
        math.inf,
        True,
        False,
        None,
        [10],
        b"10/s",
    ],
)
def test_parse_rate_refuses_anything_else_with_invalid_input(text: Any) -> None:
    with pytest.raises(InvalidInput):
        parse_rate(text)


@pytest.mark.parametrize(
    ("rate", "concurrency"),
    [(10**400, None), (-(10**400), None), (None, 10**5000)],
    ids=["rate-1e400", "rate--1e400", "concurrency-1e5000"],
)
def test_check_limit_refuses_a_huge_int_with_invalid_input(rate: Any, concurrency: Any) -> None:
    # When the Python API is given a whole number beyond a float (throttle(app, rate=10**400))
    # or beyond what Python turns into text (concurrency=10**5000)
    # Then it is refused as bad input like any other value out of bounds, not with an
    # OverflowError or a ValueError from the message
    with pytest.raises(InvalidInput):
        check_limit(rate, concurrency)


def test_check_limit_builds_the_limit_asked_for() -> None:
    assert check_limit("10/s", None) == Limit(rate=10.0)
    assert check_limit(None, 3) == Limit(concurrency=3)
    assert check_limit("120/m", MAX_CONCURRENCY) == Limit(rate=2.0, concurrency=MAX_CONCURRENCY)
    assert check_limit(7, 1) == Limit(rate=7.0, concurrency=1)


@pytest.mark.parametrize(
    ("rate", "concurrency"),
    [
        (None, None),
        ("0/s", None),
        ("2000000/s", None),
        ("ten", 3),
        (None, 0),
        (None, -1),
        (None, True),
        (None, False),
        (None, 2.5),
        (None, 3.0),
        (None, "3"),
        (None, MAX_CONCURRENCY + 1),
        ("10/s", 0),
    ],
)
def test_check_limit_refuses_bad_values_with_invalid_input(rate: Any, concurrency: Any) -> None:
    with pytest.raises(InvalidInput):
        check_limit(rate, concurrency)


# -- format_rate -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("rate", "text"),
    [
        (10.0, "10/s"),
        (1.0, "1/s"),
        (MAX_RATE, "1000000/s"),
        (0.5, "30/m"),
        (100 / 60, "100/m"),
        (0.1, "6/m"),
        (1 / 60, "1/m"),
        (2 / 3600, "2/h"),
        (5 / 3600, "5/h"),
        (2.5, "150/m"),
        (1 / 7, "0.143/s"),
        (1e-7, "1e-07/s"),
    ],
)
def test_format_rate_shows_whole_numbers_per_second_minute_or_hour(rate: float, text: str) -> None:
    assert format_rate(rate) == text


@given(st.sampled_from(["s", "m", "h"]), st.integers(min_value=1, max_value=10_000))
@PROPERTIES
def test_format_rate_reads_back_as_the_same_rate(unit: str, count: int) -> None:
    # Given a rate as an operator types it, within bounds
    per_second = parse_rate(f"{count}/{unit}")

    # Then what is shown reads back as the same rate
    assert parse_rate(format_rate(per_second)) == pytest.approx(per_second, rel=1e-9)


# -- the rate: GCRA reservations ---------------------------------------------------------------
def test_successive_reservations_are_consecutive_exactly_one_interval_apart() -> None:
    # Given a rate of 4/s and no record yet
    interval = 0.25

    # When three workers reserve runs of 2, 2 and 1 start times at the same store time
    first = reserve(None, NOW, limit=every(interval), costs=[1.0] * 2)
    second = reserve(first.value, NOW, limit=every(interval), costs=[1.0] * 2)
    third = reserve(second.value, NOW, limit=every(interval), costs=[1.0] * 1)

    # Then each run follows the one before, without gap or overlap, an interval apart
    assert first.result.times() == [NOW, NOW + 0.25]
    assert second.result.times() == [NOW + 0.5, NOW + 0.75]
    assert third.result.times() == [NOW + 1.0]
    times = first.result.times() + second.result.times() + third.result.times()
    assert [b - a for a, b in itertools.pairwise(times)] == [interval] * 4
    # ... and the record always holds the start after the last one granted
    assert [o.value for o in (first, second, third)] == [
        {"tat": NOW + 0.5},
        {"tat": NOW + 1.0},
        {"tat": NOW + 1.25},
    ]
    assert first.result.retry_at == NOW


def test_a_run_beyond_the_horizon_is_refused_whole_with_the_time_it_fits() -> None:
    # Given a rate of 4/s whose next start is booked a whole horizon ahead
    interval = 0.25
    booked = reserve(None, NOW, limit=every(interval), costs=[1.0] * 4)
    assert booked.result.times() == [NOW, NOW + 0.25, NOW + 0.5, NOW + 0.75]
    record = booked.value
    assert record == {"tat": NOW + HORIZON}

    # When a run of two is asked for at once
    refused = reserve(record, NOW, limit=every(interval), costs=[1.0] * 2)

    # Then none of it is granted (not even the first, which fits), nothing is written,
    # and it says when the run fits
    assert (refused.value, refused.result.count, refused.result.times()) == (None, 0, [])
    assert refused.result.retry_at == NOW + 0.25
    # ... a moment before, it still does not; at that time, the same run fits whole
    assert reserve(record, NOW + 0.2, limit=every(interval), costs=[1.0] * 2).result.count == 0
    fits = reserve(record, refused.result.retry_at, limit=every(interval), costs=[1.0] * 2)
    assert fits.result.times() == [NOW + 1.0, NOW + 1.25]
    assert fits.value == {"tat": NOW + 1.5}
    # ... and a single start that lands exactly on the horizon is granted
    edge = reserve(record, NOW, limit=every(interval), costs=[1.0] * 1)
    assert edge.result.times() == [NOW + HORIZON]


def test_a_reservation_of_nothing_grants_nothing() -> None:
    outcome = reserve({"tat": NOW}, NOW, limit=every(0.5), costs=[1.0] * 0)
    assert (outcome.value, outcome.result.count) == (None, 0)


def test_no_burst_after_idle() -> None:
    # Given a rate of 2/s last used long ago
    used = reserve(None, NOW, limit=every(0.5), costs=[1.0] * 2)
    assert used.value == {"tat": NOW + 1.0}

    # When a worker reserves after an hour of idle
    later = NOW + 3600
    after = reserve(used.value, later, limit=every(0.5), costs=[1.0] * 2)

    # Then its starts begin now and keep the interval: no credit was saved up while idle
    assert after.result.times() == [later, later + 0.5]
    assert after.value == {"tat": later + 1.0}


@given(
    rate=st.floats(min_value=0.5, max_value=2000.0),
    steps=st.lists(
        st.tuples(st.floats(min_value=0.0, max_value=1.5), st.integers(min_value=0, max_value=30)),
        min_size=1,
        max_size=60,
    ),
    window=st.floats(min_value=0.0, max_value=5.0),
)
@PROPERTIES
def test_reservations_never_start_closer_than_the_interval_nor_exceed_the_rate(
    rate: float, steps: list[tuple[float, int]], window: float
) -> None:
    # Given a rate, and workers reserving runs of any length as store time advances
    interval = Limit(rate=rate).interval
    record: dict[str, Any] | None = None
    now = NOW
    granted: list[float] = []
    for advance, want in steps:
        now += advance
        outcome = reserve(record, now, limit=every(interval), costs=[1.0] * want)
        times = outcome.result.times()
        # Then a run is all or nothing, never starts before now nor ends beyond the horizon
        assert outcome.result.count in (0, want)
        assert (outcome.value is None) == (outcome.result.count == 0)
        if times:
            assert now <= times[0] and times[-1] <= now + HORIZON
        else:
            assert outcome.result.retry_at >= now
        if outcome.value is not None:
            record = outcome.value
        granted.extend(times)

    # ... no two start times granted are closer than the interval
    assert granted == sorted(granted)
    for earlier, later in itertools.pairwise(granted):
        assert later - earlier >= interval - SLACK
    # ... and within any window of that length, at most length * rate + 1 start
    for i, start in enumerate(granted):
        inside = sum(1 for t in granted[i:] if t <= start + window - SLACK)
        assert inside <= window * rate + 1


@given(
    ahead=st.floats(min_value=0.0, max_value=30.0),
    want=st.integers(min_value=1, max_value=40),
    span=st.floats(min_value=0.0, max_value=1.0),
)
@PROPERTIES
def test_a_refused_run_that_can_fit_fits_at_its_retry_time_and_not_before(
    ahead: float, want: int, span: float
) -> None:
    # Given a rate booked some time ahead, and a run that spans no more than the horizon
    interval = max(1e-6, span * HORIZON / max(1, want - 1))
    record = {"tat": NOW + ahead}

    # When the run is refused
    refused = reserve(record, NOW, limit=every(interval), costs=[1.0] * want)
    if refused.result.count:
        return

    # Then at its retry time the same run is granted whole, from the time booked
    retry_at = refused.result.retry_at
    assert retry_at > NOW
    again = reserve(record, retry_at, limit=every(interval), costs=[1.0] * want)
    assert again.result.count == want
    assert again.result.times()[0] == NOW + ahead
    # ... and a millisecond before, it is not
    early = reserve(record, retry_at - 1e-3, limit=every(interval), costs=[1.0] * want)
    assert early.result.count == 0


def test_run_length_takes_half_the_horizon_never_more_than_wait() -> None:
    assert run_length(10.0, ones(100)) == 5
    assert run_length(1000.0, ones(500)) == 500
    assert run_length(1000.0, ones(7)) == 7
    assert run_length(0.5, ones(100)) == 1
    assert run_length(MAX_RATE, ones(10**9)) == 500_000
    # ... so a run never spans more than half the horizon: it always fits
    for rate in (0.5, 3.0, 4.0, 5.0, 99.0, MAX_RATE):
        assert (run_length(rate, ones(10**9)) - 1) / rate <= HORIZON / 2


# -- concurrency: slots ------------------------------------------------------------------------
def test_take_slots_never_takes_more_than_are_free() -> None:
    # Given a concurrency of 3 with one slot live and one expired
    record = {"slots": {"w1/a": NOW + 5, "w1/old": NOW - 1}}

    # When a worker asks for three more
    taken = take_slots(record, NOW, limit=3, ids=["w2/x", "w2/y", "w2/z"], ttl=30)

    # Then it gets the two free (the expired one is free again), and the record drops it
    assert taken.result == ["w2/x", "w2/y"]
    assert taken.value == {"slots": {"w1/a": NOW + 5, "w2/x": NOW + 30, "w2/y": NOW + 30}}

    # When another asks while all are taken, then it gets none and nothing is written
    full = take_slots(taken.value, NOW + 1, limit=3, ids=["w3/q"], ttl=30)
    assert (full.value, full.result) == (None, [])

    # When the first slot expires, then one is free again
    later = take_slots(taken.value, NOW + 6, limit=3, ids=["w3/q", "w3/r"], ttl=30)
    assert later.result == ["w3/q"]
    assert set(later.value["slots"]) == {"w2/x", "w2/y", "w3/q"}


def test_give_back_frees_only_the_ids_held() -> None:
    # Given three slots, one of them expired
    record = {"slots": {"w1/a": NOW + 5, "w1/b": NOW + 5, "w2/c": NOW - 1}}

    # When w1 gives back one slot it holds and one nobody holds
    given_back = give_back(record, NOW, ids=["w1/a", "w1/unknown"])

    # Then only the held one (and the expired one) is freed; it counts one
    assert given_back.result == 1
    assert given_back.value == {"slots": {"w1/b": NOW + 5}}

    # When ids nobody holds are given back and nothing expired, then nothing is written
    nothing = give_back({"slots": {"w1/b": NOW + 5}}, NOW, ids=["w2/c", "w9/z"])
    assert (nothing.value, nothing.result) == (None, 0)


def test_renew_slots_extends_those_held_and_drops_those_expired() -> None:
    # Given w1's two slots, one expired, and w2's slot
    record = {"slots": {"w1/a": NOW + 2, "w1/b": NOW - 1, "w2/c": NOW + 4}}

    # When w1 renews both
    renewed = renew_slots(record, NOW, ids=["w1/a", "w1/b"], ttl=30)

    # Then it keeps only the live one, extended; w2's stays as it was
    assert renewed.result == ["w1/a"]
    assert renewed.value == {"slots": {"w1/a": NOW + 30, "w2/c": NOW + 4}}


def test_live_slots_of_no_record_and_of_a_corrupt_one() -> None:
    assert live_slots(None, NOW) == {}
    assert live_slots({}, NOW) == {}
    assert live_slots({"slots": {"a": NOW}}, NOW) == {}  # expires at now: gone
    with pytest.raises(TypeError):
        live_slots({"slots": ["a"]}, NOW)
    with pytest.raises(TypeError):
        live_slots({"slots": {"a": "soon"}}, NOW)


@given(
    limit=st.integers(min_value=1, max_value=6),
    ttl=st.floats(min_value=0.5, max_value=10.0),
    steps=st.lists(
        st.tuples(
            st.floats(min_value=0.0, max_value=4.0),
            st.sampled_from(["take", "give", "renew"]),
            st.integers(min_value=0, max_value=8),
        ),
        min_size=1,
        max_size=60,
    ),
)
@PROPERTIES
def test_no_sequence_of_takes_gives_and_renewals_exceeds_the_concurrency(
    limit: int, ttl: float, steps: list[tuple[float, str, int]]
) -> None:
    # Given a concurrency, and workers taking, giving back and renewing slots as time passes
    record: dict[str, Any] | None = None
    now = NOW
    serial = 0
    held: list[str] = []
    for advance, action, count in steps:
        now += advance
        if action == "take":
            ids = [f"w/{serial + i}" for i in range(count)]
            serial += count
            outcome: Any = take_slots(record, now, limit=limit, ids=ids, ttl=ttl)
            assert outcome.result == ids[: len(outcome.result)]
            held.extend(outcome.result)
        elif action == "give":
            outcome = give_back(record, now, ids=held[:count])
            held = held[count:]
        else:
            outcome = renew_slots(record, now, ids=held, ttl=ttl)
            held = list(outcome.result)
        if outcome.value is not None:
            record = outcome.value
        # Then the live slots never exceed the limit
        assert len(live_slots(record, now)) <= limit


# -- placing a throttle beside other holds -----------------------------------------------------
def placing(scope: Scope, limit: Limit | None = None, **kwargs: Any) -> Placing:
    return Placing(
        scope=scope, by="ops", reason=None, resume_at=lambda now: None, limit=limit, **kwargs
    )


def test_a_throttle_on_the_same_scope_replaces_the_earlier_manual_limit() -> None:
    # Given a manual limit of queue emails to 10/s
    first = place(PauseState(), NOW, placing(Scope.of(["emails"]), Limit(rate=10.0)))
    assert first.value is not None
    (earlier,) = first.value.holds

    # When the dial is turned to 5/s on the same scope
    second = place(first.value, NOW + 1, placing(Scope.of(["emails"]), Limit(rate=5.0)))

    # Then the new limit replaces the earlier one, and says so
    assert second.value is not None
    assert second.result.replaced == (earlier,)
    (hold,) = second.value.holds
    assert hold == second.result.hold and hold.limit == Limit(rate=5.0)
    assert second.value.generation == first.value.generation + 1


def test_a_throttle_on_an_overlapping_scope_keeps_both_limits() -> None:
    # Given a manual limit of queue emails
    first = place(PauseState(), NOW, placing(Scope.of(["emails"]), Limit(rate=10.0)))
    assert first.value is not None

    # When another scope that overlaps it (emails and sms) is throttled
    second = place(first.value, NOW, placing(Scope.of(["emails", "sms"]), Limit(concurrency=2)))

    # Then both stay: where both cover a task, each counts it
    assert second.value is not None and second.result.replaced == ()
    assert [h.limit for h in second.value.holds] == [Limit(rate=10.0), Limit(concurrency=2)]
    assert [h.id for h in second.value.limits(NOW)] == [
        first.result.hold.id,
        second.result.hold.id,
    ]


def test_a_throttle_next_to_a_manual_pause_keeps_the_pause() -> None:
    # Given a manual pause of queue emails
    paused = place(PauseState(), NOW, placing(Scope.of(["emails"])))
    assert paused.value is not None

    # When the same queue is throttled (no force)
    limited = place(paused.value, NOW, placing(Scope.of(["emails"]), Limit(rate=1.0)))

    # Then the pause stays and still pauses; the limit is added beside it
    assert limited.value is not None and limited.result.replaced == ()
    assert [h.pauses for h in limited.value.holds] == [True, False]
    assert limited.value.paused(NOW) == Scope.of(["emails"])


def test_a_pause_next_to_a_manual_limit_is_not_already_paused() -> None:
    # Given a manual limit of every queue
    limited = place(PauseState(), NOW, placing(EVERYTHING, Limit(concurrency=4)))
    assert limited.value is not None

    # When queue emails is paused without force
    paused = place(limited.value, NOW, placing(Scope.of(["emails"])))

    # Then it is placed beside the limit (no AlreadyPaused), replacing nothing
    assert paused.value is not None and paused.result.replaced == ()
    assert len(paused.value.holds) == 2
    assert paused.value.paused(NOW) == Scope.of(["emails"])
    assert [h.limit for h in paused.value.limits(NOW)] == [Limit(concurrency=4)]

    # When a forced pause of everything follows, then it replaces only the pause
    forced = place(paused.value, NOW, placing(EVERYTHING, force=True))
    assert forced.value is not None
    assert forced.result.replaced == (paused.result.hold,)
    assert [h.limit for h in forced.value.limits(NOW)] == [Limit(concurrency=4)]


def test_a_pause_over_a_manual_pause_is_still_refused_with_limits_around() -> None:
    # Given a manual pause and a manual limit of queue emails
    state = place(PauseState(), NOW, placing(Scope.of(["emails"]), Limit(rate=3.0))).value
    assert state is not None
    state = place(state, NOW, placing(Scope.of(["emails"]))).value
    assert state is not None

    # When emails is paused again without force, then it is refused naming only the pause
    with pytest.raises(AlreadyPaused) as refused:
        place(state, NOW, placing(Scope.of(["emails"])))
    assert [h.pauses for h in refused.value.holds] == [True]


def test_a_throttle_does_not_replace_a_limit_that_ended_or_another_source() -> None:
    # Given a breaker's limit and an ended manual limit on the same scope
    emails = Scope.of(["emails"])
    breaker = Hold(scope=emails, source="breaker:smtp", paused_at=NOW, limit=Limit(rate=1.0))
    ended = Hold(scope=emails, paused_at=NOW - 60, resume_at=NOW - 1, limit=Limit(rate=1.0))
    state = PauseState(holds=(breaker, ended))

    # When an operator throttles that scope
    placed = place(state, NOW, placing(emails, Limit(rate=2.0)))

    # Then the breaker's limit stays, the ended one is gone, and nothing counts as replaced
    assert placed.value is not None and placed.result.replaced == ()
    assert [(h.source, h.limit) for h in placed.value.holds] == [
        ("breaker:smtp", Limit(rate=1.0)),
        ("manual", Limit(rate=2.0)),
    ]


def test_a_scheduled_throttle_turns_the_dial_at_its_start() -> None:
    # Given queue emails limited to 10/s now, open-ended
    emails = Scope.of(["emails"])
    now_limited = place(PauseState(), NOW, placing(emails, Limit(rate=10.0)))
    assert now_limited.value is not None
    (earlier,) = now_limited.value.holds

    # When the dial is set to 2/s from an hour ahead (a scheduled throttle of the same scope)
    scheduled = place(now_limited.value, NOW, placing(emails, Limit(rate=2.0), start_at=NOW + 3600))

    # Then the limit in force keeps its place until then (it now ends there), and 2/s follows
    assert scheduled.value is not None
    assert scheduled.result.replaced == (earlier,)
    assert [(h.id, h.limit) for h in scheduled.value.limits(NOW + 1)] == [
        (earlier.id, Limit(rate=10.0))
    ]
    assert [h.limit for h in scheduled.value.scheduled_holds(NOW + 1)] == [Limit(rate=2.0)]
    assert [h.limit for h in scheduled.value.limits(NOW + 3600)] == [Limit(rate=2.0)]


def test_a_scheduled_throttle_keeps_a_limit_that_ends_before_it_starts() -> None:
    # Given queue emails limited to 10/s for the next half hour
    emails = Scope.of(["emails"])
    state = PauseState(
        holds=(Hold(scope=emails, paused_at=NOW, resume_at=NOW + 1800, limit=Limit(rate=10.0)),)
    )

    # When 2/s is scheduled from an hour ahead
    placed = place(state, NOW, placing(emails, Limit(rate=2.0), start_at=NOW + 3600))

    # Then both stay: they are never in force at the same moment
    assert placed.value is not None and placed.result.replaced == ()
    assert [h.limit for h in placed.value.limits(NOW + 1)] == [Limit(rate=10.0)]
    assert [h.limit for h in placed.value.limits(NOW + 3600)] == [Limit(rate=2.0)]


# -- usage -------------------------------------------------------------------------------------
def test_usage_counts_live_slots_and_the_rate_booked_ahead() -> None:
    # Given a limit of 10/s and 3 at once, two slots live and one expired, starts booked 0.5s
    limit = Limit(rate=10.0, concurrency=3)
    slots = {"slots": {"a": NOW + 5, "b": NOW + 5, "c": NOW - 5}}
    rate = {"tat": NOW + 0.5}

    # When its usage is read
    usage = Usage.of(limit, slots, rate, NOW)

    # Then it counts two running and the time booked, and says so
    assert (usage.running, usage.booked) == (2, 0.5)
    assert usage.describe(limit) == "2 of 3 running, rate fully used"
    assert usage.to_json() == {"running": 2, "booked": 0.5}


def test_usage_of_an_idle_limit_and_of_each_kind_alone() -> None:
    # A rate whose next start is in the past, or never used: not fully used, nothing booked
    rate_only = Limit(rate=2.0)
    idle = Usage.of(rate_only, None, {"tat": NOW - 3}, NOW)
    assert (idle.running, idle.booked) == (None, 0.0)
    assert idle.describe(rate_only) == "rate not fully used"
    assert Usage.of(rate_only, None, None, NOW).booked == 0.0
    # A concurrency alone: no rate part
    slots_only = Limit(concurrency=5)
    usage = Usage.of(slots_only, None, None, NOW)
    assert (usage.running, usage.booked) == (0, None)
    assert usage.describe(slots_only) == "0 of 5 running"
    assert usage.to_json() == {"running": 0, "booked": None}


def test_the_records_of_a_limit_are_named_for_its_hold() -> None:
    assert slots_key("abc123") == "limit:abc123:slots"
    assert rate_key("abc123") == "limit:abc123:rate"
    assert slots_key("abc123") != rate_key("abc123")


# -- limits per label value -------------------------------------------------------------------
def test_a_limit_per_label_reads_and_writes_its_label() -> None:
    limit = Limit(concurrency=2, per="tenant")
    assert limit.describe() == "at most 2 at once per tenant"
    assert Limit.from_json(json.loads(json.dumps(limit.to_json()))) == limit
    assert "per" not in Limit(rate=5.0).to_json(), "a limit of every task keeps its old JSON"
    with pytest.raises(ValueError):
        Limit.from_json({"per": "tenant"})
    with pytest.raises(TypeError):
        Limit.from_json({"rate": 1.0, "per": 3})


@pytest.mark.parametrize("per", ["", "tenant=acme", "9tenant", "a b", "x" * 65, 7])
def test_check_limit_refuses_a_per_that_names_no_label(per: Any) -> None:
    with pytest.raises(InvalidInput, match="per must name a label"):
        check_limit("5/s", None, per)


def test_partitions_have_keys_of_their_own_under_the_limits_prefix() -> None:
    one, other = partition_id("h1", "acme"), partition_id("h1", "beta\n\x1b[2J")
    assert one != other and one == partition_id("h1", "acme")
    for partition in (one, other):
        assert slots_key(partition).startswith(records_prefix("h1"))
        assert rate_key(partition).startswith(records_prefix("h1"))
    assert not slots_key(partition_id("h10", "acme")).startswith(records_prefix("h1"))


def test_records_left_empty_are_deleted_and_a_past_rate_forgotten() -> None:
    # A slot given back or expired at renewal, leaving none, deletes the record (``{}``)
    record = {"slots": {"w1/a": NOW + 5}, "of": "acme"}
    assert give_back(record, NOW, ids=["w1/a"]).value == {}
    assert renew_slots({"slots": {"w1/a": NOW - 1}}, NOW, ids=["w1/a"], ttl=30).value == {}
    # A partition's label value stays in its records while they hold something
    kept = take_slots(record, NOW, limit=2, ids=["w2/b"], ttl=30).value
    assert kept is not None and kept["of"] == "acme"
    assert tagged(reserve(None, NOW, limit=every(0.2), costs=[1.0] * 2), "acme").value == {
        "tat": NOW + 0.4,
        "of": "acme",
    }
    assert tagged(give_back(record, NOW, ids=["w1/a"]), "acme").value == {}
    # A rate whose start times all passed is deleted; one with a start ahead is kept
    assert forget_rate({"tat": NOW - 0.1}, NOW).value == {}
    assert forget_rate({"tat": NOW + 0.1}, NOW).value is None
    assert forget_rate(None, NOW).value is None


def test_usage_of_a_limit_per_label_counts_values_and_names_the_busiest() -> None:
    limit = Limit(concurrency=2, rate=4.0, per="tenant")
    records: dict[str, Any] = {
        "slots": {"slots": {"x": NOW + 9}},  # not a partition's record: left out
        **{
            f"p{i}:slots": {"of": f"t{i}", "slots": {f"w/{i}/{j}": NOW + 9 for j in range(i % 3)}}
            for i in range(12)
        },
        "p1:rate": {"of": "t1", "tat": NOW + 0.5},
        "p11:rate": {"of": "t11", "tat": NOW - 3},
    }
    usage = Usage.of_partitions(limit, records, NOW)
    in_use = [i for i in range(12) if i % 3]
    assert usage.partitions == len(in_use)
    assert usage.running == sum(i % 3 for i in range(12))
    assert usage.booked == 0.5
    assert [value for value, _, _ in usage.busiest] == ["t2", "t5", "t8", "t11", "t1"]
    assert usage.busiest[-1] == ("t1", 1, 0.5)
    text = usage.describe(limit)
    assert text.startswith(f"{len(in_use)} tenant values in use, busiest: ")
    assert text.count(";") == 4
    assert json.loads(json.dumps(usage.to_json()))["partitions"] == len(in_use)
