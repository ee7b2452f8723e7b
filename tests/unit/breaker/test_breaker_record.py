"""The breaker's state machine as pure transitions, and its options; no broker needed."""

from __future__ import annotations

from datetime import timedelta

import pytest

from celery_pause import CircuitBreaker, InvalidInput
from celery_pause.breaker.record import CLOSED, HALF_OPEN, OPEN, BreakerRecord, Policy

POLICY = Policy(
    fail_max=3,
    window=60,
    reset_timeout=10,
    max_reset_timeout=35,
    backoff_factor=2,
    half_open_trials=2,
    success_threshold=2,
)


def opened(now: float = 100.0) -> BreakerRecord:
    record = BreakerRecord("dep").trip(now, 3, "ConnectionError()", POLICY, "h1")
    assert record is not None
    return record


def half_open(now: float = 110.0, prober: str = "w1") -> BreakerRecord:
    record = opened().begin_half_open(now, prober)
    assert record is not None
    return record


def test_trips_at_fail_max_failures_and_not_before() -> None:
    closed = BreakerRecord("dep")
    assert closed.trip(100.0, 2, "e", POLICY, "h1") is None

    record = closed.trip(100.0, 3, "ConnectionError('down')", POLICY, "h1")

    assert record is not None and record.state == OPEN
    assert (record.hold_id, record.hold_placed) == ("h1", False)
    assert (record.opened_at, record.next_probe_at, record.failures) == (100.0, 110.0, 3)
    assert record.trip(101.0, 9, "e", POLICY, "h2") is None, "an open breaker does not trip again"


def test_half_open_starts_only_when_due_and_only_once() -> None:
    record = opened()
    assert record.begin_half_open(109.9, "w1") is None

    started = record.begin_half_open(110.0, "w1")

    assert started is not None and started.state == HALF_OPEN
    assert (started.period, started.prober) == (1, "w1")
    assert started.begin_half_open(111.0, "w1") is None


def test_a_period_whose_prober_lost_the_lease_is_taken_over_as_a_new_period() -> None:
    record = half_open(prober="crashed")

    taken = record.begin_half_open(140.0, "w2")

    assert taken is not None and (taken.period, taken.prober) == (2, "w2")
    assert taken.trials == () and taken.half_open_at == 140.0


def test_trials_are_bounded_per_period_and_only_by_the_prober() -> None:
    record = half_open()
    assert record.add_trial(1, "w2", "t1", 2) is None, "not the prober"
    assert record.add_trial(0, "w1", "t1", 2) is None, "an old period"

    one = record.add_trial(1, "w1", "t1", 2)
    assert one is not None
    two = one.add_trial(1, "w1", "t2", 2)
    assert two is not None

    assert two.trials == ("t1", "t2")
    assert two.add_trial(1, "w1", "t3", 2) is None
    assert two.add_trial(1, "w1", "t1", 3) is None, "the same task twice"


def test_success_threshold_successes_of_trials_close_it() -> None:
    record = half_open().add_trial(1, "w1", "t1", 2)
    assert record is not None
    record = record.add_trial(1, "w1", "t2", 2)
    assert record is not None
    assert record.succeed(1, "stranger", 2, 120.0) is None, "not a trial"

    first = record.succeed(1, "t1", 2, 120.0)
    assert first is not None and first.state == HALF_OPEN
    assert first.succeed(1, "t1", 2, 120.5) is None, "counted once"
    closed = first.succeed(1, "t2", 2, 121.0)

    assert closed is not None and closed.state == CLOSED
    assert (closed.closed_at, closed.hold_id, closed.reset_timeout) == (121.0, "h1", None)


def test_a_failed_period_reopens_with_the_timeout_doubled_up_to_the_maximum() -> None:
    record = half_open()
    timeouts = []
    now = 110.0
    for period in range(1, 5):
        failed = record.fail(period, now, "ConnectionError()", POLICY)
        assert failed is not None and failed.state == OPEN
        timeouts.append(failed.reset_timeout)
        assert failed.next_probe_at == now + failed.reset_timeout
        now = failed.next_probe_at
        following = failed.begin_half_open(now, "w1")
        assert following is not None
        record = following

    assert timeouts == [20, 35, 35, 35]
    assert record.fail(1, now, "late", POLICY) is None, "an old period's failure is ignored"


def test_closing_resets_the_backoff() -> None:
    failed = half_open().fail(1, 120.0, "e", POLICY)
    assert failed is not None and failed.reset_timeout == 20
    again = failed.begin_half_open(140.0, "w1")
    assert again is not None
    closed = again.succeed(2, "probe:2", 1, 141.0)
    assert closed is not None

    tripped = closed.trip(200.0, 3, "e", POLICY, "h2")

    assert tripped is not None and tripped.reset_timeout == 10 and tripped.next_probe_at == 210.0


