"""What the CLI prints, as pure functions: status text and JSON, outcomes, progress, options."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import click
import pytest
from celery import Celery

from celery_pause.api.document import Overview, status_json, status_queues
from celery_pause.api.results import ClusterStatus, PauseResult, ResumeResult
from celery_pause.cli.live import LiveProgress
from celery_pause.cli.outcome import masked
from celery_pause.cli.params import DateTime, Duration, NameList
from celery_pause.cli.render import (
    progress_lines,
    resume_lines,
    status_lines,
    timeout_lines,
    turn_lines,
)
from celery_pause.model.formatting import format_duration
from celery_pause.model.report import APPLIED, STARTING, WorkerReport
from celery_pause.model.scope import EVERYTHING, Scope
from celery_pause.model.state import Hold, PauseState, Restored, unreadable_hold

NOW = 1_800_000_000.0


def hold(queues: list[str] | None = None, **fields: object) -> Hold:
    values: dict[str, object] = {
        "scope": Scope.of(queues),
        "paused_by": "alice@ops",
        "reason": "Deploying v2.0",
        "paused_at": NOW - 1500,
    }
    values.update(fields)
    return Hold(**values)  # type: ignore[arg-type]


def report(name: str, **fields: object) -> WorkerReport:
    values: dict[str, object] = {
        "hostname": name,
        "pid": 1,
        "status": APPLIED,
        "generation": 42,
        "paused": None,
        "seen": NOW - 0.4,
    }
    values.update(fields)
    return WorkerReport(**values)  # type: ignore[arg-type]


def cluster_status(
    holds: list[Hold], workers: list[WorkerReport], generation: int = 42
) -> ClusterStatus:
    state = PauseState(generation=generation, holds=tuple(holds))
    return ClusterStatus(
        state=state,
        now=NOW,
        paused=state.paused(NOW),
        workers=tuple(workers),
        store="redis://:**@store:6379/0",
    )


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.4, "0 seconds"),
        (1, "1 second"),
        (90, "1 minute 30 seconds"),
        (299.7, "5 minutes"),
        (1500, "25 minutes"),
        (5400.2, "1 hour 30 minutes"),
        (3601, "1 hour"),
        (86400 + 3 * 3600 + 5, "1 day 3 hours"),
        (-5, "0 seconds"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_status_text_of_a_full_pause_matches_the_documented_shape() -> None:
    # Given a manual hold on every queue with an auto-resume, three paused workers, and one of
    # them still holding 8 prefetched tasks in its gate
    holds = [hold(resume_at=NOW + 300)]
    workers = [report("w1@host", reserved=8, held=8), report("w2@host"), report("w3@host")]

    # When rendered
    lines = status_lines(
        Overview(cluster_status(holds, workers), {"celery": 1234, "emails": 12}, ())
    )

    # Then it reads like the README
    assert lines[0] == "State: PAUSED (all queues) since 2027-01-15 07:35:00Z (25 minutes)"
    assert lines[1] == (
        '  hold  manual  on all queues  by alice@ops  "Deploying v2.0"  auto-resume in 5 minutes'
    )
    assert lines[2] == "Workers: 3 live (3 paused, 0 tasks running in scope)"
    assert lines[3] == (
        "  w1@host  paused  applied gen 42  running 0 (0 in scope)  prefetched 8 (8 held)  "
        "seen 0.4s ago"
    )
    assert lines[4] == "  w2@host  paused  applied gen 42  running 0 (0 in scope)  seen 0.4s ago"
    assert lines[-1] == "Queues, waiting in the broker: celery 1,234 (paused)   emails 12 (paused)"


def test_status_text_of_a_partial_pause_shows_each_hold_with_its_source() -> None:
    # Given a breaker hold on one queue and a manual hold on another
    breaker = hold(["emails"], source="breaker:smtp", paused_by=None, reason="5 errors in 60s")
    manual = hold(["reports"], paused_at=NOW - 60)
    busy = report(
        "w1@host",
        paused=("emails", "reports"),
        running=("abcdef0123",),
        running_names=("send",),
        active=8,
        reserved=30,
    )
    behind = report("w2@host", generation=41, paused=())
    starting = report("w3@host", status=STARTING, generation=-1)

    # When rendered
    lines = status_lines(
        Overview(
            cluster_status([breaker, manual], [busy, behind, starting]),
            {"emails": None, "web": 3},
            (),
        )
    )

    # Then the state is PARTIAL, every hold names its source, every worker its state
    assert lines[0].startswith("State: PARTIAL (queues emails, reports) since ")
    assert lines[1] == '  hold  breaker:smtp  on queue emails  "5 errors in 60s"'
    assert lines[2].startswith("  hold  manual  on queue reports  by alice@ops")
    assert lines[3] == "Workers: 3 live (0 paused, 1 tasks running in scope)"
    # ... the busy worker runs 8 tasks, 1 of them in a paused scope, and has 22 prefetched
    assert "pausing" in lines[4] and "running 8 (1 in scope: send[abcdef01])" in lines[4]
    assert "prefetched 22 (0 held)" in lines[4]
    assert "applying" in lines[5]
    assert "starting" in lines[6] and "applied gen" not in lines[6]
    assert (
        lines[-1]
        == "Queues, waiting in the broker: emails ? (paused)   web 3   (? = the broker cannot tell)"
    )


def test_status_text_when_running_and_no_worker() -> None:
    lines = status_lines(Overview(cluster_status([], []), {}, ()))
    assert lines == [
        "State: RUNNING",
        "Workers: none live (reports in redis://:**@store:6379/0)",
        "Queues: none known",
    ]


def test_status_says_who_restored_a_state_the_store_forgot() -> None:
    # Given a state a worker restored after the store forgot it
    status = cluster_status([hold()], [])
    restored = Restored(by="w1@host", at=NOW, lost="the store held no state", generation=41)
    status = replace(status, state=replace(status.state, restored=restored))

    # Then the text says so under the state line, and the JSON has the facts
    lines = status_lines(Overview(status, {}, ()))
    assert lines[1] == "Restored by w1@host at 2027-01-15 08:00:00Z: the store held no state"
    assert status_json(status, {})["restored"] == {
        "by": "w1@host", "at": NOW, "lost": "the store held no state", "generation": 41,
    }  # fmt: skip


def test_status_text_names_a_store_warning_before_the_workers() -> None:
    # Given a status whose store may evict its state
    warned = replace(cluster_status([], []), store_warnings=("maxmemory-policy is allkeys-lru",))

    # When rendered; Then the store line carries the warning
    lines = status_lines(Overview(warned, {}, ()))
    assert lines[1] == "Store: redis://:**@store:6379/0: WARNING maxmemory-policy is allkeys-lru"


def test_reasons_and_names_cannot_drive_the_terminal() -> None:
    # Given a reason with an escape sequence and a newline
    evil = hold(reason="ok\x1b[2J\nState: RUNNING", paused_by="eve\x1b[31m")

    # When rendered
    text = "\n".join(status_lines(Overview(cluster_status([evil], []), {}, ())))

    # Then no control character reaches the output
    assert "\x1b" not in text
    assert "\nState: RUNNING" not in text
    assert "\\u001b[2J\\nState: RUNNING" in text


def test_unreadable_state_shows_as_a_hold_on_everything() -> None:
    lines = status_lines(
        Overview(cluster_status([unreadable_hold("unreadable pause state: bad json")], []), {}, ())
    )
    assert lines[0].startswith("State: PAUSED (all queues)")
    assert lines[1] == '  hold  unreadable  on all queues  "unreadable pause state: bad json"'


def test_status_json_schema() -> None:
    # Given a partial pause with a busy worker
    holds = [hold(["emails"], resume_at=NOW + 60)]
    busy = report(
        "w1@host",
        paused=("emails",),
        running=("id-1",),
        running_names=("send",),
        held=2,
        active=3,
        reserved=6,
        pool="threads",
    )

    # When rendered as JSON
    doc = json.loads(
        json.dumps(status_json(cluster_status(holds, [busy]), {"emails": 7, "web": None}))
    )

    # Then every documented key is there with its type
    assert set(doc) == {
        "schema", "state", "paused_queues", "since", "generation", "restored", "now", "store",
        "store_warnings", "holds", "limits", "scheduled", "ramps", "windows", "workers", "totals",
        "queues", "breakers",
    }  # fmt: skip
    assert doc["breakers"] == [] and doc["scheduled"] == [] and doc["windows"] == []
    assert doc["limits"] == []
    assert doc["ramps"] == [] and doc["restored"] is None and doc["store_warnings"] == []
    assert doc["schema"] == 2
    assert doc["state"] == "PARTIAL"
    assert doc["paused_queues"] == ["emails"]
    assert doc["since"] == NOW - 1500
    assert doc["holds"] == [holds[0].to_json()]
    assert doc["workers"] == [
        {
            "hostname": "w1@host",
            "pid": 1,
            "state": "pausing",
            "generation": 42,
            "paused_queues": ["emails"],
            "running": [{"id": "id-1", "name": "send"}],
            "active": 3,
            "reserved": 6,
            "held": 2,
            "waiting": 0,
            "seen": NOW - 0.4,
            "pool": "threads",
            "pause_guaranteed": True,
            "pool_problem": None,
            "as_of": 0.0,
            "silent": 0.0,
            "readded_queues": [],
        }
    ]
    assert doc["totals"] == {
        "workers": 1, "paused": 0, "lost": 0, "running_in_scope": 1, "active": 3, "reserved": 6,
        "held": 2, "waiting": 0, "not_guaranteed": 0,
    }  # fmt: skip
    assert doc["queues"] == [
        {"name": "emails", "waiting": 7, "paused": True, "partly_paused": False},
        {"name": "web", "waiting": None, "paused": False, "partly_paused": False},
    ]


def test_status_json_when_running_and_paused_everywhere() -> None:
    running = status_json(cluster_status([], [report("w@h", paused=())]), {})
    assert (running["state"], running["paused_queues"], running["since"]) == ("RUNNING", [], None)
    paused = status_json(cluster_status([hold()], []), {})
    assert (paused["state"], paused["paused_queues"]) == ("PAUSED", None)


def test_a_worker_holding_every_queue_shows_its_paused_queues_as_null() -> None:
    """``null`` is every queue (the status page says "all queues"), ``[]`` is none."""
    doc = status_json(cluster_status([hold()], [report("w@h"), report("v@h", paused=())]), {})
    shown = {w["hostname"]: w["paused_queues"] for w in doc["workers"]}
    assert shown == {"w@h": None, "v@h": []}


def test_queues_counted_are_the_apps_and_those_holds_and_workers_name() -> None:
    status = cluster_status([hold(["emails"])], [report("w@h", paused=("emails", "sms"))])
    assert status_queues(status, ["celery"]) == ["celery", "emails", "sms"]


@pytest.mark.parametrize(
    ("fields", "state"),
    [
        ({"status": STARTING}, "starting"),
        ({"generation": 41}, "applying"),
        ({"paused": []}, "running"),
        ({"running": ("x",)}, "pausing"),
        ({}, "paused"),
    ],
)
def test_worker_state(fields: dict[str, object], state: str) -> None:
    assert report("w@h", **fields).state_for(42) == state


def test_pause_and_resume_outcomes() -> None:
    # Given a queue pause with an auto-resume that replaced an earlier hold
    new = hold(["emails"], paused_at=NOW, resume_at=NOW + 1800)
    old = hold(["emails"], paused_by="bob@ops")
    result = PauseResult(hold=new, generation=3, replaced=(old,))

    # Then the operator reads what happens, when it ends, and what was replaced
    from celery_pause.cli.render import pause_lines

    lines = pause_lines(result)
    assert lines[0] == (
        "Paused queue emails: running tasks from it will finish, no new task from it will "
        "start. Auto-resume at 2027-01-15 08:30:00Z (in 30 minutes)."
    )
    assert lines[1].startswith("Replaced the earlier manual hold on queue emails by bob@ops")

    # And a resume that leaves a breaker hold says so, with the --force hint
    breaker = hold(["emails"], source="breaker:smtp")
    kept = ResumeResult(removed=(new,), remaining=(breaker,), generation=4)
    lines = resume_lines(kept, Scope.of(["emails"]), force=False)
    assert lines[0].startswith("Resumed queue emails: removed manual hold on queue emails")
    assert "Still paused by:" in lines
    assert any("breaker:smtp hold on queue emails" in line for line in lines)
    assert lines[-1] == "Holds not set by hand stay unless you resume with --force."

    # And a resume with nothing to do says the queues flow
    assert resume_lines(ResumeResult((), (), 4), EVERYTHING, force=False) == [
        "Nothing to resume: all queues already flow."
    ]


def test_progress_and_timeout_name_workers_and_tasks() -> None:
    # Given one confirmed worker, one finishing two tasks, one not applied yet
    done = report("w1@h")
    busy = report("w2@h", running=("id-aaaaaaaa-1", "id-bbbbbbbb-2"), running_names=("a", "b"))
    late = report("w3@h", generation=41)

    # When progress is rendered
    lines = progress_lines([done, busy, late], 42)

    # Then the head counts, and each straggler is named with its tasks
    assert lines == [
        "Waiting: 1 of 3 workers confirmed, 2 tasks still running",
        "  w2@h  finishing 2: a[id-aaaaa], b[id-bbbbb]",
        "  w3@h  has not applied the pause yet",
    ]

    # And on timeout the full task ids are given
    busy_ids = {"w2@h": list(busy.running), "w3@h": []}
    lines = timeout_lines(5, busy_ids, [done, busy, late], "celery -A proj")
    assert lines[0] == "pause recorded but not confirmed within 5s:"
    assert lines[1] == "  w2@h still runs 2: a[id-aaaaaaaa-1], b[id-bbbbbbbb-2]"
    assert lines[2] == "  w3@h has not applied the pause"
    assert "`celery -A proj pause status`" in lines[3]


def test_live_progress_redraws_in_place_on_a_terminal() -> None:
    # Given a terminal and a clock
    out = io.StringIO()
    now = [0.0]
    live = LiveProgress(stream=out, tty=True, clock=lambda: now[0])
    paused = PauseResult(hold=hold(), generation=42, replaced=())
    busy = report("w1@h", running=("id-1",), running_names=("a",))

    # When progress changes twice, the second time after the redraw interval
    live(paused, [busy])
    first = out.getvalue()
    now[0] = 1.0
    live(paused, [report("w1@h")])
    live.close()

    # Then what the pause does stays; the first block is erased (cursor up + clear line
    # per line) before the next
    heading, block = first.split("\n", 1)
    assert heading.startswith("Paused all queues: running tasks will finish")
    assert (
        block
        == "Waiting: 0 of 1 workers confirmed, 1 task still running\n  w1@h  finishing 1: a[id-1]\n"
    )
    rest = out.getvalue()[len(first) :]
    assert rest.startswith("\x1b[F\x1b[K\x1b[F\x1b[K")
    assert "Waiting: 1 of 1 workers confirmed, 0 tasks still running\n" in rest
    assert rest.endswith("\x1b[F\x1b[K")


def test_live_progress_prints_each_change_once_elsewhere() -> None:
    out = io.StringIO()
    live = LiveProgress(stream=out, tty=False)
    paused = PauseResult(hold=hold(), generation=42, replaced=())
    busy = report("w1@h", running=("id-1",))
    for workers in ([busy], [busy], [busy], [report("w1@h")]):
        live(paused, workers)
    live.close()
    assert out.getvalue().count("Waiting:") == 2
    assert out.getvalue().count("Paused all queues") == 1
    assert "\x1b" not in out.getvalue()
    assert live.last == [report("w1@h")]


def convert(param_type: click.ParamType, value: str) -> object:
    return param_type.convert(value, None, None)


def test_option_types_convert_or_fail_with_the_reason() -> None:
    assert convert(Duration(), "1h30m") == timedelta(minutes=90)
    assert convert(NameList("queue"), " a , b ") == ["a", "b"]
    ahead = datetime.now(timezone.utc) + timedelta(hours=1)
    assert convert(DateTime(), ahead.isoformat()) == ahead
    local = (datetime.now() + timedelta(hours=2)).replace(microsecond=0)
    assert convert(DateTime(), local.isoformat()) == local.astimezone()
    for param_type, value, message in [
        (Duration(), "soon", "not a duration"),
        (Duration(), "-5", "positive"),
        (NameList("queue"), "a,,b", "empty queue name"),
        (NameList("queue"), ",", "empty queue name"),
        (NameList("queue"), "x" * 201, "longer than"),
        (DateTime(), "next tuesday", "ISO 8601"),
        (DateTime(), "2001-01-01T00:00Z", "in the past"),
    ]:
        with pytest.raises(click.BadParameter, match=message):
            convert(param_type, value)


def test_masked_hides_store_and_broker_passwords() -> None:
    app = Celery("m", set_as_current=False)
    app.conf.update(broker_url="amqp://u:brokerpw@h//", pause_store_url="redis://:storepw@h:6379/0")
    text = masked("failed redis://:storepw@h and amqp://u:brokerpw@h", app)
    assert "storepw" not in text and "brokerpw" not in text
    assert text == "failed redis://:**@h and amqp://u:**@h"


def test_the_apps_only_queue_paused_everywhere_is_a_full_pause() -> None:
    # Given an app whose only queue is "celery", paused for every task on every worker
    state = PauseState(generation=1, holds=(hold(["celery"]),))
    status = ClusterStatus(
        state=state, now=NOW, paused=state.paused(NOW), workers=(), store="s", queues=("celery",)
    )

    # Then the cluster is PAUSED, not PARTIAL; with a second queue of the app it is PARTIAL
    assert status_json(status, {})["state"] == "PAUSED"
    assert status_lines(Overview(status, {}, ()))[0].startswith("State: PAUSED (queue celery)")
    both = replace(status, queues=("celery", "emails"))
    assert status_json(both, {})["state"] == "PARTIAL"


def test_turn_lines_show_each_fair_limits_waiting_values_escaped() -> None:
    lines = turn_lines({"h1": {"acme": 120, "evil\x1b[2J": 3}, "h2": {}})
    assert lines == [
        '  123 task(s) of limit h1 wait for their turns: "acme" 120, "evil\\u001b[2J" 3'
    ]
