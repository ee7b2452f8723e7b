"""Scheduled pauses and maintenance windows through the CLI and the API, on a real Redis
store (no worker needed: what is recorded, shown, cancelled and refused)."""

from __future__ import annotations

import json
import math
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery
from celery.schedules import crontab, schedule

import celery_pause
from celery_pause import AlreadyPaused, ConfigurationError, InvalidInput, InvalidWindow
from celery_pause.history import CANCEL, history
from celery_pause.model.scope import Scope
from celery_pause.model.state import Hold
from celery_pause.stores import store_for
from support.admin import AUTH, admin_server
from support.cli import invoke, pause, resume, status_doc
from support.harness import Cluster
from support.probes import StandIn, get
from support.probes import view as probe_view
from support.proj import make_app
from support.webclient import call


def ahead(hours: float) -> str:
    """A local ISO 8601 time ``hours`` from now, as an operator types it."""
    return (datetime.now() + timedelta(hours=hours)).replace(microsecond=0).isoformat()


def windowed(redis_cluster: Cluster, *windows: dict[str, Any], **conf: Any) -> Celery:
    """An app of ``redis_cluster``'s namespace with ``pause_windows`` set."""
    return make_app(
        namespace=redis_cluster.namespace,
        broker=redis_cluster.broker,
        store=redis_cluster.store_url,
        pause_windows=list(windows),
        **conf,
    )


def test_a_scheduled_pause_is_shown_kept_by_a_scope_resume_and_cancelled_by_id(
    redis_cluster: Cluster,
) -> None:
    # When a pause is scheduled for tomorrow, for an hour, with beat skipping
    start = ahead(24)
    done = pause(
        redis_cluster,
        "-Q",
        "reports",
        "--start-at",
        start,
        "--resume-after",
        "1h",
        "--beat",
        "skip",
    )
    assert done.exit_code == 0, done.output
    assert "Scheduled a pause of queue reports from " in done.stdout
    assert "Beat skips the periodic tasks" in done.stdout

    # Then nothing is paused yet, and status shows it as scheduled, with its id
    doc = status_doc(redis_cluster)
    (hold,) = doc["scheduled"]
    assert (doc["state"], doc["holds"]) == ("RUNNING", [])
    assert hold["queues"] == ["reports"] and hold["beat"] == "skip"
    assert hold["resume_at"] - hold["start_at"] == 3600
    assert hold["start_at"] == datetime.fromisoformat(start).astimezone().timestamp()
    text = pause(redis_cluster, "status").stdout
    assert "Scheduled (cancel one with `resume --hold ID`):" in text
    assert f"lasts 1 hour  beat skips  id {hold['id']}" in text

    # When the queue is resumed by scope, Then the scheduled pause stays
    kept = resume(redis_cluster, "-Q", "reports")
    assert kept.exit_code == 0 and "Still scheduled" in kept.stdout
    assert len(status_doc(redis_cluster)["scheduled"]) == 1

    # When it is cancelled by its id, Then it is gone, and the history says so
    cancelled = resume(redis_cluster, "--hold", hold["id"])
    assert cancelled.exit_code == 0, cancelled.output
    assert "before it started" in cancelled.stdout
    assert status_doc(redis_cluster)["scheduled"] == []
    assert [e.action for e in history(redis_cluster.app)][:2] == [CANCEL, "pause"]


def test_scheduled_pauses_conflict_only_when_they_overlap_in_time(redis_cluster: Cluster) -> None:
    # Given a maintenance pause scheduled from tomorrow for an hour
    now = store_for(redis_cluster.app).now()
    celery_pause.pause(redis_cluster.app, queues=["q"], start_at=now + 86400, resume_after=3600)

    # When an hour's pause of the same queue starts now, Then both are recorded
    celery_pause.pause(redis_cluster.app, queues=["q"], resume_after=3600)
    # When an open-ended one is asked for, Then it overlaps the scheduled one: refused
    with pytest.raises(AlreadyPaused):
        celery_pause.pause(redis_cluster.app, queues=["q"])
    status = celery_pause.status(redis_cluster.app)
    assert (len(status.holds), len(status.scheduled)) == (1, 1)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--start-at", "2001-01-01T00:00"), "is in the past"),
        (("--start-at", ahead(2), "--resume-at", ahead(1)), "must come after --start-at"),
        (("--beat", "maybe"), "'maybe' is not one of 'queue', 'skip'"),
    ],
)
def test_bad_schedules_are_usage_errors_that_change_nothing(
    redis_cluster: Cluster, args: tuple[str, ...], message: str
) -> None:
    done = pause(redis_cluster, *args)
    assert done.exit_code == 2 and message in done.output
    assert status_doc(redis_cluster)["generation"] == 0


