"""Cost-weighted limits: a rate that counts the units each task says it costs.

The booking rule (``reserve``), a worker's permits, the gate reading a task's cost from its
message (whatever it holds), placing beside a limit that counts tasks, and the limit's JSON.
(The same on real workers: tests/integration/worker/test_cost_limits.py.)
"""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest
from celery.worker.request import Request
from hypothesis import HealthCheck, given, settings

import celery_pause
from celery_pause.errors import InvalidInput
from celery_pause.limits.permits import Permits
from celery_pause.model.limit import (
    HORIZON,
    MAX_COST_SECONDS,
    Limit,
    charge,
    credit_of,
    reserve,
)
from celery_pause.model.outcome import Outcome
from celery_pause.model.placing import Placing, place
from celery_pause.model.scope import NOTHING, Scope
from celery_pause.model.state import Hold, PauseState
from celery_pause.model.validation import check_limit
from celery_pause.worker.gate import Gate
from support.hostile import values
from support.requests import TASK, request_of
from support.simulated import SimulatedWorker

NOW = 1_000_000.0
TOKENS = Limit(rate=100.0, cost="tokens")
"""100 units a second, each task spending what its ``tokens`` says."""


# -- booking ----------------------------------------------------------------------------------
def test_a_task_starts_once_its_units_have_accrued_and_the_next_pays_after_it() -> None:
    # When tasks of 1, 10 and 5 units book a fresh rate of 100 units a second
    booked = reserve({"tat": NOW}, NOW, limit=TOKENS, costs=[1.0, 10.0, 5.0])

    # Then the first starts at once, each next once its own units accrued, and the record
    # goes on past all 16 units
    assert booked.result.times() == pytest.approx([NOW, NOW + 0.10, NOW + 0.15])
    assert booked.value == {"tat": pytest.approx(NOW + 0.16)}


def test_tasks_of_cost_one_book_exactly_as_a_rate_that_counts_tasks() -> None:
    plain = reserve({"tat": NOW}, NOW, limit=Limit(rate=100.0), costs=[1.0] * 5)
    weighed = reserve({"tat": NOW}, NOW, limit=TOKENS, costs=[1.0] * 5)
    assert plain == weighed


def test_a_dear_task_starts_once_a_seconds_budget_accrued_and_holds_back_the_rest() -> None:
    # When a task of 300 units (3 s of the rate) books, then one of 1
    dear = reserve({"tat": NOW}, NOW, limit=TOKENS, costs=[300.0])
    after = reserve(dear.value, NOW + 0.01, limit=TOKENS, costs=[1.0])

    # Then the dear one is granted at once, to start once a second's budget (100 units)
    # accrued: no starvation; the record goes on past all 300, so the next task cannot
    # book before its turn: no burst
    assert dear.result.times() == pytest.approx([NOW + 0.99])
    assert dear.value == {"tat": pytest.approx(NOW + 3.0)}
    assert after.result.count == 0
    assert after.result.retry_at == pytest.approx(NOW + 3.0 - HORIZON)
    # And behind another task in one run, the dear one starts a second's budget after it
    both = reserve({"tat": NOW}, NOW, limit=TOKENS, costs=[1.0, 300.0])
    assert both.result.times() == pytest.approx([NOW, NOW + 1.0])


def test_a_task_costing_more_than_a_hold_may_last_starts_within_a_second() -> None:
    # Given tasks of 40,000 units (400 s of 100 units a second: longer than a worker
    # holds a task before it goes back to the broker), each behind the last
    record: dict[str, Any] | None = {"tat": NOW}
    now = NOW
    for _ in range(3):
        # When the next books once the record allows
        booked = reserve(record, now, limit=TOKENS, costs=[40_000.0])
        if not booked.result.count:
            now = booked.result.retry_at
            booked = reserve(record, now, limit=TOKENS, costs=[40_000.0])
        record = booked.value

        # Then it starts within a second of booking, and the next waits out its debt
        (start,) = booked.result.times()
        assert start - now <= HORIZON
        assert record is not None and record["tat"] == pytest.approx(start + 400.0 - 0.99)


def test_a_task_of_no_cost_starts_in_the_next_turn_and_spends_nothing() -> None:
    booked = reserve({"tat": NOW}, NOW, limit=TOKENS, costs=[0.0, 1.0])
    assert booked.result.times() == [NOW, NOW]
    assert booked.value == {"tat": pytest.approx(NOW + 0.01)}


