"""How a worker repairs a breaker's hold after an interrupted writer, on a real Redis store."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery

import celery_pause
from celery_pause.breaker.agent import BreakerAgent
from celery_pause.breaker.record import CLOSED, OPEN
from celery_pause.model.outcome import Outcome
from celery_pause.model.state import Hold, PauseState
from celery_pause.stores import store_for
from support.harness import REDIS_BROKER, REDIS_STORE
from support.holds import holds, ramps
from support.services import require
from support.stores import write_raw


@pytest.fixture
def app() -> Iterator[Celery]:
    require("Redis", "127.0.0.1", 6379)
    namespace = "t" + uuid.uuid4().hex[:10]
    app = Celery("repair", broker=REDIS_BROKER, set_as_current=False)
    app.conf.update(
        pause_store_url=REDIS_STORE,
        pause_key_prefix=f"celery-pause-test:{namespace}",
        control_exchange=f"ctl-{namespace}",
    )
    yield app
    store_for(app).close()
    client = redis.Redis.from_url(REDIS_STORE)
    for key in client.scan_iter(f"celery-pause-test:{namespace}*"):
        client.delete(key)


def agent_for(app: Celery, breaker: celery_pause.CircuitBreaker) -> BreakerAgent:
    return BreakerAgent(app=app, hostname="w1@test", breakers=[breaker], admission=None, poll=1.0)  # type: ignore[arg-type]


def tripped(app: Celery, breaker: celery_pause.CircuitBreaker, opened_ago: float = 0.0) -> Any:
    """The breaker's record opened ``opened_ago`` seconds ago, its hold not yet placed."""
    store = store_for(app)
    record, _ = breaker.change(
        store,
        lambda rec, now: rec.trip(now - opened_ago, 5, "ConnectionError()", breaker.policy, "h1"),
    )
    return record


def add_hold(app: Celery, hold: Hold) -> None:
    store_for(app).update(lambda state, now: Outcome(state.with_holds([*state.holds, hold]), None))


def test_a_hold_its_tripper_did_not_live_to_place_is_put_in_place(app: Celery) -> None:
    # Given a breaker that opened a moment ago, whose tripper died before placing its hold
    breaker = celery_pause.CircuitBreaker("dep", queues=["payments"])
    tripped(app, breaker)

    # When a worker looks at it
    record = agent_for(app, breaker).reconcile(breaker)

    # Then the hold is there, and the record knows it
    (hold,) = holds(app)
    assert (hold.id, hold.source, hold.scope.queues) == ("h1", "breaker:dep", {"payments"})
    assert record.state == OPEN and record.hold_placed


def test_a_removed_hold_closes_the_breaker_and_a_stale_one_is_dropped(app: Celery) -> None:
    # Given an open breaker whose hold is placed, a stale hold of an earlier period,
    # and an operator's hold
    breaker = celery_pause.CircuitBreaker("dep", queues=["payments"])
    tripped(app, breaker)
    agent = agent_for(app, breaker)
    agent.reconcile(breaker)
    add_hold(app, Hold(scope=breaker.hold_scope(app), source="breaker:dep", id="old"))
    celery_pause.pause(app, queues=["payments"], reason="maintenance")

    # When a worker looks at it, the stale hold goes and the current one stays
    agent.reconcile(breaker)
    assert sorted(h.id for h in holds(app) if h.source == "breaker:dep") == ["h1"]

    # When an operator's forced resume removes the breaker's hold (and their own)
    celery_pause.pause(app, queues=["payments"], reason="again", force=True)
    store_for(app).update(
        lambda state, now: Outcome(state.with_holds(h for h in state.holds if h.id != "h1"), None)
    )
    record = agent.reconcile(breaker)

    # Then the breaker is closed, its failures forgotten, and the operator's hold untouched
    assert record.state == CLOSED
    assert [h.reason for h in holds(app)] == ["again"]


def test_a_long_lost_unplaced_hold_is_not_put_back(app: Celery) -> None:
    # Given a breaker that opened long ago and whose hold never made it into the state
    breaker = celery_pause.CircuitBreaker("dep", queues=["payments"])
    tripped(app, breaker, opened_ago=120)

    # When a worker looks at it
    record = agent_for(app, breaker).reconcile(breaker)

    # Then it counts as resumed: the breaker starts closed rather than pausing anew
    assert record.state == CLOSED
    assert holds(app) == ()
    assert store_for(app).read().state == PauseState()


