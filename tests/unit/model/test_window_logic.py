"""Scheduled holds, beat policies, skip markers and window occurrences: pure logic."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from celery import Celery
from celery.schedules import crontab, schedule

from celery_pause.errors import InvalidWindow
from celery_pause.model.lifting import lift_hold, lift_scope
from celery_pause.model.limit import Limit
from celery_pause.model.recurrence import next_start
from celery_pause.model.scope import Scope, Target
from celery_pause.model.state import UNREADABLE, Hold, PauseState
from celery_pause.model.windows import Window, parse_windows, with_windows

APP = Celery("window-logic", set_as_current=False)
DAY = 86400.0


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp()


def test_a_scheduled_hold_pauses_only_from_its_start_and_is_read_again_then() -> None:
    # Given a hold from t=100 to t=160, placed at t=0
    hold = Hold(scope=Scope.of(["q"]), paused_at=0, start_at=100, resume_at=160)
    state = PauseState(holds=(hold,))

    # Then before its start it is scheduled, not active; from its start until its end active
    assert not state.paused(99.9) and state.scheduled_holds(99.9) == (hold,)
    assert state.paused(100).covers(Target(queue="q")) and state.scheduled_holds(100) == ()
    assert not state.paused(160) and state.live_holds(160) == ()
    # And the next change is its start, then its end, then nothing
    assert [state.next_change(t) for t in (0, 100, 160)] == [100, 160, None]
    assert hold.began == 100


def test_start_beat_and_skips_round_trip_and_bad_ones_hold_everything() -> None:
    state = PauseState(
        generation=3,
        holds=(Hold(scope=Scope.of(["q"]), start_at=5.0, resume_at=9.0, beat="skip"),),
        skips=(("nightly", 42.0),),
    )
    assert PauseState.decode(state.encode()) == state
    doc = json.loads(state.encode())
    for broken in ({"skips": {"nightly": "soon"}}, {"skips": ["nightly"]}):
        assert PauseState.decode(json.dumps({**doc, **broken})).holds[0].id == UNREADABLE
    bad_beat = {**doc, "holds": [{**doc["holds"][0], "beat": "sometimes"}]}
    (hold,) = PauseState.decode(json.dumps(bad_beat)).holds
    assert (hold.id, hold.scope.everything) == (UNREADABLE, True)


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        ("2027-01-15 01:59:59", "2027-01-15 02:00:00"),
        ("2027-01-15 02:00:00", "2027-01-16 02:00:00"),
        ("2027-01-15 02:00:30", "2027-01-16 02:00:00"),
    ],
)
def test_a_crontab_fires_strictly_after_a_time(after: str, expected: str) -> None:
    nightly = crontab(hour=2, minute=0, app=APP)
    assert next_start(nightly, at(after)) == at(expected)


def test_a_period_counts_whole_periods_from_the_epoch() -> None:
    every = schedule(run_every=600, app=APP)
    assert next_start(every, at("2027-01-15 10:04:59")) == at("2027-01-15 10:10:00")
    assert next_start(every, at("2027-01-15 10:10:00")) == at("2027-01-15 10:20:00")


def window(beat: str = "queue") -> Window:
    nightly = crontab(hour=2, minute=0, app=APP)
    return Window("nightly", nightly, 3600.0, Scope.of(["reports"]), "backup", beat)


def test_occurrences_in_force_and_next_and_skipped() -> None:
    nightly = window("skip")
    # At 02:30 the night's occurrence is in force, the next is tomorrow's
    current, upcoming = nightly.current_and_next(None, at("2027-01-15 02:30:00"))
    assert current is not None and upcoming is not None
    assert (current.began, current.resume_at) == (
        at("2027-01-15 02:00:00"),
        at("2027-01-15 03:00:00"),
    )
    assert (current.source, current.beat, current.id) == (
        "window:nightly",
        "skip",
        f"window:nightly:{int(at('2027-01-15 02:00:00'))}",
    )
    assert upcoming.began == at("2027-01-16 02:00:00")
    # At 03:00 it ended; skipped until 03:00, no occurrence is in force at 02:30
    assert nightly.current_and_next(None, at("2027-01-15 03:00:00"))[0] is None
    skipped, following = nightly.current_and_next(
        at("2027-01-15 03:00:00"), at("2027-01-15 02:30:00")
    )
    assert skipped is None and following is not None and following.began == upcoming.began
    # Skipping the next two nights leaves the third next
    _, third = nightly.current_and_next(at("2027-01-17 03:00:00"), at("2027-01-15 12:00:00"))
    assert third is not None and third.began == at("2027-01-18 02:00:00")


def test_windows_join_the_state_read_and_are_lifted_by_markers_only() -> None:
    # Given a stored state with no hold, at 02:30 of a window's night
    now = at("2027-01-15 02:30:00")
    stored = PauseState(generation=4)
    in_force = with_windows(stored, [window()], now)
    assert in_force.paused(now).covers(Target(queue="reports")) and in_force.generation == 4

    # When the current occurrence is lifted by its window's name
    lifted = lift_hold(stored, now, "window:nightly", force=False, windows=[window()])
    changed = lifted.value
    assert changed is not None

    # Then only a marker is written, and the window no longer pauses until tomorrow
    assert changed.holds == () and changed.skipped_until("nightly") == at("2027-01-15 03:00:00")
    assert not with_windows(changed, [window()], now).paused(now)
    assert [h.began for h in lifted.result.removed] == [at("2027-01-15 02:00:00")]
    assert (
        with_windows(changed, [window()], now + DAY)
        .paused(now + DAY)
        .covers(Target(queue="reports"))
    )

    # And a resume by scope leaves the window alone unless forced
    assert (
        lift_scope(stored, now, Scope.of(["reports"]), force=False, windows=[window()]).value
        is None
    )
    forced = lift_scope(stored, now, Scope.of(), force=True, windows=[window()]).value
    assert forced is not None and forced.skipped_until("nightly") == at("2027-01-15 03:00:00")


def test_a_window_with_a_rate_limits_its_scope_instead_of_pausing_it() -> None:
    # Given a window that limits exports to 2/s and 3 at once during business hours
    (hours,) = parse_windows(
        [
            {
                "name": "business-hours",
                "schedule": crontab(hour=9, minute=0, app=APP),
                "duration": "8h",
                "tasks": ["proj.exports.*"],
                "rate": "2/s",
                "concurrency": 3,
            }
        ],
        APP,
        "queue",
    )
    assert hours.limit == Limit(rate=2.0, concurrency=3)

    # When the state is read at 10:00, in its occurrence
    now = at("2027-01-15 10:00:00")
    in_force = with_windows(PauseState(generation=1), [hours], now)

    # Then its occurrence limits the exports (as a limit, not a pause) and says so in JSON
    (occurrence,) = in_force.limits(now)
    assert occurrence.source == "window:business-hours" and occurrence.limit == hours.limit
    assert not in_force.paused(now)
    assert hours.to_json()["rate"] == 2.0 and hours.to_json()["concurrency"] == 3
    assert "per" not in hours.to_json()
    (each,) = parse_windows(
        [{"name": "each", "schedule": 3600, "duration": 60, "concurrency": 1, "per": "tenant"}],
        APP,
        "queue",
    )
    assert each.limit == Limit(concurrency=1, per="tenant") and each.to_json()["per"] == "tenant"
    # ... and a window may pause one tenant: its occurrences hold that label's scope
    (trial,) = parse_windows(
        [{"name": "trial", "schedule": 3600, "duration": 60, "labels": ["tenant=trial-*"]}],
        APP,
        "queue",
    )
    assert trial.scope.rule.labels == {"tenant=trial-*"}
    assert trial.to_json()["labels"] == ["tenant=trial-*"]
    # ... and at 18:00 it is over: nothing limits
    assert (
        with_windows(PauseState(generation=1), [hours], at("2027-01-15 18:00:00")).limits(
            at("2027-01-15 18:00:00")
        )
        == ()
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"rate": "ten"}, "not a rate"),
        ({"rate": "0/s"}, "rate must be above 0"),
        ({"concurrency": 0}, "concurrency must be a whole number"),
        ({"rate": "2/s", "beat": "skip"}, "beat 'skip' goes with a pause"),
        ({"per": "tenant"}, "per goes with a rate or a concurrency"),
        ({"concurrency": 2, "per": "tenant=acme"}, "per must name a label"),
    ],
)
def test_a_window_with_a_bad_limit_is_refused(extra: dict[str, object], message: str) -> None:
    entry = {"name": "w", "schedule": crontab(hour=9, minute=0, app=APP), "duration": 60, **extra}
    with pytest.raises(InvalidWindow, match=message):
        parse_windows([entry], APP, "queue")