def test_random_costs_over_many_bookings_spend_the_rate_and_no_more() -> None:
    # Given tasks costing from 1 to 500 units, booked in turns by four workers at 3000/s
    limit = Limit(rate=3000.0, cost="tokens")
    rng = random.Random(7)
    record: dict[str, Any] | None = {"tat": NOW}
    starts: list[tuple[float, float]] = []
    now = NOW
    while now < NOW + 60:
        costs = [float(rng.randint(1, 500)) for _ in range(rng.randint(1, 4))]
        done = reserve(record, now, limit=limit, costs=costs)
        record = done.value or record
        starts += list(zip(done.result.starts, costs[: done.result.count], strict=True))
        now += 0.005

    # Then every 10 s window spends the rate's 30,000 units within one task, every second
    # at most twice the rate
    for edge in range(10, 50):
        spent = sum(cost for at, cost in starts if NOW + edge <= at < NOW + edge + 10)
        assert abs(spent - 30_000) <= 500, (edge, spent)
    for edge in range(59):
        assert sum(c for at, c in starts if NOW + edge <= at < NOW + edge + 1) <= 6000


# -- settling what a task really spent (celery_pause.spend) ------------------------------------
def test_a_task_that_spent_more_is_charged_the_rest_from_the_next_start_time_on() -> None:
    # Given a rate of 100 units a second booked half a second ahead, and one gone idle
    ahead = charge({"tat": NOW + 0.5}, NOW, limit=TOKENS, units=50.0)
    idle = charge({"tat": NOW - 5.0}, NOW, limit=TOKENS, units=50.0)

    # Then 50 units more hold back the next start by half a second, from now if idle
    assert ahead.value == {"tat": pytest.approx(NOW + 1.0)} and ahead.result == 50.0
    assert idle.value == {"tat": pytest.approx(NOW + 0.5)}
    # And a record the store lost stays lost (its rate starts afresh)
    assert charge(None, NOW, limit=TOKENS, units=50.0) == Outcome(None, 0.0)


def test_a_task_that_spent_less_leaves_a_credit_the_next_tasks_spend_first() -> None:
    # Given 50 units booked ahead, and a task that spent 30 units less than it said
    credited = charge({"tat": NOW + 0.5}, NOW, limit=TOKENS, units=-30.0)

    # Then the next start time stays (a worker would take a record moving back for one
    # the store lost), and 30 units are kept beside it
    assert credited.value == {"tat": NOW + 0.5, "credit": 30.0} and credited.result == -30.0
    # When a task of 40 books: it pays 10, the credit the rest
    booked = reserve(credited.value, NOW, limit=TOKENS, costs=[40.0])
    assert booked.result.times() == pytest.approx([NOW + 0.59])
    assert booked.value == {"tat": pytest.approx(NOW + 0.6)}


def test_a_credit_banks_nothing_unspent() -> None:
    # A credit is at most the units booked ahead (20 here), and lapses once they passed
    capped = charge({"tat": NOW + 0.2}, NOW, limit=TOKENS, units=-100.0)
    assert capped.value == {"tat": NOW + 0.2, "credit": pytest.approx(20.0)}
    assert capped.result == pytest.approx(-20.0)
    assert credit_of(capped.value, NOW + 0.3) == 0.0
    later = reserve(capped.value, NOW + 0.3, limit=TOKENS, costs=[5.0])
    assert later.result.times() == pytest.approx([NOW + 0.34])
    assert later.value == {"tat": pytest.approx(NOW + 0.35)}
    # And a charge spends a credit before it moves the next start time
    paid = charge({"tat": NOW + 0.5, "credit": 30.0}, NOW, limit=TOKENS, units=10.0)
    assert paid.value == {"tat": NOW + 0.5, "credit": 20.0}


@pytest.mark.parametrize("value", [-1, math.nan, math.inf, "lots", [5], True, 10**400])
def test_spend_refuses_what_is_no_cost(value: Any) -> None:
    with pytest.raises(InvalidInput, match="tokens must be a number of at least 0"):
        celery_pause.spend(tokens=value)


def test_spend_settles_nothing_for_a_task_no_worker_runs() -> None:
    assert celery_pause.spend(tokens=5) == {}  # no task running
    assert celery_pause.spend(task=TASK, tokens=5) == {}  # called directly


# -- a worker's permits -----------------------------------------------------------------------
def permits_of(limit: Limit) -> Permits:
    return Permits(id="tok", scope=Scope.of(), limit=limit)


def waiting(permits: Permits, *costs: float) -> list[tuple[Request, float]]:
    """Requests of ``costs`` waiting for ``permits``, in arrival order."""
    requests = [(request_of(None, kwargs={"tokens": cost}), cost) for cost in costs]
    for request, cost in requests:
        permits.wait(request, cost)
    return requests