def test_a_removed_hold_closes_it_but_only_for_its_own_hold() -> None:
    record = opened().placed("h1")
    assert record is not None and record.hold_placed
    assert record.forced_close("other", 120.0) is None

    closed = record.forced_close("h1", 120.0)

    assert closed is not None and closed.state == CLOSED


def test_json_round_trip_keeps_unknown_fields_and_rejects_garbage() -> None:
    record = half_open().add_trial(1, "w1", "t1", 2)
    assert record is not None
    data = {**record.to_json(), "future_field": 7}

    decoded = BreakerRecord.from_json("dep", data)

    assert decoded.to_json() == data
    assert BreakerRecord.from_json("dep", None).state == CLOSED
    with pytest.raises(ValueError, match="dep"):
        BreakerRecord.from_json("dep", {"state": "ajar"})
    with pytest.raises(ValueError, match="dep"):
        BreakerRecord.from_json("dep", {"state": "open", "trials": [1]})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"fail_max": 0}, "fail_max"),
        ({"window": -1}, "window"),
        ({"reset_timeout": "soon"}, "reset_timeout"),
        ({"exceptions": ()}, "exceptions"),
        ({"exceptions": (ValueError, "x")}, "exceptions"),
        ({"queues": []}, "queues"),
        ({"probe": 3}, "probe"),
        ({"half_open_trials": 1, "success_threshold": 2}, "success_threshold"),
        ({"reset_timeout": 30, "max_reset_timeout": 10}, "max_reset_timeout"),
        ({"backoff_factor": 0.5}, "backoff_factor"),
        ({"max_requeues": 0}, "max_requeues"),
        ({"ramp": 0}, "ramp must be positive and at most a day"),
        ({"ramp": -5}, "ramp must be positive"),
        ({"ramp": 86401}, "ramp must be positive and at most a day"),
        ({"ramp": float("nan")}, "ramp must be positive"),
        ({"ramp": "10m"}, "ramp must be a number of seconds"),
        ({"ramp": True}, "ramp must be a number of seconds"),
    ],
)
def test_bad_options_are_refused_clearly(options: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        CircuitBreaker("dep", **options)  # type: ignore[arg-type]


def test_names_are_checked_and_defaults_are_documented_values() -> None:
    with pytest.raises(InvalidInput, match="name"):
        CircuitBreaker("no spaces please")
    breaker = CircuitBreaker("payments-api")
    assert (breaker.fail_max, breaker.window, breaker.reset_timeout) == (5, 60.0, 30.0)
    assert breaker.exceptions == (ConnectionError, TimeoutError)
    assert breaker.queues is None and breaker.source == "breaker:payments-api"
    assert (breaker.half_open_trials, breaker.success_threshold) == (1, 1)
    assert breaker.max_reset_timeout == 300.0
    assert breaker.ramp is None
    assert CircuitBreaker("dep", ramp=timedelta(minutes=2)).ramp == 120.0
    assert CircuitBreaker("dep", ramp=86400).ramp == 86400.0
    assert breaker.counts(ConnectionRefusedError()) and not breaker.counts(ValueError())


def test_a_ramped_close_reopens_at_one_failure_until_the_ramp_ends() -> None:
    # Given a breaker that closed at 121 with a 30 s ramp
    closed = half_open().succeed(1, "probe:1", 1, 121.0, ramp=30.0)
    assert closed is not None and closed.state == CLOSED
    assert closed.ramp_until == 151.0 and closed.ramping(150.9) and not closed.ramping(151.0)
    assert BreakerRecord.from_json("dep", closed.to_json()) == closed

    # Then one failure during the ramp re-opens it, with a fresh hold and no ramp left
    reopened = closed.trip(130.0, 1, "ConnectionError()", POLICY, "h2")
    assert reopened is not None and reopened.state == OPEN
    assert (reopened.hold_id, reopened.failures, reopened.ramp_until) == ("h2", 1, None)
    assert not reopened.ramping(131.0)
    # ... while after it, fail_max failures are needed again
    assert closed.trip(151.0, 2, "e", POLICY, "h2") is None
    assert closed.trip(151.0, 3, "e", POLICY, "h2") is not None


def test_an_operators_forced_close_and_a_plain_close_do_not_ramp() -> None:
    placed = half_open().placed("h1")
    assert placed is not None
    forced = placed.forced_close("h1", 120.0)
    plain = half_open().succeed(1, "probe:1", 1, 121.0)

    assert forced is not None and plain is not None
    assert forced.ramp_until is None and plain.ramp_until is None
    assert forced.trip(121.0, 1, "e", POLICY, "h2") is None
