"""``celery -A proj throttle`` through click's runner, on a real Redis store (no worker needed:
what is refused, recorded, shown, replaced, lifted and kept in the history)."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone

import pytest
from click.testing import Result

import celery_pause
from celery_pause import cli
from celery_pause.model.adaptive import adapt_key, overload
from celery_pause.model.limit import Limit
from celery_pause.model.scope import Scope
from celery_pause.stores import store_for
from support.cli import invoke, pause, resume, status_doc
from support.harness import Cluster
from support.holds import holds

LATER = (datetime.now(timezone.utc) + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%MZ")
"""Two hours ahead, as an operator types a --resume-at or --start-at (UTC)."""


def throttle(cluster: Cluster, *args: str) -> Result:
    """``celery throttle ARGS`` on the cluster's app."""
    return invoke(cluster.app, cli.throttle, *args)


def assert_nothing_written(cluster: Cluster) -> None:
    """No state, no history entry and no limit record in the cluster's store."""
    assert celery_pause.status(cluster.app).state.generation == 0
    assert celery_pause.history(cluster.app) == []
    assert store_for(cluster.app).record_keys("limit:") == []


def status_text(cluster: Cluster, *args: str) -> str:
    result = pause(cluster, "status", *args)
    assert result.exit_code == 0, result.output
    return result.stdout


# -- usage errors: exit 2, nothing written ------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--rate", "0/s"], ["--rate", "rate must be above 0 and at most 1000000/s"]),
        (["--rate", "ten"], ["--rate", "not a rate: 'ten'"]),
        (["--rate", "2000000/s"], ["--rate", "at most 1000000/s", "'2000000/s'"]),
        (["--rate", "-3/s"], ["--rate", "not a rate"]),
        (["--rate", "10/d"], ["--rate", "not a rate"]),
        (["--concurrency", "0"], ["--concurrency", "0 is not in the range 1<=x<=100000"]),
        (["--concurrency", "-1"], ["--concurrency", "-1 is not in the range 1<=x<=100000"]),
        (["--concurrency", "2.5"], ["--concurrency", "'2.5' is not a valid integer"]),
        (["--concurrency", "100001"], ["--concurrency", "1<=x<=100000"]),
        ([], ["give --rate (e.g. 10/s), --concurrency (e.g. 3), --fair LABEL, or some of them"]),
        (
            ["-Q", "emails"],
            ["give --rate (e.g. 10/s), --concurrency (e.g. 3), --fair LABEL, or some of them"],
        ),
        (
            ["--rate", "10/s", "--resume-after", "1h", "--resume-at", LATER],
            ["--resume-after and --resume-at cannot be used together"],
        ),
        (["--rate", "10/s", "--resume-after", "soon"], ["--resume-after", "not a duration"]),
        (["--rate", "10/s", "-Q", "a,,b"], ["--queues", "empty queue name"]),
        (["--concurrency", "3", "--cost", "tokens"], ["cost weighs a rate"]),
        (["--rate", "10/s", "--cost", "to kens"], ["cost must name", "'to kens'"]),
        (["--rate", "10/s", "--weight", "acme=3"], ["weights weigh fair turns"]),
        (["--fair", "tenant", "--weight", "acme=0"], ["weight of 'acme'"]),
    ],
)
def test_bad_input_exits_2_naming_the_problem_and_writes_nothing(
    redis_cluster: Cluster, args: list[str], names: list[str]
) -> None:
    # When the operator gets a throttle option wrong
    result = throttle(redis_cluster, *args)

    # Then it is a usage error that says what is wrong, without a traceback
    assert result.exit_code == 2, result.output
    for name in names:
        assert name in result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.output
    # ... and nothing is recorded: no state, no history, no limit record
    assert_nothing_written(redis_cluster)


