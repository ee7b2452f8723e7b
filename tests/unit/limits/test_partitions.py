"""The partitions of a limit per label on one worker: made on first sight, forgotten when idle."""

from __future__ import annotations

from typing import cast

from celery.worker.request import Request

from celery_pause.limits.partitions import Partitions
from celery_pause.model.limit import Limit
from celery_pause.model.limit_keys import partition_id
from celery_pause.model.scope import Scope, Target
from celery_pause.model.state import Hold

HOLD = Hold(
    id="h1", scope=Scope.of(tasks=["proj.imports.*"]), limit=Limit(concurrency=2, per="tenant")
)


def target(task: str, *labels: str) -> Target:
    return Target(queue="celery", task=task, worker="w1@host", label=labels or None)


def test_each_value_gets_a_partition_of_its_own_and_keeps_it() -> None:
    partitions = Partitions(HOLD)
    acme = partitions.of(target("proj.imports.csv", "region=eu", "tenant=acme"))
    beta = partitions.of(target("proj.imports.csv", "tenant=beta"))
    assert acme is not None and beta is not None and acme is not beta
    assert (acme.id, acme.value, acme.family) == (partition_id("h1", "acme"), "acme", "h1")
    assert acme.limit == HOLD.limit
    assert partitions.of(target("proj.imports.xml", "tenant=acme")) is acme
    assert len(partitions.members()) == 2


def test_a_task_outside_the_scope_or_without_the_label_is_not_limited() -> None:
    partitions = Partitions(HOLD)
    assert partitions.of(target("proj.reports.pdf", "tenant=acme")) is None
    assert partitions.of(target("proj.imports.csv")) is None
    assert partitions.of(target("proj.imports.csv", "region=eu")) is None
    assert partitions.members() == []


def test_only_idle_partitions_unused_long_enough_are_forgotten() -> None:
    partitions = Partitions(HOLD)
    acme = partitions.of(target("proj.imports.csv", "tenant=acme"))
    beta = partitions.of(target("proj.imports.csv", "tenant=beta"))
    assert acme is not None and beta is not None
    assert partitions.prune(idle=60) == [], "a partition just used is kept"
    beta.wait(cast(Request, object()))  # a request of beta waits
    forgotten = partitions.prune(idle=0)
    assert forgotten == [acme] and partitions.members() == [beta]
    again = partitions.of(target("proj.imports.csv", "tenant=acme"))
    assert again is not None and again is not acme and again.id == acme.id


def test_only_partitions_in_use_are_looked_at() -> None:
    # Given two partitions seen, a request of one waiting
    partitions = Partitions(HOLD)
    acme = partitions.of(target("proj.imports.csv", "tenant=acme"))
    beta = partitions.of(target("proj.imports.csv", "tenant=beta"))
    assert acme is not None and beta is not None
    assert partitions.active() == []
    beta.wait(cast(Request, object()))

    # Then only that one is in use, until nothing waits for it
    assert partitions.active() == [beta]
    beta.clear_waiting()
    assert partitions.active() == []

    # When a request waits again, Then it is in use again
    beta.wait(cast(Request, object()))
    assert partitions.active() == [beta] and len(partitions.members()) == 2
