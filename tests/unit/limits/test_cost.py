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

from celery_pause.errors import InvalidInput
from celery_pause.limits.permits import Permits
from celery_pause.model.limit import HORIZON, MAX_COST_SECONDS, Limit, reserve
from celery_pause.model.placing import Placing, place
from celery_pause.model.scope import NOTHING, Scope
from celery_pause.model.state import Hold, PauseState
from celery_pause.model.validation import check_limit
from celery_pause.worker.gate import Gate
from support.hostile import values
from support.requests import request_of

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


def test_a_task_dearer_than_the_horizon_books_alone_and_holds_back_what_follows() -> None:
    # When a task of 300 units (3 s of the rate) books, then one of 1
    dear = reserve({"tat": NOW}, NOW, limit=TOKENS, costs=[300.0])
    after = reserve(dear.value, NOW + 0.01, limit=TOKENS, costs=[1.0])

    # Then the dear one is granted at once, to start once its 300 units accrued: no
    # starvation; the next task cannot book before its turn: no burst
    assert dear.result.times() == pytest.approx([NOW + 2.99])
    assert after.result.count == 0
    assert after.result.retry_at == pytest.approx(NOW + 3.0 - HORIZON)
    # And behind another task in one run, the dear one is refused whole, as any long run
    assert reserve({"tat": NOW}, NOW, limit=TOKENS, costs=[1.0, 300.0]).result.count == 0


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


# -- a worker's permits -----------------------------------------------------------------------
def permits_of(limit: Limit) -> Permits:
    return Permits(id="tok", scope=Scope.of(), limit=limit)


def test_permits_book_for_what_waiting_tasks_cost_and_spend_a_time_on_its_task() -> None:
    # Given tasks of 5, 1 and 40 units waiting for 100 units a second
    permits = permits_of(TOKENS)
    for cost in (5.0, 1.0, 40.0):
        permits.wait(cost)

    # Then the booking asks for their costs, a quarter horizon's worth (25 units) at once
    assert permits.starts_wanted(NOW) == [5.0, 1.0]
    permits.add_starts([NOW + 0.04, NOW + 0.05], NOW, NOW + 0.06, [5.0, 1.0])
    assert permits.starts_wanted(NOW) == [40.0]
    # And a time paid for a task of 5 starts a task of 5, not before its turn
    assert not permits.ready(NOW + 0.03, 5.0)
    assert permits.ready(NOW + 0.04, 5.0)


def test_a_time_paid_for_a_cheaper_task_is_dropped_not_spent_by_a_dearer_one() -> None:
    permits = permits_of(TOKENS)
    permits.wait(1.0)
    permits.add_starts([NOW], NOW, NOW + 0.01, [1.0])

    # When the task it was booked for is gone and one of 50 units asks
    # Then it may not start on it, and the time is given up for a booking of its own
    assert not permits.ready(NOW, 50.0)
    assert permits.next_start() is None
    permits.clear_waiting()
    permits.wait(50.0)
    assert permits.starts_wanted(NOW) == [50.0]


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
    by_tokens.add_starts([NOW], NOW, NOW + 0.01, [10.0])
    by_requests.add_starts([NOW + 0.08], NOW, NOW + 0.18)

    # When the gate pumps as the token time falls due, and again once the request time did
    gate.pump()
    clock[0] = NOW + 0.08
    gate.pump()

    # Then the token time, 80 ms past its turn (its lateness is 10 ms), was kept for it
    assert passed == [request]