# -- a throttle: recorded, said, shown ----------------------------------------------------------
def test_a_throttle_is_recorded_said_and_shown_in_status(redis_cluster: Cluster) -> None:
    queue = redis_cluster.queue("emails")

    # When an operator throttles one queue to 10/s, with a name and a reason
    result = throttle(
        redis_cluster, "--rate", "10/s", "-Q", queue, "--by", "ann@ops", "--reason", "smtp slow"
    )

    # Then it exits 0 and says what it did, and that no worker is there yet to apply it
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"Limited queue {queue} to 10/s across the cluster. No auto-resume: it lasts until resumed."
    ]
    assert "Warning: no live worker reports to redis://127.0.0.1:6379/14" in result.stderr
    assert "The limit is recorded: workers that start later apply it" in result.stderr

    # And the store holds exactly that limit, which slows the queue without pausing it
    (hold,) = holds(redis_cluster.app)
    assert hold.scope == Scope.of([queue])
    assert (hold.source, hold.paused_by, hold.reason) == ("manual", "ann@ops", "smtp slow")
    assert hold.limit == Limit(rate=10.0)
    assert hold.resume_at is None and hold.start_at is None
    status = celery_pause.status(redis_cluster.app)
    assert not status.paused
    assert [h.id for h in status.limits] == [hold.id]

    # And `pause status` shows the limit line and counts it, the cluster still running
    lines = status_text(redis_cluster).splitlines()
    assert lines[0] == "State: RUNNING; 1 limit in force"
    assert (
        f'  limit  10/s  manual  on queue {queue}  (rate not fully used)  by ann@ops  "smtp slow"'
    ) in lines

    # And the JSON has the hold with its rate, and the limit's usage
    doc = status_doc(redis_cluster)
    assert (doc["state"], doc["paused_queues"], doc["since"]) == ("RUNNING", [], None)
    (held,) = doc["holds"]
    assert held["id"] == hold.id
    assert (held["rate"], held["concurrency"]) == (10.0, None)
    assert (held["queues"], held["paused_by"], held["reason"]) == ([queue], "ann@ops", "smtp slow")
    assert doc["limits"] == [{"id": hold.id, "running": None, "booked": 0.0}]
    assert {"name": queue, "waiting": 0, "paused": False, "partly_paused": False} in doc["queues"]


def test_a_throttle_of_rate_and_concurrency_with_an_end(redis_cluster: Cluster) -> None:
    queue = redis_cluster.queue("reports")

    # When a queue is limited to 100/m and 3 at once for 90 minutes
    result = throttle(
        redis_cluster, "--rate", "100/m", "--concurrency", "3", "-Q", queue,
        "--resume-after", "1h30m",
    )  # fmt: skip

    # Then it says so, with the auto-resume
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(
        f"Limited queue {queue} to 100/m, at most 3 at once across the cluster. Auto-resume at "
    )
    assert result.stdout.rstrip().endswith("(in 1 hour 30 minutes).")

    # And the store, the text and the JSON status agree
    (hold,) = holds(redis_cluster.app)
    assert hold.limit == Limit(rate=100 / 60, concurrency=3)
    assert hold.resume_at is not None
    assert hold.resume_at - hold.paused_at == pytest.approx(5400)
    text = status_text(redis_cluster)
    assert f"  limit  100/m, at most 3 at once  manual  on queue {queue}  " in text
    assert "(0 of 3 running, rate not fully used)" in text
    assert "auto-resume in 1 hour 29 minutes" in text or "auto-resume in 1 hour 30 minutes" in text
    doc = status_doc(redis_cluster)
    (held,) = doc["holds"]
    assert (held["rate"], held["concurrency"]) == (pytest.approx(100 / 60), 3)
    assert doc["limits"] == [{"id": hold.id, "running": 0, "booked": 0.0}]


def test_a_throttle_beside_a_pause_keeps_the_pause(redis_cluster: Cluster) -> None:
    queue = redis_cluster.queue("emails")

    # Given a pause of the queue
    assert pause(redis_cluster, "-Q", queue).exit_code == 0

    # When the same queue is throttled
    result = throttle(redis_cluster, "--concurrency", "2", "-Q", queue)

    # Then the throttle is added, the pause stays and still pauses the queue
    assert result.exit_code == 0, result.output
    assert "Replaced" not in result.stdout
    assert [h.pauses for h in holds(redis_cluster.app)] == [True, False]
    text = status_text(redis_cluster)
    assert text.startswith(f"State: PARTIAL (queue {queue}) since ")
    assert text.splitlines()[0].endswith("; 1 limit in force")
    assert status_doc(redis_cluster)["paused_queues"] == [queue]