def test_permits_book_for_what_waiting_tasks_cost_and_spend_a_time_on_its_task() -> None:
    # Given tasks of 5, 1 and 45 units waiting for 100 units a second
    permits = permits_of(TOKENS)
    tasks = waiting(permits, 5.0, 1.0, 45.0)

    # Then the booking asks for their costs, half a horizon's worth (50 units) at once
    assert permits.starts_wanted(NOW) == tasks[:2]
    permits.add_starts(tasks[:2], [NOW + 0.04, NOW + 0.05], NOW, NOW + 0.06)
    assert permits.starts_wanted(NOW) == tasks[2:]
    # And a time paid for the task of 5 starts it, not before its turn
    assert not permits.ready(NOW + 0.03, *tasks[0])
    assert permits.ready(NOW + 0.04, *tasks[0])


def test_a_time_paid_for_a_cheaper_task_is_not_spent_by_a_dearer_one() -> None:
    # Given a task of 50 units first in line without a start time, and one of 1 behind it
    # with its time come (the dear one's was dropped: its worker stalled)
    permits = permits_of(TOKENS)
    dear, cheap = waiting(permits, 50.0, 1.0)
    permits.add_starts([cheap], [NOW], NOW, NOW + 0.01)

    # Then the dear one may not start on the cheap one's time, and books its own
    assert not permits.ready(NOW, *dear)
    assert permits.starts_wanted(NOW) == [dear]
    permits.add_starts([dear], [NOW + 0.5], NOW, NOW + 0.51)
    # And once the cheap one is first, it starts on its own time still
    permits.clear_waiting()
    permits.wait(*cheap)
    assert permits.ready(NOW + 0.005, *cheap)


def test_the_first_task_takes_a_time_that_came_paid_for_as_much_and_gives_its_own() -> None:
    # Given a task of 5 units first in line, its time still to come, and one of 5 behind
    # it whose time came (both booked before the first's worker re-booked it)
    permits = permits_of(TOKENS)
    first, second = waiting(permits, 5.0, 5.0)
    permits.add_starts([first, second], [NOW + 0.3, NOW], NOW, NOW + 0.31)

    # Then the first starts now on the time that came, and the second gets its time
    assert permits.ready(NOW, *first)
    permits.spend(first[0])
    permits.clear_waiting()
    permits.wait(*second)
    assert not permits.ready(NOW, *second)
    assert permits.next_start() == NOW + 0.3
    assert permits.ready(NOW + 0.3, *second)


# -- reading a cost from a message ------------------------------------------------------------
def cost_gate(passed: list[Request]) -> Gate:
    """A gate limiting every task to 100 tokens a second and 1000 tasks a second."""
    gate = Gate(passed.append, lambda req: "default", hostname="w1@host", labels={})
    tokens = Hold(id="tok", scope=Scope.of(), limit=TOKENS)
    requests = Hold(id="req", scope=Scope.of(), limit=Limit(rate=1000.0))
    gate.hold_to(NOTHING, limits=[tokens, requests])
    return gate


@pytest.mark.parametrize(
    ("kwargs", "header", "cost"),
    [
        ({"tokens": 250}, None, 250.0),
        ({"tokens": 2.5}, None, 2.5),
        ({"tokens": "12"}, None, 12.0),
        ({"tokens": 250}, 7, 7.0),  # the header wins
        ({}, None, 1.0),  # none said: 1
        ({"tokens": -3}, None, 1.0),
        ({"tokens": math.nan}, None, 1.0),
        ({"tokens": math.inf}, None, 1.0),
        ({"tokens": True}, None, 1.0),
        ({"tokens": "lots"}, None, 1.0),
        ({"tokens": [5]}, None, 1.0),
        ({"tokens": 10**400}, None, 1.0),
        ({"tokens": 10**12}, None, 100.0 * MAX_COST_SECONDS),  # charged an hour's budget
    ],
)
def test_a_task_costs_what_its_message_says_and_a_bad_value_costs_one(
    kwargs: dict[str, Any], header: Any, cost: float
) -> None:
    gate = cost_gate([])
    request = request_of(None, kwargs=kwargs, **({"tokens": header} if header else {}))
    tokens, _ = gate.pacing.permits
    assert gate.pacing._cost_of(tokens, request) == cost


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=values)
def test_no_cost_a_message_carries_raises_out_of_the_gate(value: Any) -> None:
    # Given a gate with a cost-weighted limit and one counting tasks
    passed: list[Request] = []
    gate = cost_gate(passed)
    request = request_of(None, kwargs={"tokens": value})
    request.message.headers["tokens"] = value

    # When the request arrives and the gate is pumped
    gate(request)
    gate.pump()

    # Then nothing raised, and it waits for its permits (none booked yet) or passed
    waiting = [req for req, _ in gate.pacing.waiting]
    assert waiting == [request] or passed == [request]


