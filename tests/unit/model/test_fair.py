"""Fair turns: who goes next across a label's values, and what the store keeps of it."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from celery_pause.errors import InvalidInput
from celery_pause.model.fair import (
    MAX_VALUES,
    OTHERS,
    Weights,
    fair_forgotten,
    fair_lifted,
    fair_queue,
    fair_queues,
    turns,
    value_named,
)
from celery_pause.model.limit import Limit
from celery_pause.model.validation import check_limit
from support.hostile import values


def run(backlog: dict[str, int], weights: Weights, rounds: int, per_round: int) -> list[str]:
    """The turns of ``rounds`` rounds of ``per_round``, each round's record kept for the next."""
    record: dict[str, Any] | None = None
    order: list[str] = []
    left = dict(backlog)
    for _ in range(rounds):
        outcome = turns(record, left, weights, per_round)
        record = outcome.value or record
        for value in outcome.result:
            left[value] -= 1
        order += outcome.result
    return order


@settings(max_examples=100, deadline=None)
@given(
    weight=st.sampled_from([0.5, 1, 2, 3, 7]),
    per_round=st.integers(min_value=1, max_value=40),
)
def test_while_both_wait_each_takes_turns_in_proportion_to_its_weight(
    weight: float, per_round: int
) -> None:
    order = run({"a": 10_000, "b": 10_000}, Weights((("a", weight),)), 20, per_round)
    share = order.count("a") / len(order)
    assert abs(share - weight / (weight + 1)) <= 2 / len(order) + 0.01


def test_a_value_alone_takes_every_turn() -> None:
    assert run({"a": 50}, Weights(), 3, 20) == ["a"] * 50


def test_a_newcomer_behind_a_flood_goes_next_and_does_not_catch_up() -> None:
    # Given a flooding value served for a long time
    outcome = turns(None, {"flood": 100_000}, Weights(), 5000)
    record = outcome.value

    # When a new value arrives with 10 tasks
    later = turns(record, {"flood": 95_000, "new": 10}, Weights(), 20)

    # Then it takes every other turn from the next one (not the next 5000)
    assert later.result[:2].count("new") == 1
    assert Counter(later.result) == {"new": 10, "flood": 10}


def test_the_record_keeps_only_the_values_ahead_of_the_clock() -> None:
    record = None
    for value in [f"t{i}" for i in range(200)]:  # 200 one-task values, one after another
        record = turns(record, {value: 1}, Weights(), 1).value or record
    assert record is not None and len(record["tags"]) <= 1


@settings(max_examples=200, deadline=None)
@given(record=values)
def test_no_stored_content_breaks_the_turns(record: Any) -> None:
    stored = record if isinstance(record, dict) else {"tags": record, "clock": record}
    outcome = turns(stored, {"a": 2, "b": 1}, Weights(), 3)
    assert Counter(outcome.result) == {"a": 2, "b": 1}


def test_weights_match_exact_names_first_then_patterns_in_order() -> None:
    weights = Weights.parse(["trial-*=0.5", "trial-big=4", "*-eu=2"])
    assert [weights.of(v) for v in ("trial-big", "trial-x", "acme-eu", "acme")] == [4, 0.5, 2, 1]
    assert Weights.from_json(weights.to_json()) == weights
    assert weights.describe() == "trial-*=0.5, trial-big=4, *-eu=2"


@pytest.mark.parametrize(
    "weights", [["acme"], ["acme=0"], ["acme=nan"], ["acme=1e9"], {"acme": True}, ["=3"]]
)
def test_a_bad_weight_is_refused_with_why(weights: Any) -> None:
    with pytest.raises(InvalidInput):
        check_limit(None, None, fair="tenant", weights=weights)


def test_a_fair_limit_alone_or_with_others_is_stored_and_read_back() -> None:
    for limit in (
        check_limit(None, None, fair="tenant", weights={"acme": 3}),
        check_limit("10/s", 4, per="tenant", fair="tenant"),
    ):
        assert Limit.from_json(limit.to_json()) == limit
    assert check_limit(None, None, fair="tenant", weights={"acme": 3}).describe() == (
        "fair by tenant (acme=3)"
    )
    with pytest.raises(InvalidInput, match="--fair"):
        check_limit("10/s", None, weights={"acme": 3})


def test_each_value_has_its_own_queue_and_past_the_most_they_share_one() -> None:
    names = {fair_queue("p", "h1", value) for value in ("a", "A", "a b", "a_b", "x" * 300)}
    assert len(names) == 5 and all(len(name) < 120 for name in names)

    record: dict[str, Any] | None = None
    for index in range(MAX_VALUES + 2):
        value = f"v{index}"
        outcome = value_named("h1", value, fair_queue("p", "h1", value))(record, 0.0)
        record = outcome.value or record
        last = outcome.result
    queues = fair_queues(record, "h1")
    assert len(queues) == MAX_VALUES + 1 and queues[OTHERS] == last

    lifted = fair_lifted("h1")(record, 5.0)
    assert lifted.result == 5.0 and fair_lifted("h1")(lifted.value, 9.0).result == 5.0
    assert fair_queues(fair_forgotten("h1")(lifted.value, 9.0).value, "h1") == {}