# -- the dial turned, then lifted ---------------------------------------------------------------
def test_a_second_throttle_replaces_the_first_and_resume_lifts_it(redis_cluster: Cluster) -> None:
    queue = redis_cluster.queue("emails")

    # Given a queue throttled to 10/s by ann
    first = throttle(redis_cluster, "--rate", "10/s", "-Q", queue, "--by", "ann@ops")
    assert first.exit_code == 0, first.output
    (earlier,) = holds(redis_cluster.app)

    # When bob turns the dial to 5/s on the same queue
    second = throttle(redis_cluster, "--rate", "5/s", "-Q", queue, "--by", "bob@ops")

    # Then it replaces the first, and says so
    assert second.exit_code == 0, second.output
    lines = second.stdout.splitlines()
    assert lines[0].startswith(f"Limited queue {queue} to 5/s across the cluster.")
    assert lines[1].startswith(
        f"Replaced the earlier manual limit 10/s on queue {queue} by ann@ops at "
    )
    (later,) = holds(redis_cluster.app)
    assert later.id != earlier.id
    assert (later.limit, later.paused_by) == (Limit(rate=5.0), "bob@ops")
    assert "1 limit in force" in status_text(redis_cluster)

    # When the queue is resumed
    resumed = resume(redis_cluster, "-Q", queue)

    # Then the limit is lifted: status shows no limit, nothing paused
    assert resumed.exit_code == 0, resumed.output
    assert f"removed manual limit 5/s on queue {queue} by bob@ops" in resumed.stdout
    assert holds(redis_cluster.app) == ()
    text = status_text(redis_cluster)
    assert text.splitlines()[0] == "State: RUNNING"
    assert "limit" not in text
    doc = status_doc(redis_cluster)
    assert (doc["holds"], doc["limits"], doc["state"]) == ([], [], "RUNNING")


def test_a_limit_of_tokens_and_one_of_requests_stand_side_by_side(redis_cluster: Cluster) -> None:
    # When a task is limited to 90,000 tokens a minute, then to 500 requests a minute
    tokens = throttle(redis_cluster, "--tasks", "proj.llm", "--rate", "90000/m", "--cost", "tokens")
    requests = throttle(redis_cluster, "--tasks", "proj.llm", "--rate", "500/m")

    # Then both are recorded, the second replacing nothing, and shown with what they count
    assert tokens.exit_code == 0 and requests.exit_code == 0, tokens.output + requests.output
    assert sorted(h.limit.describe() for h in holds(redis_cluster.app) if h.limit) == [
        "1500/s of tokens",
        "500/m",
    ]
    text = status_text(redis_cluster)
    assert "  limit  1500/s of tokens  manual  on task proj.llm" in text
    assert "  limit  500/m  manual  on task proj.llm" in text
    costs = [h.get("cost") for h in status_doc(redis_cluster)["holds"]]
    assert sorted(map(str, costs)) == ["None", "tokens"]

    # And turning the tokens dial replaces the tokens limit alone
    throttle(redis_cluster, "--tasks", "proj.llm", "--rate", "60000/m", "--cost", "tokens")
    assert sorted(h.limit.describe() for h in holds(redis_cluster.app) if h.limit) == [
        "1000/s of tokens",
        "500/m",
    ]
    # ... and the history keeps what each limit counted
    recorded = [e.limit.describe() for e in celery_pause.history(redis_cluster.app) if e.limit]
    assert recorded == ["1000/s of tokens", "500/m", "1500/s of tokens"]


def test_an_adaptive_throttle_says_its_ceiling_and_status_its_level_and_last_cut(
    redis_cluster: Cluster,
) -> None:
    # Given an adaptive throttle of one task
    result = throttle(redis_cluster, "--tasks", "proj.call_api", "--rate", "200/s", "--adaptive")
    assert result.exit_code == 0, result.output
    assert "to adaptive, up to 200/s across the cluster" in result.stdout
    (hold,) = [h for h in holds(redis_cluster.app) if h.limit]
    assert hold.limit is not None and hold.limit.adaptive
    assert "now 200.0/s (never cut)" in status_text(redis_cluster)

    # When a task's overload cuts it with a Retry-After of 2 s
    store_for(redis_cluster.app).update_record(
        adapt_key(hold.id),
        lambda record, now: overload(record, now, why="429 from payments", retry_after=2.0),
    )

    # Then the status says its level now, when and why it was cut, and how long nothing starts
    text = status_text(redis_cluster)
    assert re.search(
        r"adaptive, up to 200/s  manual  on task proj.call_api.*now 1[67]\d\.\d/s \(cut 0 seconds"
        r" ago from 200/s: 429 from payments; nothing starts for [12]\.\ds\)",
        text,
        re.S,
    ), text
    (usage,) = status_doc(redis_cluster)["limits"]
    assert usage["adaptive"]["cut"]["why"] == "429 from payments"
    assert 0.8 < usage["adaptive"]["level"] < 0.9


def test_a_throttle_of_another_queue_keeps_the_first(redis_cluster: Cluster) -> None:
    emails, sms = redis_cluster.queue("emails"), redis_cluster.queue("sms")

    # Given a throttle of one queue
    assert throttle(redis_cluster, "--rate", "10/s", "-Q", emails).exit_code == 0

    # When another queue is throttled, then both stay and both are shown
    result = throttle(redis_cluster, "--concurrency", "4", "-Q", sms)
    assert result.exit_code == 0, result.output
    assert "Replaced" not in result.stdout
    text = status_text(redis_cluster)
    assert text.splitlines()[0] == "State: RUNNING; 2 limits in force"
    assert f"  limit  10/s  manual  on queue {emails}  " in text
    assert f"  limit  at most 4 at once  manual  on queue {sms}  " in text
    assert len(status_doc(redis_cluster)["limits"]) == 2

    # When one of them is resumed, then the other stays
    assert resume(redis_cluster, "-Q", emails).exit_code == 0
    (kept,) = holds(redis_cluster.app)
    assert (kept.scope, kept.limit) == (Scope.of([sms]), Limit(concurrency=4))