# -- placing and JSON -------------------------------------------------------------------------
def placing(limit: Limit) -> Placing:
    scope = Scope.of(tasks=["proj.llm"])
    return Placing(scope=scope, by="ops", reason=None, resume_at=lambda now: None, limit=limit)


def test_a_limit_of_units_and_one_of_tasks_on_one_scope_both_apply() -> None:
    # Given 90,000 tokens a minute on a task
    tokens = check_limit("90000/m", None, cost="tokens")
    first = place(PauseState(), NOW, placing(tokens))

    # When 500 requests a minute are placed on the same scope, then tokens turned to 60,000
    both = place(first.value or PauseState(), NOW + 1, placing(check_limit("500/m", None)))
    turned = check_limit("60000/m", None, cost="tokens")
    dial = place(both.value or PauseState(), NOW + 2, placing(turned))

    # Then the two counts stand side by side, and a limit of the same count is replaced
    assert both.result.replaced == ()
    assert dial.value is not None and dial.result.replaced == (first.result.hold,)
    limits = sorted(h.limit.describe() for h in dial.value.holds if h.limit is not None)
    assert limits == ["1000/s of tokens", "500/m"]


def test_a_cost_weighted_limit_round_trips_through_json_and_refuses_what_it_cannot_weigh() -> None:
    hold = Hold(scope=Scope.of(), paused_at=NOW, limit=Limit(rate=1500.0, cost="tokens"))
    doc = json.loads(PauseState(generation=1, holds=(hold,), epoch="e").encode())
    assert doc["holds"][0]["cost"] == "tokens"
    assert PauseState.decode(json.dumps(doc)).holds[0].limit == hold.limit
    with pytest.raises(InvalidInput, match="cost weighs a rate"):
        check_limit(None, 3, cost="tokens")
    with pytest.raises(InvalidInput, match="cost must name"):
        check_limit("10/s", None, cost="to kens")
    with pytest.raises(ValueError):
        Limit(rate=10.0, rise=(NOW, 10.0), cost="tokens")


def test_a_start_time_due_is_kept_while_its_task_waits_for_another_limit() -> None:
    # Given a task under 1000 tokens a second and 10 requests a second, whose token time
    # is due and whose request time comes 80 ms later
    passed: list[Request] = []
    clock = [NOW]
    gate = Gate(passed.append, lambda req: "default", hostname="w1@host", clock=lambda: clock[0])
    tokens = Hold(id="tok", scope=Scope.of(), limit=Limit(rate=1000.0, cost="tokens"))
    requests = Hold(id="req", scope=Scope.of(), limit=Limit(rate=10.0))
    gate.hold_to(NOTHING, limits=[tokens, requests])
    request = request_of(None, kwargs={"tokens": 10})
    gate(request)
    by_tokens, by_requests = gate.pacing.permits
    by_tokens.add_starts([(request, 10.0)], [NOW], NOW, NOW + 0.01)
    by_requests.add_starts([(request, 1.0)], [NOW + 0.08], NOW, NOW + 0.18)

    # When the gate pumps as the token time falls due, and again once the request time did
    gate.pump()
    clock[0] = NOW + 0.08
    gate.pump()

    # Then the token time, 80 ms past its turn (its lateness is 10 ms), was kept for it
    assert passed == [request]


def test_tokens_and_requests_with_mixed_costs_start_at_the_stricter_rate() -> None:
    # Given a worker's gate and keeper under 1000 tokens a second and 10 requests a second
    # (a store on a simulated clock, looked at every 5 ms), and 300 tasks costing from 1
    # to 100 tokens (20 a second by tokens alone)
    tokens = Hold(id="tok", scope=Scope.of(), limit=Limit(rate=1000.0, cost="tokens"))
    requests = Hold(id="req", scope=Scope.of(), limit=Limit(rate=10.0))
    worker = SimulatedWorker([tokens, requests], NOW)
    rng = random.Random(3)
    worker.receive(request_of(None, kwargs={"tokens": rng.randint(1, 100)}) for _ in range(300))

    # When 20 s pass
    worker.run_until(NOW + 20)

    # Then the requests' rate decides: 10 a second, each 5 s window within 10 %
    started = worker.started
    windows = [sum(NOW + i <= at < NOW + i + 5 for at in started) for i in range(0, 20, 5)]
    assert all(45 <= w <= 55 for w in windows), windows