def test_status_lists_breakers_from_the_store_with_failures_and_times(app: Celery) -> None:
    # Given a breaker with two failures counted, then opened (its tasks are not in this app)
    breaker = celery_pause.CircuitBreaker("dep", queues=["payments"], window=60)
    store = store_for(app)
    for error in ("ConnectionError('one')", "TimeoutError('two')"):
        store.add_event(breaker.key, window=breaker.window, detail=error)
    record = tripped(app, breaker)

    # When the status is asked for
    (status,) = celery_pause.breaker_statuses(app)

    # Then it shows the state, the failures in the window, when it opened and will probe next,
    # and the last error
    assert (status.name, status.state, status.failures, status.fail_max) == ("dep", "open", 2, 5)
    assert status.opened_at == record.opened_at
    assert status.next_probe_at == record.opened_at + breaker.reset_timeout
    assert status.last_error == "TimeoutError('two')"
    line = status.describe()
    assert line.startswith("circuit dep (queue payments): open; 2/5 failures in 60s; opened at ")
    assert "next probe at" in line and line.endswith("last error: TimeoutError('two')")
    assert status.to_json()["queues"] == ["payments"]


def test_an_unreadable_record_shows_as_such_and_reset_clears_it(app: Celery) -> None:
    # Given a breaker whose record was damaged, and its hold in place
    breaker = celery_pause.CircuitBreaker("dep", queues=["payments"])
    tripped(app, breaker)
    agent_for(app, breaker).reconcile(breaker)
    write_raw(store_for(app), "record", breaker.key, b"{oops")

    # Then status says so, and the hold stays: nothing un-pauses
    (status,) = celery_pause.breaker_statuses(app)
    assert status.state == "unreadable" and "breaker:dep" in (status.last_error or "")
    assert [h.source for h in holds(app)] == ["breaker:dep"]

    # When the breaker is reset, it is closed and its hold is gone
    breaker.reset(app)
    assert celery_pause.breaker_status(app, breaker).state == "closed" and holds(app) == ()


def test_a_damaged_event_window_or_lease_shows_the_state_and_reset_clears_them(app: Celery) -> None:
    # Given a breaker open with its hold, its failure window and probe lease damaged
    breaker = celery_pause.CircuitBreaker("dep", queues=["payments"])
    tripped(app, breaker)
    agent_for(app, breaker).reconcile(breaker)
    store = store_for(app)
    write_raw(store, "record", f"events:{breaker.key}", b'{"events": 7}')
    write_raw(store, "record", f"lease:{breaker.key}", b"{oops")

    # Then its status still says it is open, naming what is damaged, and the hold stays
    (status,) = celery_pause.breaker_statuses(app)
    assert status.state == "open" and "unreadable" in (status.last_error or "")
    assert [h.source for h in holds(app)] == ["breaker:dep"]

    # When it is reset, Then neither record is left
    breaker.reset(app)
    assert store.record_keys() == []
    assert celery_pause.breaker_status(app, breaker).state == "closed" and holds(app) == ()


def test_a_ramped_close_starts_its_ramp_with_the_hold_removed_and_a_trip_ends_it(
    app: Celery,
) -> None:
    # Given a breaker with a 60 s ramp whose closer died after closing its record,
    # before removing its hold
    breaker = celery_pause.CircuitBreaker("dep", queues=["payments"], ramp=60)
    tripped(app, breaker)
    agent = agent_for(app, breaker)
    agent.reconcile(breaker)
    store = store_for(app)
    closed, _ = breaker.change(store, lambda rec, now: rec.close(now, breaker.ramp))
    generation = store.read().state.generation

    # When a worker looks at it
    agent.reconcile(breaker)

    # Then one update removed the hold and recorded the ramp on the hold's scope
    state = store.read().state
    (ramp,) = ramps(app)
    assert state.generation == generation + 1 and holds(app) == ()
    assert (ramp.hold.source, ramp.hold.scope.describe()) == ("breaker:dep", "queue payments")
    assert (ramp.start, ramp.end, ramp.peak) == (closed.closed_at, closed.ramp_until, 100.0)
    status = celery_pause.breaker_status(app, breaker)
    assert status.state == "closed" and status.ramp_until == closed.ramp_until
    assert "ramping until" in status.describe() and status.to_json()["ramp_until"]

    # When one failure during the ramp trips it, and its hold is placed
    record, _ = breaker.change(
        store, lambda rec, now: rec.trip(now, 1, "ConnectionError()", breaker.policy, "h2")
    )
    assert record.state == OPEN
    breaker.place_hold(app, store, record, paused_by="w1@test")

    # Then the hold is back and the ramp gone, so a forced resume would not revive it
    (hold,) = holds(app)
    assert hold.id == "h2" and "during its ramp" in (hold.reason or "")
    assert ramps(app) == ()
    assert celery_pause.breaker_status(app, breaker).ramp_until is None
