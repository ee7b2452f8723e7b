"""Scopes as pure logic: what a rule covers, how holds join, and the rules of a partial resume."""

from __future__ import annotations

import pytest
from celery import Celery

from celery_pause import BreakerTask, CircuitBreaker
from celery_pause.api import lifted_scope
from celery_pause.errors import InvalidInput
from celery_pause.model.scope import EVERYTHING, NOTHING, Scope, Target
from celery_pause.model.state import Hold, PauseState


def test_a_rule_is_the_intersection_of_its_dimensions() -> None:
    # Given a hold on billing tasks of the default queue on the w1 workers
    scope = Scope.of(["default"], tasks=["proj.billing.*"], workers=["w1@*"])

    # Then it covers exactly those tasks
    assert scope.covers(Target(queue="default", task="proj.billing.charge", worker="w1@host"))
    assert not scope.covers(Target(queue="default", task="proj.emails.send", worker="w1@host"))
    assert not scope.covers(Target(queue="reports", task="proj.billing.charge", worker="w1@host"))
    assert not scope.covers(Target(queue="default", task="proj.billing.charge", worker="w2@host"))
    # ... never a whole queue, and not every worker
    assert not scope.covers(Target(queue="default"))
    assert not scope.covers(Target(queue="default", task="proj.billing.charge"))
    # ... it touches the default queue on w1 only, and drains nothing (it names tasks)
    assert scope.touches(Target(queue="default", worker="w1@host")) and not scope.touches(
        Target(queue="default", worker="w2@host")
    )
    assert not scope.drains("default", "w1@host")


def test_a_worker_scoped_hold_drains_that_worker_only() -> None:
    scope = Scope.of(workers=["w1@host"])
    assert scope.drains("any", "w1@host") and scope.covers(Target(queue="any", worker="w1@host"))
    assert not scope.drains("any", "w2@host") and not scope.covers(
        Target(queue="any", worker="w2@host")
    )
    assert scope.for_worker("w2@host") == NOTHING
    assert scope.for_worker("w1@host") == scope


def test_holds_join_into_one_scope_per_task_and_worker_filter() -> None:
    # Given holds on queues a, b and c, and one on task x
    state = PauseState(
        3,
        (
            Hold(scope=Scope.of(["a"])),
            Hold(scope=Scope.of(["b", "c"])),
            Hold(scope=Scope.of(tasks=["x"])),
        ),
    )
    # Then the paused scope joins the queue holds and keeps the task hold apart
    assert state.paused(0) == Scope.of(["a", "b", "c"]) | Scope.of(tasks=["x"])
    assert state.paused(0).describe() == "queues a, b, c; task x"
    # And a hold on everything absorbs every other
    assert (state.paused(0) | EVERYTHING) == EVERYTHING


def test_holds_round_trip_through_json_with_every_dimension() -> None:
    hold = Hold(scope=Scope.of(["q"], tasks=["t.*"], workers=["w1@h"]), paused_by="ops")
    doc = hold.to_json()
    assert (doc["queues"], doc["tasks"], doc["workers"]) == (["q"], ["t.*"], ["w1@h"])
    assert Hold.from_json(doc) == hold
    # A hold of an earlier release (no tasks, no workers) covers every task on every worker
    del doc["tasks"], doc["workers"]
    assert Hold.from_json(doc).scope == Scope.of(["q"])
    # A dimension of the wrong shape is an unreadable hold on everything
    assert Hold.from_json({**doc, "tasks": []}).scope == EVERYTHING


def lift(held: Scope, resumed: Scope) -> Scope:
    return lifted_scope(Hold(scope=held, paused_by="ops"), resumed)


@pytest.mark.parametrize(
    ("held", "resumed", "rest"),
    [
        # a resume that contains the hold removes it
        (Scope.of(["a"]), EVERYTHING, NOTHING),
        (Scope.of(tasks=["x", "y"]), Scope.of(tasks=["x", "y", "z"]), NOTHING),
        (Scope.of(["q"], tasks=["x"]), Scope.of(tasks=["x"]), NOTHING),
        # one dimension listed by both loses the names resumed
        (Scope.of(["a", "b"]), Scope.of(["a"]), Scope.of(["b"])),
        (Scope.of(tasks=["x", "y"]), Scope.of(tasks=["x"]), Scope.of(tasks=["y"])),
        (
            Scope.of(["q"], tasks=["x", "y"], workers=["w1@h"]),
            Scope.of(tasks=["y"]),
            Scope.of(["q"], tasks=["x"], workers=["w1@h"]),
        ),
        # no overlap: untouched
        (Scope.of(["a"]), Scope.of(["b"]), Scope.of(["a"])),
        (Scope.of(tasks=["proj.billing.*"]), Scope.of(tasks=["proj.emails.send"]), None),
    ],
)
def test_a_partial_resume_removes_or_narrows_a_hold(
    held: Scope, resumed: Scope, rest: Scope | None
) -> None:
    assert lift(held, resumed) == (held if rest is None else rest)


@pytest.mark.parametrize(
    ("held", "resumed"),
    [
        (EVERYTHING, Scope.of(["a"])),  # every queue but one is no list of names
        (Scope.of(["a", "b"], tasks=["x", "y"]), Scope.of(["a"], tasks=["x"])),  # two dimensions
        (Scope.of(tasks=["proj.*"]), Scope.of(tasks=["proj.billing"])),  # a pattern but one name
        (Scope.of(tasks=["x"]), Scope.of(workers=["w1@h"])),  # every worker but one
    ],
)
def test_an_ambiguous_partial_resume_is_refused_saying_what_to_do(
    held: Scope, resumed: Scope
) -> None:
    with pytest.raises(InvalidInput, match="Resume its whole scope"):
        lift(held, resumed)


def test_a_breaker_without_queues_holds_exactly_the_tasks_that_use_it() -> None:
    # Given an app with two tasks that use a breaker and one that does not
    app = Celery("scopes", set_as_current=False)
    guarded = CircuitBreaker("api")
    pinned = CircuitBreaker("db", queues=["billing"])

    @app.task(name="proj.charge", base=BreakerTask, breaker=guarded, shared=False)
    def charge() -> None: ...

    @app.task(name="proj.refund", base=BreakerTask, breaker=guarded, shared=False)
    def refund() -> None: ...

    @app.task(name="proj.report", shared=False)
    def report() -> None: ...

    # Then its hold pauses those two tasks in every queue, and nothing else
    assert guarded.hold_scope(app) == Scope.of(tasks=["proj.charge", "proj.refund"])
    assert guarded.guards("any-queue")
    # And a breaker given queues keeps pausing those queues
    assert pinned.hold_scope(app) == Scope.of(["billing"])
    assert pinned.guards("billing") and not pinned.guards("emails")