def test_a_scheduled_throttle_is_shown_as_a_limit_under_scheduled(redis_cluster: Cluster) -> None:
    queue = redis_cluster.queue("emails")

    # When a throttle of 2/s is scheduled two hours ahead
    result = throttle(redis_cluster, "--rate", "2/s", "-Q", queue, "--start-at", LATER)

    # Then it says when it starts, and nothing is limited yet
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"Limited queue {queue} to 2/s across the cluster from ")
    (hold,) = celery_pause.status(redis_cluster.app).scheduled
    assert celery_pause.status(redis_cluster.app).limits == ()
    doc = status_doc(redis_cluster)
    assert [(h["id"], h["rate"]) for h in doc["scheduled"]] == [(hold.id, 2.0)]
    assert doc["limits"] == []

    # And `pause status` lists it under Scheduled as the limit it is, not as a pause
    lines = status_text(redis_cluster).splitlines()
    (line,) = [line for line in lines if f"id {hold.id}" in line]
    assert lines[lines.index(line) - 1].startswith("Scheduled")
    assert "2/s" in line, line


# -- the history --------------------------------------------------------------------------------
def test_the_history_records_the_throttle_its_replacement_and_its_lifting(
    redis_cluster: Cluster,
) -> None:
    queue = redis_cluster.queue("emails")

    # Given a throttle, the dial turned, then a resume
    placed = throttle(
        redis_cluster, "--rate", "10/s", "-Q", queue, "--by", "ann@ops", "--reason", "smtp slow"
    )
    assert placed.exit_code == 0, placed.output
    (first,) = holds(redis_cluster.app)
    assert throttle(redis_cluster, "--rate", "5/s", "-Q", queue, "--by", "bob@ops").exit_code == 0
    (second,) = holds(redis_cluster.app)
    assert resume(redis_cluster, "-Q", queue).exit_code == 0
    me = celery_pause.api.default_operator()

    # Then the history has all three, newest first, each naming its hold and who did it
    entries = celery_pause.history(redis_cluster.app)
    assert [(e.by, e.holds, e.ended, e.generation) for e in entries] == [
        (me, (second.id,), (second.id,), 3),
        ("bob@ops", (second.id,), (first.id,), 2),
        ("ann@ops", (first.id,), (), 1),
    ]
    # ... a throttle is recorded as a throttle entry with its limit, lifted by a resume entry
    assert [e.action for e in entries] == ["resume", "throttle", "throttle"]
    assert [e.limit for e in entries[1:]] == [Limit(rate=5.0), Limit(rate=10.0)]
    assert not entries[1].forced, "turning the dial is not a forced pause"
    assert entries[2].reason == "smtp slow"
    assert all(e.scope == Scope.of([queue]) for e in entries)

    # And `pause status --history` lists them, in text and in JSON
    lines = status_text(redis_cluster, "--history").splitlines()
    top = lines.index("History (newest first):")
    assert "resume" in lines[top + 1] and f"by {me}" in lines[top + 1]
    assert "bob@ops" in lines[top + 2]
    assert "ann@ops" in lines[top + 3] and "'smtp slow'" in lines[top + 3]
    doc = json.loads(pause(redis_cluster, "status", "--json", "--history").stdout)
    assert [(e["by"], e["holds"]) for e in doc["history"]] == [
        (me, [second.id]),
        ("bob@ops", [second.id]),
        ("ann@ops", [first.id]),
    ]


def test_turning_the_dial_is_not_recorded_as_forced(redis_cluster: Cluster) -> None:
    queue = redis_cluster.queue("emails")

    # Given a throttle, replaced by another of the same queue (throttle has no --force)
    assert throttle(redis_cluster, "--rate", "10/s", "-Q", queue).exit_code == 0
    assert throttle(redis_cluster, "--rate", "5/s", "-Q", queue).exit_code == 0

    # When the history is read
    newest = celery_pause.history(redis_cluster.app)[0]

    # Then the replacement ended the first limit, but nobody forced anything
    assert len(newest.ended) == 1
    assert not newest.forced
    assert "(forced)" not in newest.describe()
