"""Every pause and resume lands in a bounded history in the store."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

import celery_pause
from celery_pause.history import HistoryEntry, expiries, format_history
from celery_pause.model.scope import Scope
from celery_pause.stores import store_for
from celery_pause.stores.base import Store
from support.harness import REDIS_BROKER, Cluster, wait_for


@pytest.fixture
def history_cluster(redis_url: str, tmp_path: Path) -> Iterator[Cluster]:
    cluster = Cluster(broker=REDIS_BROKER, tmp=tmp_path, pause_history_size=4)
    yield cluster
    cluster.close()


def test_pauses_and_resumes_are_recorded_with_who_what_when_why(history_cluster: Cluster) -> None:
    # Given a cluster with no history
    app = history_cluster.app
    assert celery_pause.history(app) == []

    # When an operator pauses one queue, another forces a pause of all, and a resume follows
    first = celery_pause.pause(app, queues=["emails"], reason="smtp down", by="ann@ops")
    forced = celery_pause.pause(app, reason="deploy", by="bob@ops", force=True)
    resumed = celery_pause.resume(app, by="cy@ops")

    # Then the history says each, newest first
    newest, middle, oldest = celery_pause.history(app)
    assert (oldest.action, oldest.by, oldest.reason, oldest.scope.names()) == (
        "pause",
        "ann@ops",
        "smtp down",
        ["emails"],
    )
    assert (oldest.source, oldest.generation, oldest.holds) == (
        "manual",
        first.generation,
        (first.hold.id,),
    )
    assert oldest.at == first.hold.paused_at
    assert (middle.action, middle.by, middle.scope.names(), middle.forced) == (
        "pause",
        "bob@ops",
        None,
        True,
    )
    assert middle.ended == (first.hold.id,)
    assert (newest.action, newest.by, newest.scope.names(), newest.generation) == (
        "resume",
        "cy@ops",
        None,
        resumed.generation,
    )
    assert newest.ended == (forced.hold.id,)

    # ... and the formatted history shows it for a terminal
    text = format_history(celery_pause.history(app))
    lines = text.splitlines()
    assert lines[0] == "History (newest first):"
    assert "resume" in lines[1] and "by cy@ops" in lines[1]
    assert "'deploy'" in lines[2] and "(forced)" in lines[2]
    assert "emails" in lines[3] and "'smtp down'" in lines[3] and "by ann@ops" in lines[3]


def test_a_resume_that_lifts_nothing_is_not_recorded(history_cluster: Cluster) -> None:
    # When there is nothing to resume
    celery_pause.resume(history_cluster.app)

    # Then nothing is recorded
    assert celery_pause.history(history_cluster.app) == []


def test_the_history_keeps_only_the_newest_entries(history_cluster: Cluster) -> None:
    # Given pause_history_size = 4, When six changes are made
    for n in range(3):
        celery_pause.pause(history_cluster.app, reason=f"round {n}")
        celery_pause.resume(history_cluster.app)

    # Then the newest four are kept
    entries = celery_pause.history(history_cluster.app)
    assert [(e.action, e.reason) for e in entries] == [
        ("resume", None),
        ("pause", "round 2"),
        ("resume", None),
        ("pause", "round 1"),
    ]
    assert [e.action for e in celery_pause.history(history_cluster.app, limit=1)] == ["resume"]


def test_an_auto_resume_shows_as_an_expiry(history_cluster: Cluster) -> None:
    # Given a pause that resumes itself after a second
    result = celery_pause.pause(history_cluster.app, reason="short", resume_after=1.0)
    assert [e.action for e in celery_pause.history(history_cluster.app)] == ["pause"]

    # When the second has passed, Then the history shows the expiry at resume_at
    entries = wait_for(
        lambda: (h := celery_pause.history(history_cluster.app)) and len(h) == 2 and h,
        timeout=20,
        what="the expiry to show",
    )
    assert [e.action for e in entries] == ["expire", "pause"]
    assert entries[0].at == result.hold.resume_at
    assert entries[0].holds == (result.hold.id,)


def test_a_failing_history_does_not_fail_the_pause(
    history_cluster: Cluster, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a store that cannot keep logs
    def refuse(self: Store, *args: object, **kwargs: object) -> None:
        raise NotImplementedError("no logs here")

    store = store_for(history_cluster.app)
    monkeypatch.setattr(type(store), "append_log", refuse)
    # (an in-process worker of another test may have left the root logger at ERROR)
    caplog.set_level(logging.WARNING, logger="celery_pause.history")

    # When the cluster is paused, Then the pause holds and the failure is logged
    result = celery_pause.pause(history_cluster.app, reason="still works")
    assert celery_pause.status(history_cluster.app).paused
    assert result.hold.reason == "still works"
    assert "could not record pause in the history" in caplog.text


def test_unreadable_entries_are_listed_as_such() -> None:
    # Given an entry that lost its fields, When it is decoded
    entry = HistoryEntry.from_json({"unreadable": "Expecting value"})

    # Then it says so instead of vanishing
    assert entry.action == "unreadable"
    assert "Expecting value" in (entry.reason or "")
    assert "unreadable" in format_history([entry])


def test_an_expiry_keeps_every_dimension_of_the_pause_it_ends() -> None:
    # Given a recorded pause of one task type on one worker that ran out
    paused = HistoryEntry(
        action="pause",
        at=1.0,
        scope=Scope.of(tasks=["proj.charge"], workers=["w1@h"]),
        resume_at=2.0,
        holds=("h",),
    )

    # When the history is read after its end, Then the expiry names the same scope
    (expired,) = expiries([paused], now=3.0)
    assert (expired.action, expired.at) == ("expire", 2.0)
    assert expired.scope.describe() == "task proj.charge on worker w1@h"
