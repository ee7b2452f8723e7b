"""Adaptive limits: the level an overload cuts and time brings back, what a worker books at
it, what ``Overloaded`` takes from a task, and how the limit reads in JSON and status.
(The same on real workers: tests/integration/worker/test_adaptive_limits.py.)
"""

from __future__ import annotations

import math
import pickle

import pytest
from celery.exceptions import Retry

import celery_pause
from celery_pause.api.overload import seconds
from celery_pause.errors import InvalidInput
from celery_pause.model.adaptive import (
    COOL_DOWN,
    DECREASE,
    FLOOR,
    GROWTH,
    MAX_WAIT,
    RECOVER,
    STEPPED_BACK,
    Cut,
    adapt_key,
    at_level,
    cut_of,
    level_of,
    overload,
)
from celery_pause.model.limit import Limit
from celery_pause.model.scope import Scope
from celery_pause.model.state import Hold
from celery_pause.model.usage import Usage
from celery_pause.model.validation import check_limit
from support.requests import request_of
from support.simulated import SimulatedWorker

NOW = 1_000_000.0


def cut_at(now: float, record: dict | None = None, retry_after: float | None = None) -> dict:
    outcome = overload(record, now, why="429", retry_after=retry_after)
    assert outcome.value is not None
    return outcome.value


def test_a_first_overload_cuts_the_ceiling_and_time_brings_it_back() -> None:
    # Given a limit never cut, When a task finds the downstream overloaded
    record = cut_at(NOW)

    # Then it runs at DECREASE of its ceiling at once, nearly back after half the recovery,
    # at the ceiling's level again after RECOVER, and past it (up to the ceiling) later
    assert level_of(None, NOW) == 1.0
    assert level_of(record, NOW) == pytest.approx(DECREASE)
    assert DECREASE < level_of(record, NOW + RECOVER / 2) < 1.0
    assert level_of(record, NOW + RECOVER) == pytest.approx(1.0)
    again = cut_at(NOW + COOL_DOWN, record)  # the capacity fell: a lower peak
    at = NOW + COOL_DOWN + RECOVER
    peak = level_of(again, at)
    assert peak < 1.0
    assert level_of(again, at + 0.5) == pytest.approx(peak * (1 + GROWTH) ** 0.5)
    assert level_of(again, at + 60) == 1.0
    assert level_of(again, at + 1e9) == 1.0  # a day, or a clock far ahead, overflows nothing


def test_overloads_within_the_cool_down_cut_once_and_a_later_retry_after_extends_it() -> None:
    # Given a cut with a Retry-After of 1 s
    record = cut_at(NOW, retry_after=1.0)
    level = level_of(record, NOW + 0.1)

    # When tasks started at the old level find the overload within the cool-down
    same = overload(record, NOW + 0.1, why="429", retry_after=None)
    longer = overload(record, NOW + 0.2, why="429", retry_after=2.0)

    # Then the level is not cut again; only a Retry-After reaching further is kept
    assert same.value is None and same.result is None
    assert longer.result is None and longer.value is not None
    assert cut_of(longer.value) == Cut(peak=1.0, at=NOW, why="429", until=NOW + 2.2)
    assert level_of(longer.value, NOW + 0.1) == level
    # and once the cool-down (and the Retry-After) passed, an overload cuts again
    later = overload(longer.value, NOW + max(COOL_DOWN, 2.2), why="429", retry_after=None)
    assert later.result is not None and later.result.count == 2


def test_a_cut_below_the_last_peak_lowers_the_peak_halfway() -> None:
    # Given a limit cut from its ceiling, and cut again before it came back (the capacity fell)
    first = cut_at(NOW)
    at = NOW + COOL_DOWN
    level = level_of(first, at)
    second = cut_at(at, first)

    # Then its new peak is halfway between the level found and one cut below it
    cut = cut_of(second)
    assert cut is not None
    assert cut.peak == pytest.approx(level * (1 + DECREASE) / 2)
    assert level_of(second, at) == pytest.approx(cut.peak * DECREASE)


def test_a_cut_the_clock_stepped_back_from_is_over_and_a_stored_wait_is_at_most_an_hour() -> None:
    # Given a cut whose record says it holds the scope for a day
    record = cut_at(NOW, retry_after=1.0)
    record["cut"]["until"] = NOW + 86400
    cut = cut_of(record)
    assert cut is not None and cut.until == NOW + MAX_WAIT
    # When the store's clock stepped back an hour, Then the cut is over: the level is back,
    # and the next overload cuts afresh (a cut ahead of the clock would never end)
    back = NOW - 3600
    assert level_of(record, back) == 1.0
    assert overload(record, back, why="429", retry_after=None).result is not None
    # but a cut a moment ahead (the workers' estimates of the store's clock differ) counts
    assert level_of(record, NOW - STEPPED_BACK / 2) == pytest.approx(DECREASE)
    assert cut.cools(NOW - STEPPED_BACK / 2)