def test_the_api_judges_start_times_by_the_store_clock(redis_cluster: Cluster) -> None:
    now = store_for(redis_cluster.app).now()
    with pytest.raises(InvalidInput, match=r"start_at .* is not in the future"):
        celery_pause.pause(redis_cluster.app, start_at=now - 1)
    with pytest.raises(InvalidInput, match="is not after start_at"):
        celery_pause.pause(redis_cluster.app, start_at=now + 60, resume_at=now + 30)
    with pytest.raises(InvalidInput, match="beat must be"):
        celery_pause.pause(redis_cluster.app, beat="later")
    assert celery_pause.status(redis_cluster.app).state.generation == 0


def test_resume_by_id_refuses_what_it_cannot_find(redis_cluster: Cluster) -> None:
    assert resume(redis_cluster, "--hold", "nope").exit_code == 2
    done = resume(redis_cluster, "--hold", "abc", "-Q", "q")
    assert done.exit_code == 2 and "without -Q" in done.output


# -- maintenance windows -------------------------------------------------------------------
NIGHTLY = {
    "name": "nightly",
    "schedule": crontab(hour=2, minute=0),
    "duration": 3600,
    "queues": ["reports"],
    "reason": "backup",
    "beat": "skip",
}


def test_a_window_shows_its_next_occurrence_and_an_operator_can_skip_it(
    redis_cluster: Cluster,
) -> None:
    # Given a daily window for an hour, starting three hours from now (UTC, on the hour)
    now = store_for(redis_cluster.app).now()
    moment = datetime.fromtimestamp(now, tz=timezone.utc) + timedelta(hours=3)
    first = moment.replace(minute=0, second=0, microsecond=0).timestamp()
    app = windowed(redis_cluster, {**NIGHTLY, "schedule": crontab(hour=moment.hour, minute=0)})

    # Then status shows it, and its next occurrence as a scheduled hold
    doc = json.loads(invoke(app, celery_pause.cli.pause, "status", "--json").stdout)
    (window,) = doc["windows"]
    assert (window["name"], window["in_force"], window["beat"]) == ("nightly", None, "skip")
    assert window["next"]["start_at"] == first and window["next"]["resume_at"] == first + 3600
    assert [h["id"] for h in doc["scheduled"]] == [f"window:nightly:{int(first)}"]
    text = invoke(app, celery_pause.cli.pause, "status").stdout
    assert f"Windows:\n  nightly  queue reports  1 hour on <crontab: 0 {moment.hour} * * *" in text

    # When an operator skips the next occurrence
    skipped = invoke(app, celery_pause.cli.resume, "--hold", "window:nightly")
    assert skipped.exit_code == 0, skipped.output

    # Then the one after is next, the marker is in the state, and the history says so
    status = celery_pause.status(app)
    assert [h.began for h in status.scheduled] == [first + 86400]
    assert status.state.skipped_until("nightly") == first + 3600
    entry = history(app)[0]
    assert (entry.action, entry.source, entry.holds) == (
        CANCEL,
        "window:nightly",
        (f"window:nightly:{int(first)}",),
    )


class NeverFires:
    """A schedule whose next run is ten years away."""

    def remaining_estimate(self, last_run_at: datetime) -> timedelta:
        return timedelta(days=3650)

    def is_due(self, last_run_at: datetime) -> tuple[bool, float]:
        return False, 3650 * 86400.0


@pytest.mark.parametrize(
    ("windows", "message"),
    [
        (
            [{**NIGHTLY, "schedule": crontab(minute="*/10"), "duration": 601}],
            "duration 601s is longer than its period (600s",
        ),
        ([{**NIGHTLY, "schedule": NeverFires()}], "never fires"),
        (
            [
                NIGHTLY,
                {**NIGHTLY, "name": "hourly", "schedule": crontab(minute=30), "beat": "queue"},
            ],
            "overlap in scope and time",
        ),
        ([{**NIGHTLY, "queue": ["reports"]}], "unknown key(s) queue"),
        ([{**NIGHTLY, "schedule": "2am"}], "schedule must be a Celery schedule"),
        ([{**NIGHTLY, "duration": "soon"}], "not a duration"),
        ([NIGHTLY, NIGHTLY], "two windows are named 'nightly'"),
    ],
)
def test_unusable_windows_are_refused_with_exit_code_2(
    redis_cluster: Cluster, windows: list[dict[str, Any]], message: str
) -> None:
    app = windowed(redis_cluster, *windows)
    with pytest.raises(InvalidWindow) as caught:
        celery_pause.status(app)
    assert message in str(caught.value)
    done = invoke(app, celery_pause.cli.pause, "-Q", "x")
    assert done.exit_code == 2 and message in done.output
    assert celery_pause.status(redis_cluster.app).state.generation == 0


