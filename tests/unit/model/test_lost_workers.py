"""Lost workers in a wait, as pure rules: when one surely fenced itself, which of a wait's
reports were lost before they confirmed, and what the CLI says of them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from celery_pause.api.results import PauseResult
from celery_pause.cli.live import confirmed_line, fenced_text, lost_lines
from celery_pause.model.report import APPLIED, STARTING, WorkerReport, fenced, unconfirmed
from celery_pause.model.scope import EVERYTHING
from celery_pause.model.state import Hold

TTL, LEASE = 10.0, 10.0
GENERATION = 7


def report(name: str = "w1@host", **fields: object) -> WorkerReport:
    values: dict[str, object] = {
        "hostname": name,
        "pid": 1,
        "status": APPLIED,
        "generation": GENERATION,
        "paused": None,
    }
    values.update(fields)
    return WorkerReport(**values)  # type: ignore[arg-type]


def paused(*workers: WorkerReport, start_at: float | None = None) -> PauseResult:
    hold = Hold(scope=EVERYTHING, paused_at=1000.0, start_at=start_at)
    return PauseResult(hold, GENERATION, (), workers=workers)


@pytest.mark.parametrize(
    ("silent", "waited", "lease", "expected"),
    [
        (0.0, 60.0, LEASE, False),  # reporting: never fenced
        (TTL + 1, 60.0, LEASE, False),  # lost, but maybe about to report again
        (TTL + LEASE, 60.0, LEASE, False),  # exactly at the bound: not yet
        (TTL + LEASE + 0.1, 60.0, LEASE, True),
        (500.0, LEASE - 0.1, LEASE, False),  # silent long, but the wait began too recently
        (500.0, LEASE, LEASE, True),
        (500.0, 60.0, None, False),  # no lease: a worker never fences
    ],
)
def test_a_lost_worker_is_fenced_once_silent_past_ttl_and_lease_and_a_lease_into_the_wait(
    silent: float, waited: float, lease: float | None, expected: bool
) -> None:
    # Given a worker's report, silent that long, in a wait that lasted ``waited`` seconds
    lost = report(silent=silent)

    # Then it counts as fenced exactly when both bounds are passed (and there is a lease)
    assert fenced(lost, ttl=TTL, lease=lease, waited=waited) is expected


def test_unconfirmed_names_the_silent_workers_that_did_not_confirm() -> None:
    # Given a wait's reports: confirmed, confirmed then silent, silent before confirming,
    # silent while starting, silent with a generation from before a repair, busy and live
    confirmed = report("a@h")
    quiet_then_silent = report("b@h", silent=30.0)
    behind = report("c@h", generation=GENERATION - 1, silent=30.0)
    starting = report("d@h", status=STARTING, silent=30.0)
    repaired = report("e@h", generation=GENERATION + 40, silent=30.0)
    running = report("f@h", running=("t1",), silent=30.0)
    workers = [confirmed, quiet_then_silent, behind, starting, repaired, running]

    # Then only those that stopped reporting before they confirmed are unconfirmed
    assert unconfirmed(workers, GENERATION) == (behind, starting, repaired, running)


def test_a_scheduled_pause_is_confirmed_only_by_a_read_from_its_start() -> None:
    # Given a silent worker that applied the generation, but read it before the start
    early = report(as_of=1500.0, silent=30.0)

    # Then for a pause starting at 2000 it is lost, for one starting at 1500 it confirmed
    assert paused(early, start_at=2000.0).lost == (early,)
    assert paused(early, start_at=1500.0).lost == ()


def test_the_confirmation_counts_lost_workers_apart() -> None:
    # Given a wait confirmed by two workers, one lost before it applied the pause
    lost = report("w3@lost", generation=GENERATION - 1, silent=21.4, active=2, reserved=5)
    result = paused(report("w1@h"), report("w2@h"), lost)

    # Then the confirmation counts it apart, and the lost lines name it with what it ran
    assert result.lost == (lost,)
    assert confirmed_line(result) == (
        "Confirmed by 2 of 3 workers, 1 lost contact and fenced itself: "
        "nothing in scope starts anywhere."
    )
    first, line, hint = lost_lines(result, "celery -A proj")
    assert first.startswith("lost contact with 1 worker before it confirmed the pause;")
    assert "it fenced itself and starts nothing" in first
    assert line == (
        "  w3@lost  lost contact 21s ago, before it applied the pause; "
        "it last reported 2 tasks running"
    )
    assert "--wait-for-lost" in hint and "`celery -A proj pause status`" in hint


def test_a_lost_worker_that_applied_the_pause_is_shown_with_its_tasks_in_scope() -> None:
    # Given a lost worker that applied the pause and was finishing two tasks of its scope
    lost = report(
        "w2@h",
        silent=25.0,
        running=("5c594ed1-aaaa", "6e4add66-bbbb"),
        running_names=("proj.import_csv", "proj.import_csv"),
        active=3,
    )

    # Then the text gives the full ids and names of the tasks it may still be finishing
    assert fenced_text(lost, GENERATION) == (
        "lost contact 25s ago; it last reported 3 tasks running (2 in the scope: "
        "proj.import_csv[5c594ed1-aaaa], proj.import_csv[6e4add66-bbbb])"
    )
    # ... and several lost workers are spoken of in the plural
    two = paused(lost, replace(lost, hostname="w3@h"))
    assert "with 2 workers before they confirmed" in lost_lines(two, "celery")[0]
    assert confirmed_line(two, "limit").endswith(
        "2 lost contact and fenced themselves: the limit is in force."
    )


def test_without_lost_workers_the_confirmation_reads_as_before() -> None:
    # Given a wait every worker confirmed
    result = paused(report("w1@h"), report("w2@h"))

    # Then nothing is lost, and the line is the usual one
    assert result.lost == ()
    assert confirmed_line(result) == "Confirmed by 2 workers: nothing in scope is running."
    assert (
        confirmed_line(paused(report()), "limit") == "Confirmed by 1 worker: the limit is in force."
    )