def test_the_level_never_falls_below_the_floor_and_concurrency_keeps_one() -> None:
    record = None
    for i in range(200):
        record = cut_at(NOW + i * COOL_DOWN, record)
    assert level_of(record, NOW + 200 * COOL_DOWN) == pytest.approx(FLOOR * DECREASE, rel=0.2)
    limit = Limit(rate=100.0, concurrency=4, adaptive=True)
    low = at_level(limit, FLOOR)
    assert low.concurrency == 1 and low.rate == pytest.approx(100.0 * FLOOR)
    assert at_level(limit, 1.0) is limit


@pytest.mark.parametrize(
    "record",
    [{"cut": "garbage"}, {"cut": {"peak": "x", "at": 1}}, {"cut": {"at": NOW}}, {"cut": []}],
)
def test_an_unreadable_level_is_one_cut_below_the_ceiling_and_rewritten(record: dict) -> None:
    # A corrupt record never lifts the limit to its ceiling: it reads as one cut below it
    assert level_of(record, NOW) == DECREASE
    # and the next overload writes a cut afresh
    assert cut_of(cut_at(NOW, record)) is not None


def test_what_a_worker_books_follows_the_level_read_from_the_store() -> None:
    # Given a worker's gate and keeper under an adaptive 100/s (simulated clock), and its
    # level cut in the store (once: 85 % of the ceiling)
    hold = Hold(id="api", scope=Scope.of(), limit=Limit(rate=100.0, adaptive=True))
    worker = SimulatedWorker([hold], NOW)
    worker.store.update_record(
        adapt_key("api"), lambda record, now: overload(record, now, why="x", retry_after=None)
    )
    worker.receive(request_of(None) for _ in range(400))

    # When 2 s pass
    worker.run_until(NOW + 2)

    # Then it started at the level's rate as the level rose (85/s, a little more by 2 s),
    # not at its ceiling; and its figures say so
    record = worker.store.read_record(adapt_key("api"))
    expected = sum(100 * level_of(record, NOW + t / 100) / 100 for t in range(200))
    assert abs(len(worker.started) - expected) <= 5, (len(worker.started), expected)  # 200: ceiling
    current, cut = worker.gate.figures().adapted["api"]
    assert current.rate is not None and 85 < current.rate < 100 and cut is not None


def test_overloaded_takes_retry_after_as_a_number_and_refuses_the_rest_quietly() -> None:
    assert seconds(1.5) == 1.5
    assert seconds("2") == 2.0
    assert seconds(b"3") == 3.0
    assert seconds(1e12) == MAX_WAIT
    for bad in ("Wed, 21 Oct 2015 07:28:00 GMT", -1, math.nan, math.inf, True, None, [], object()):
        assert seconds(bad) is None
    exc = celery_pause.Overloaded(retry_after="0.5", why="429 from\x1b[31m the API")
    assert isinstance(exc, Retry) and exc.when == 0.5 and "\x1b" not in exc.why
    # a pool process hands it back pickled: it comes back the same
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is celery_pause.Overloaded
    assert (back.retry_after, back.why) == (0.5, exc.why)


def test_an_adaptive_limit_reads_back_from_json_and_refuses_what_it_cannot_be() -> None:
    limit = check_limit("200/s", 8, adaptive=True)
    assert Limit.from_json(limit.to_json()) == limit
    assert limit.describe() == "adaptive, up to 200/s, at most 8 at once"
    assert "adaptive" not in Limit(rate=1.0).to_json()
    with pytest.raises(TypeError):
        Limit.from_json({"rate": 1.0, "adaptive": "yes"})
    with pytest.raises(ValueError):
        Limit(rate=1.0, rise=(NOW, 10.0), adaptive=True)
    with pytest.raises(InvalidInput):
        check_limit("1/s", None, adaptive="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="adaptive needs throttle"):
        celery_pause.CircuitBreaker("api", adaptive=True)
    assert celery_pause.CircuitBreaker("api", throttle="5/s", adaptive=True).limit == Limit(
        rate=5.0, adaptive=True
    )


def test_status_says_the_level_and_the_last_cut() -> None:
    limit = Limit(rate=200.0, adaptive=True)
    record = cut_at(NOW, retry_after=1.0)
    usage = Usage.of(limit, None, {"tat": NOW + 1}, NOW + 0.5, record)
    text = usage.describe(limit)
    assert text.startswith(f"now {200 * level_of(record, NOW + 0.5):.1f}/s (cut")  # rising
    assert "cut 0 seconds ago from 200/s: 429; nothing starts for 0.5s" in text
    assert usage.to_json()["adaptive"]["cut"]["why"] == "429"
    assert Usage.of(limit, None, None, NOW, None).describe(limit).startswith("now 200.0/s (never")