def test_windows_that_never_meet_may_differ_in_beat(redis_cluster: Cluster) -> None:
    # Given two windows on one queue, at 02:00 and at 14:00, skipping and queueing
    evening = {**NIGHTLY, "name": "evening", "schedule": crontab(hour=14, minute=0)}
    app = windowed(redis_cluster, NIGHTLY, {**evening, "beat": "queue"})
    # Then both are accepted
    assert [w.window.name for w in celery_pause.api.document.overview(app).windows] == [
        "nightly",
        "evening",
    ]


def test_a_period_schedule_counts_from_the_epoch(redis_cluster: Cluster) -> None:
    app = windowed(
        redis_cluster, {"name": "tenth", "schedule": schedule(run_every=600), "duration": 60}
    )
    status = celery_pause.status(app)
    (upcoming,) = status.scheduled
    assert upcoming.began % 600 == 0 and upcoming.began - status.now <= 600
    assert math.isclose(upcoming.resume_at or 0, upcoming.began + 60)


# -- the admin API and the metrics -------------------------------------------------------
def test_the_admin_api_schedules_shows_and_cancels_a_pause(redis_cluster: Cluster) -> None:
    # Given the admin API
    with admin_server(redis_cluster.app) as url:
        # When a pause is scheduled over HTTP with beat skipping
        start = datetime.now(timezone.utc) + timedelta(hours=2)
        body = {"queues": "reports", "start_at": start.isoformat(), "beat": "skip"}
        reply = call(url + "/pause", method="POST", body=body, headers=AUTH)
        assert reply.status == 200, reply
        hold = reply.json()["hold"]
        assert (hold["start_at"], hold["beat"]) == (start.timestamp(), "skip")

        # Then /status lists it as scheduled
        doc = call(url + "/status", headers=AUTH).json()
        assert [h["id"] for h in doc["scheduled"]] == [hold["id"]] and doc["holds"] == []

        # When it is cancelled by id, Then it is gone
        reply = call(url + "/resume", method="POST", body={"hold": hold["id"]}, headers=AUTH)
        assert reply.status == 200 and [h["id"] for h in reply.json()["cancelled"]] == [hold["id"]]
        assert call(url + "/status", headers=AUTH).json()["scheduled"] == []

        # And a start in the past is a 400 that changes nothing
        past = {"start_at": "2001-01-01T00:00:00Z"}
        assert call(url + "/pause", method="POST", body=past, headers=AUTH).status == 400


def test_metrics_count_scheduled_holds_by_source() -> None:
    # Given a worker that knows a scheduled manual hold and a window's next occurrence
    now = time.time()
    scheduled = (
        Hold(scope=Scope.of(["a"]), start_at=now + 60, resume_at=now + 120),
        Hold(scope=Scope.of(["a"]), source="window:nightly", start_at=now + 600),
    )
    monitor = StandIn(probe_view(scheduled=scheduled))

    # When /metrics is scraped, Then each source is counted and the next start is near
    text = get(monitor, "/metrics").body.decode()
    assert 'celery_pause_scheduled_holds{source="manual"} 1.0' in text
    assert 'celery_pause_scheduled_holds{source="window:nightly"} 1.0' in text
    (line,) = [x for x in text.splitlines() if x.startswith("celery_pause_next_scheduled_start")]
    assert 55 < float(line.split()[-1]) <= 60


def test_the_beat_default_setting_applies_to_pauses_and_is_checked(redis_cluster: Cluster) -> None:
    app = make_app(
        namespace=redis_cluster.namespace,
        broker=redis_cluster.broker,
        store=redis_cluster.store_url,
        pause_beat_default="skip",
    )
    assert celery_pause.pause(app, queues=["q"]).hold.beat == "skip"
    assert celery_pause.pause(app, queues=["r"], beat="queue").hold.beat == "queue"
    wrong = make_app(
        namespace=redis_cluster.namespace,
        broker=redis_cluster.broker,
        store=redis_cluster.store_url,
        pause_beat_default=1,
    )
    with pytest.raises(ConfigurationError, match="pause_beat_default must be 'queue' or 'skip'"):
        celery_pause.status(wrong)
