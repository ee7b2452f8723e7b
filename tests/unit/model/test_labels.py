"""The label dimension as pure logic: what a label rule covers, its JSON, its checks."""

from __future__ import annotations

import pytest

from celery_pause.errors import ConfigurationError, InvalidInput
from celery_pause.model.lifting import lift_scope
from celery_pause.model.scope import EVERYTHING, Rule, Scope, Target, label_names, rule_from_json
from celery_pause.model.state import Hold, PauseState
from celery_pause.model.validation import check_labels, check_scope

NOW = 1_800_000_000.0


def at(queue: str = "default", task: str = "proj.report", **labels: str) -> Target:
    """A task of ``queue`` carrying ``labels``."""
    carried = tuple(f"{name}={value}" for name, value in labels.items())
    return Target(queue=queue, task=task, worker="w1@host", label=carried)


def test_a_label_rule_covers_the_tasks_that_carry_a_matching_label() -> None:
    # Given holds on tenant acme, and on every trial tenant's reports
    acme = Scope.of(labels=["tenant=acme"])
    trials = Scope.of(tasks=["proj.report"], labels=["tenant=trial-*"])

    # Then each covers the tasks carrying a label it lists (exact or by pattern) ...
    assert acme.covers(at(tenant="acme"))
    assert acme.covers(at(tenant="acme", region="eu"))  # one of several labels
    assert not acme.covers(at(tenant="acme-2"))
    assert trials.covers(at(tenant="trial-42"))
    assert not trials.covers(at(task="proj.other", tenant="trial-42"))
    # ... never a task without the label, nor one whose labels were not read
    assert not acme.covers(at())
    assert not acme.covers(Target(queue="default", task="proj.report", worker="w1@host"))
    # ... nor a whole queue: it touches it, and drains nothing
    assert not acme.covers(Target(queue="default", worker="w1@host"))
    assert acme.touches(Target(queue="default", worker="w1@host"))
    assert not acme.drains("default", "w1@host")
    # ... and the gate reads only the labels some rule lists
    assert label_names(acme | trials) == {"tenant"}
    assert label_names(EVERYTHING) == frozenset()


def test_label_rules_join_intersect_and_read_as_json() -> None:
    # Given a hold with a label, and one from before labels existed
    rule = Rule(queues=frozenset({"a"}), labels=frozenset({"tenant=acme"}))
    old = {"queues": ["a"], "tasks": None, "workers": None}

    # Then its JSON names the labels, and a rule without any reads as before (no key)
    assert rule.to_json() == {
        "queues": ["a"], "tasks": None, "workers": None, "labels": ["tenant=acme"],
    }  # fmt: skip
    assert "labels" not in Rule(queues=frozenset({"a"})).to_json()
    assert rule_from_json(rule.to_json()) == rule
    assert rule_from_json(old) == Rule(queues=frozenset({"a"}))
    # ... a hold with it round-trips, and it describes itself
    hold = Hold(scope=Scope(frozenset({rule})), paused_at=NOW)
    (back,) = PauseState.decode(PauseState(generation=1, holds=(hold,)).encode()).holds
    assert back == hold
    assert rule.describe() == "queue a with label tenant=acme"
    # ... and an intersection keeps the labels both cover
    wide = Scope.of(labels=["tenant=*"])
    assert (wide & Scope.of(labels=["tenant=acme"])).covers(at(tenant="acme"))
    assert not (Scope.of(labels=["tenant=a"]) & Scope.of(labels=["tenant=b"]))


def test_a_label_is_resumed_like_any_other_dimension() -> None:
    # Given tenant acme paused
    state = PauseState(generation=1, holds=(Hold(scope=Scope.of(labels=["tenant=acme"])),))

    # When acme is resumed, Then nothing is paused
    lifted = lift_scope(state, NOW, Scope.of(labels=["tenant=acme"]), force=False, windows=())
    assert lifted.value is not None and not lifted.value.paused(NOW)
    # ... but resuming another tenant leaves it paused
    other = lift_scope(state, NOW, Scope.of(labels=["tenant=other"]), force=False, windows=())
    assert other.value is None or other.value.paused(NOW).covers(at(tenant="acme"))


@pytest.mark.parametrize(
    ("labels", "says"),
    [
        (["tenant"], "label must be NAME=VALUE, got 'tenant'"),
        (["=acme"], "label must be NAME=VALUE"),
        (["tenant="], "label must be NAME=VALUE"),
        (["tenant= "], "label must be NAME=VALUE"),
        (["tenant=" + "x" * 300], "longer than 200"),
        (["tenant=a\x1b[2J"], "printable"),
    ],
)
def test_a_bad_label_is_refused(labels: list[str], says: str) -> None:
    with pytest.raises(InvalidInput, match=says.replace("[", r"\[")):
        check_scope({"labels": labels})


def test_pause_labels_settings_are_checked() -> None:
    assert check_labels("pause_labels", {"tenant": "tenant_id"}) == {"tenant": "tenant_id"}
    assert check_labels("pause_labels", ["tenant"]) == {"tenant": "tenant"}
    assert check_labels("pause_labels", None) == {}
    for bad in ({"ten ant": "x"}, {"tenant": "not an arg"}, {"tenant": 5}, "tenant"):
        with pytest.raises(ConfigurationError, match="pause_labels"):
            check_labels("pause_labels", bad, error=ConfigurationError)
