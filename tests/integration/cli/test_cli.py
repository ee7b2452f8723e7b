"""The CLI through click's runner, on a real Redis store (and real workers where it matters)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import pytest

import celery_pause
from celery_pause import cli
from celery_pause.model.scope import Scope
from celery_pause.stores import store_for
from support.cli import invoke, pause, resume, status_doc
from support.harness import AMQP_BROKER, Cluster, wait_for
from support.holds import add_breaker_hold, holds
from support.proj import make_app
from support.services import require

UNREACHABLE_STORE = "redis://:s3cret-pw@127.0.0.1:1/0"


def watch_unchanged(probe: Callable[[], object], seconds: float) -> None:
    """Observe ``probe`` for ``seconds``; fail at the first change."""
    first = probe()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert probe() == first
        time.sleep(0.1)


# -- pause: every option ---------------------------------------------------------------------
def test_pause_records_every_option_and_says_what_it_did(redis_cluster: Cluster) -> None:
    # When an operator pauses two queues for 1h30m, with a reason and a name
    result = pause(
        redis_cluster, "--reason", "Deploying v2.0", "--by", "alice@ops", "-Q", "emails, sms",
        "--resume-after", "1h30m",
    )  # fmt: skip

    # Then it says what happens, when it ends, and warns that no worker is live
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(
        "Paused queues emails, sms: running tasks from them will finish, no new task from them "
        "will start. Auto-resume at "
    )
    assert result.stdout.rstrip().endswith("(in 1 hour 30 minutes).")
    assert "Warning: no live worker reports to redis://127.0.0.1:6379/14" in result.stderr
    assert "workers that start later start paused" in result.stderr

    # And the store holds exactly that
    (hold,) = holds(redis_cluster.app)
    assert hold.scope == Scope.of(["emails", "sms"])
    assert (hold.source, hold.paused_by, hold.reason) == ("manual", "alice@ops", "Deploying v2.0")
    assert hold.resume_at is not None
    assert hold.resume_at - hold.paused_at == pytest.approx(5400)


def test_by_defaults_to_user_at_host(redis_cluster: Cluster) -> None:
    assert pause(redis_cluster).exit_code == 0
    (hold,) = holds(redis_cluster.app)
    assert hold.paused_by == celery_pause.api.default_operator()
    assert hold.resume_at is None


def test_resume_at_without_zone_is_local_time(redis_cluster: Cluster) -> None:
    # Given a local wall-clock time two hours ahead, without a zone
    local = (datetime.now() + timedelta(hours=2)).replace(second=0, microsecond=0)

    # When paused until then
    result = pause(redis_cluster, "--resume-at", local.isoformat())

    # Then the hold ends at that local time
    assert result.exit_code == 0, result.output
    (hold,) = holds(redis_cluster.app)
    assert hold.resume_at == pytest.approx(local.astimezone().timestamp())
    assert "(in 1 hour 59 minutes)" in result.stdout or "(in 2 hours)" in result.stdout


def test_resume_at_with_zone(redis_cluster: Cluster) -> None:
    result = pause(redis_cluster, "-Q", "q1", "--resume-at", "2099-01-01T12:00:00Z")
    assert result.exit_code == 0, result.output
    assert "Auto-resume at 2099-01-01 12:00:00Z" in result.stdout
    (hold,) = holds(redis_cluster.app)
    assert hold.resume_at == datetime.fromisoformat("2099-01-01T12:00:00+00:00").timestamp()


# -- usage errors: exit 2, naming the option, nothing recorded --------------------------------
@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--resume-after", "soon"], ["--resume-after", "not a duration"]),
        (["--resume-after", "0"], ["--resume-after", "positive"]),
        (["--resume-after", "400d"], ["--resume-after", "366 days"]),
        (["--resume-at", "next tuesday"], ["--resume-at", "ISO 8601"]),
        (["--resume-at", "2001-01-01T00:00"], ["--resume-at", "in the past"]),
        (
            ["--resume-after", "1h", "--resume-at", "2099-01-01T00:00Z"],
            ["--resume-after", "--resume-at", "cannot be used together"],
        ),
        (["-Q", ""], ["--queues", "empty queue name"]),
        (["-Q", "a,,b"], ["--queues", "empty queue name"]),
        (["--queues", " , "], ["--queues", "empty queue name"]),
        (["-Q", "x" * 201], ["--queues", "longer than"]),
        (["--timeout", "5"], ["--timeout", "only with --wait"]),
        (["--wait", "--timeout", "0"], ["--timeout"]),
        (["--wait", "--timeout", "nan"], ["--timeout", "finite"]),
        (["--wait", "--timeout", "soon"], ["--timeout"]),
        (["--by", "  "], ["--by", "must name who acts"]),
        (["--reason", "x" * 1001], ["--reason", "longer than 1000"]),
        (["--force", "status"], ["--force", "belongs to `pause` itself"]),
        (["-Q", "a", "status"], ["--queues", "belongs to `pause` itself"]),
        (["--bogus"], ["No such option", "--bogus"]),
        (["statu"], ["No such command", "statu"]),
    ],
)
def test_pause_usage_errors_exit_2_naming_the_option(
    redis_cluster: Cluster, args: list[str], names: list[str]
) -> None:
    # When the operator gets an option wrong
    result = pause(redis_cluster, *args)

    # Then it is a usage error that names the option, and nothing is recorded
    assert result.exit_code == 2, result.output
    for name in names:
        assert name in result.output
    assert "Traceback" not in result.output
    assert celery_pause.status(redis_cluster.app).state.generation == 0


@pytest.mark.parametrize(
    ("command", "args", "name"),
    [
        ("resume", ["-Q", "a,,b"], "--queues"),
        ("resume", ["--bogus"], "--bogus"),
        ("status", ["--bogus"], "--bogus"),
    ],
)
def test_resume_and_status_usage_errors(
    redis_cluster: Cluster, command: str, args: list[str], name: str
) -> None:
    result = (
        resume(redis_cluster, *args)
        if command == "resume"
        else pause(redis_cluster, "status", *args)
    )
    assert result.exit_code == 2, result.output
    assert name in result.output


# -- refusals and failures: exit 1 ------------------------------------------------------------
def test_already_paused_exits_1_with_who_when_why_and_the_force_hint(
    redis_cluster: Cluster,
) -> None:
    # Given a pause by alice
    assert pause(redis_cluster, "--by", "alice@ops", "--reason", "db upgrade").exit_code == 0
    (first,) = holds(redis_cluster.app)

    # When bob pauses again without --force
    result = pause(redis_cluster, "--by", "bob@ops")

    # Then he is told who paused, when and why, how to override, and nothing changed
    assert result.exit_code == 1
    assert "already paused, nothing changed" in result.stderr
    assert "by alice@ops at " in result.stderr and "'db upgrade'" in result.stderr
    assert "Use --force to replace it" in result.stderr
    assert holds(redis_cluster.app) == (first,)

    # When he uses --force
    forced = pause(redis_cluster, "--by", "bob@ops", "--force")

    # Then his hold replaces alice's, and the output says so
    assert forced.exit_code == 0, forced.output
    assert "Replaced the earlier manual hold on all queues by alice@ops" in forced.stdout
    (second,) = holds(redis_cluster.app)
    assert second.paused_by == "bob@ops"


@pytest.mark.parametrize("command", ["pause", "resume", "status"])
def test_unreachable_store_exits_1_naming_it_with_the_password_masked(
    redis_url: str, command: str
) -> None:
    # Given an app whose store does not answer (its URL holds a password)
    app = make_app(namespace="unreachable", broker=redis_url, store=UNREACHABLE_STORE)

    # When any command runs
    if command == "status":
        result = invoke(app, cli.pause, "status")
    else:
        result = invoke(app, getattr(cli, command))

    # Then it fails with exit 1, naming the store without its password
    assert result.exit_code == 1, result.output
    assert "redis://:**@127.0.0.1:1/0" in result.stderr
    assert "s3cret-pw" not in result.output
    assert "Traceback" not in result.output


def test_unknown_store_scheme_is_a_configuration_error(redis_url: str) -> None:
    app = make_app(namespace="misconfigured", broker=redis_url, store="mongodb://u:pw@h/db")
    result = invoke(app, cli.pause)
    assert result.exit_code == 1
    assert "celery-pause is not configured" in result.stderr
    assert "mongodb://u:**@h/db" in result.stderr and ":pw@" not in result.output


# -- resume ------------------------------------------------------------------------------------
def test_resume_says_whether_queues_flow_and_keeps_breaker_holds_unless_forced(
    redis_cluster: Cluster,
) -> None:
    # Given a manual pause of everything and a breaker hold on emails
    assert pause(redis_cluster, "--reason", "deploy").exit_code == 0
    add_breaker_hold(redis_cluster.app, ["emails"], source="breaker:smtp", reason="5 errors in 60s")

    # Then status shows both holds with their sources
    text = pause(redis_cluster, "status").stdout
    assert "  hold  manual  on all queues  by " in text
    assert '  hold  breaker:smtp  on queue emails  "5 errors in 60s"' in text
    assert [h["source"] for h in status_doc(redis_cluster)["holds"]] == ["manual", "breaker:smtp"]

    # When one queue is resumed out of the all-queue hold, that is refused and says how to
    # lift it, and nothing changes
    generation = celery_pause.status(redis_cluster.app).state.generation
    partial = resume(redis_cluster, "-Q", "sms")
    assert partial.exit_code == 2
    assert "cannot resume queue sms out of the manual hold on all queues" in partial.stderr
    assert "Resume its whole scope (all queues)" in partial.stderr
    assert celery_pause.status(redis_cluster.app).state.generation == generation

    # When everything is resumed, the manual hold goes, the breaker hold stays, and it says so
    kept = resume(redis_cluster)
    assert kept.exit_code == 0
    assert "Resumed all queues: removed manual hold on all queues" in kept.stdout
    assert "Still paused by:\n  breaker:smtp hold on queue emails" in kept.stdout
    assert "Holds not set by hand stay unless you resume with --force." in kept.stdout
    assert [h.source for h in holds(redis_cluster.app)] == ["breaker:smtp"]
    assert status_doc(redis_cluster)["state"] == "PARTIAL"

    # When forced, the breaker hold goes too and the queues flow
    forced = resume(redis_cluster, "--force")
    assert forced.exit_code == 0
    assert "removed breaker:smtp hold on queue emails" in forced.stdout
    assert "All queues flow again." in forced.stdout
    assert holds(redis_cluster.app) == ()

    # And another resume has nothing to do
    assert resume(redis_cluster).stdout == "Nothing to resume: all queues already flow.\n"


# -- status ------------------------------------------------------------------------------------
def test_status_counts_waiting_messages_on_redis_priority_queues_included(
    redis_cluster: Cluster,
) -> None:
    # Given five tasks waiting (two with a priority, kept in kombu's priority sub-queues)
    for i in range(3):
        redis_cluster.send(f"t{i}")
    for i in range(2):
        redis_cluster.send(f"p{i}", priority=6)

    # When status is asked for
    doc = status_doc(redis_cluster)
    text = pause(redis_cluster, "status").stdout

    # Then every one of them is counted
    assert doc["queues"] == [
        {"name": redis_cluster.queue(), "waiting": 5, "paused": False, "partly_paused": False}
    ]
    assert f"Queues, waiting in the broker: {redis_cluster.queue()} 5" in text
    assert doc["state"] == "RUNNING" and doc["workers"] == [] and doc["holds"] == []


def test_status_counts_waiting_messages_on_rabbitmq(redis_url: str, tmp_path: Path) -> None:
    # Given RabbitMQ as the broker, the store on Redis, and four tasks waiting
    require("RabbitMQ", "127.0.0.1", 5672)
    cluster = Cluster(broker=AMQP_BROKER, store=redis_url, tmp=tmp_path)
    try:
        for i in range(4):
            cluster.send(f"t{i}")

        # When status is asked for, a passive declare counts them
        doc = status_doc(cluster)
        assert doc["queues"] == [
            {"name": cluster.queue(), "waiting": 4, "paused": False, "partly_paused": False}
        ]
    finally:
        cluster.close()


def test_status_json_follows_the_schema_through_pause_and_resume(redis_cluster: Cluster) -> None:
    # Given a partial pause
    assert pause(redis_cluster, "-Q", "emails", "--reason", "smtp down").exit_code == 0

    # Then the JSON says PARTIAL with the hold's facts
    doc = status_doc(redis_cluster)
    assert doc["schema"] == 2
    assert doc["state"] == "PARTIAL"
    assert doc["paused_queues"] == ["emails"]
    (hold,) = doc["holds"]
    assert set(hold) == {
        "id", "queues", "tasks", "workers", "source", "paused_by", "reason", "paused_at",
        "resume_at", "start_at", "beat",
    }  # fmt: skip
    assert (hold["queues"], hold["reason"]) == (["emails"], "smtp down")
    assert doc["since"] == hold["paused_at"]
    assert doc["store"] == "redis://127.0.0.1:6379/14"
    assert {"name": "emails", "waiting": 0, "paused": True, "partly_paused": False} in doc["queues"]

    # When the pause covers everything, then PAUSED; when resumed, RUNNING
    assert pause(redis_cluster, "--force").exit_code == 0
    assert (status_doc(redis_cluster)["state"], status_doc(redis_cluster)["paused_queues"]) == (
        "PAUSED",
        None,
    )
    assert resume(redis_cluster).exit_code == 0
    assert status_doc(redis_cluster)["state"] == "RUNNING"


# -- with real workers ---------------------------------------------------------------------------
def test_wait_times_out_naming_stragglers_then_confirms_with_live_progress(
    redis_cluster: Cluster,
) -> None:
    # Given a worker busy with a long task
    worker = redis_cluster.worker("w1")
    worker.wait_applied()
    long_task = redis_cluster.send("long", 6.0)
    redis_cluster.wait_records(1)

    # When the operator waits only one second
    timed_out = pause(redis_cluster, "--wait", "--timeout", "1", "--reason", "deploy")

    # Then it exits 3 naming the worker and the task's full id and name, and the pause stays
    assert timed_out.exit_code == 3, timed_out.output
    assert "pause recorded but not confirmed within 1s:" in timed_out.stderr
    assert f"{worker.hostname} still runs 1: support.proj.record[{long_task}]" in timed_out.stderr
    assert "The pause stays in effect" in timed_out.stderr
    assert status_doc(redis_cluster)["state"] == "PAUSED"

    # And status shows the worker finishing that task
    (report,) = status_doc(redis_cluster)["workers"]
    assert report["state"] == "pausing"
    assert report["running"] == [{"id": long_task, "name": "support.proj.record"}]

    # When the operator waits long enough (replacing the hold)
    confirmed = pause(redis_cluster, "--force", "--wait", "--timeout", "60")

    # Then progress names the task while it runs, and the wait ends confirmed
    assert confirmed.exit_code == 0, confirmed.output
    assert "Waiting: 0 of 1 workers confirmed, 1 task still running" in confirmed.stdout
    assert f"{worker.hostname}  finishing 1: support.proj.record[{long_task[:8]}]" in (
        confirmed.stdout
    )
    assert confirmed.stdout.rstrip().endswith("Confirmed by 1 worker: nothing in scope is running.")
    (report,) = status_doc(redis_cluster)["workers"]
    assert (report["state"], report["running"]) == ("paused", [])


def test_worker_started_while_paused_fetches_nothing_and_status_shows_it(
    redis_cluster: Cluster,
) -> None:
    # Given a pause recorded while no worker is live, and six tasks waiting
    paused = pause(redis_cluster, "--reason", "maintenance")
    assert "Warning: no live worker" in paused.stderr
    sent = [redis_cluster.send(f"t{i}") for i in range(6)]

    # When a prefork worker (prefetch 4) starts
    worker = redis_cluster.worker("w1")
    report = worker.wait_applied(1)

    # Then it starts paused, fetches nothing and runs nothing: the six still wait in the queue
    assert report.paused is None and report.held == 0
    doc = status_doc(redis_cluster)
    assert doc["workers"][0]["state"] == "paused"
    assert doc["queues"] == [
        {"name": redis_cluster.queue(), "waiting": 6, "paused": True, "partly_paused": False}
    ]
    watch_unchanged(
        lambda: (status_doc(redis_cluster)["queues"][0]["waiting"], redis_cluster.records()), 2.0
    )

    # When resumed, every task runs
    assert "All queues flow again." in resume(redis_cluster).stdout
    records = redis_cluster.wait_records(6)
    assert sorted(r["id"] for r in records) == sorted(sent)
    wait_for(
        lambda: status_doc(redis_cluster)["queues"][0]["waiting"] == 0, timeout=20, what="empty"
    )


# -- status --history and serve ------------------------------------------------------------------
def test_status_history_shows_who_paused_and_resumed(redis_cluster: Cluster) -> None:
    # Given a pause and a resume made through the CLI
    assert pause(redis_cluster, "--by", "ann@ops", "--reason", "db upgrade").exit_code == 0
    assert resume(redis_cluster).exit_code == 0

    # Then `status --history` lists both, newest first, in text and in JSON
    text = pause(redis_cluster, "status", "--history")
    assert text.exit_code == 0, text.output
    lines = text.output.splitlines()
    first = lines.index("History (newest first):")
    assert "resume" in lines[first + 1] and "pause" in lines[first + 2]
    assert "ann@ops" in lines[first + 2] and "db upgrade" in lines[first + 2]
    doc = json.loads(pause(redis_cluster, "status", "--json", "--history").stdout)
    assert [(e["action"], e["by"]) for e in doc["history"]][1] == ("pause", "ann@ops")
    assert "history" not in status_doc(redis_cluster)


def test_pause_serve_is_a_subcommand_that_insists_on_a_token(redis_cluster: Cluster) -> None:
    result = pause(redis_cluster, "serve")
    assert result.exit_code == 2
    assert "--token-file" in result.output


def test_status_shows_each_breaker(redis_cluster: Cluster) -> None:
    # Given a breaker that opened on a queue (its record written as a worker would)
    breaker = celery_pause.CircuitBreaker("smtp", fail_max=2, window=60, queues=["emails"])

    @redis_cluster.app.task(
        name="send_mail", base=celery_pause.BreakerTask, breaker=breaker, shared=False
    )
    def send_mail() -> None:
        """A task guarded by the breaker."""

    breaker.change(
        store_for(redis_cluster.app),
        lambda rec, now: rec.trip(now, 2, "ConnectionError()", breaker.policy, "h1"),
    )

    # Then status lists it, in text and JSON, with its state and failures
    text = pause(redis_cluster, "status")
    assert text.exit_code == 0, text.output
    assert "Breakers:" in text.output and "circuit smtp (queue emails): open" in text.output
    [doc] = status_doc(redis_cluster)["breakers"]
    assert (doc["name"], doc["state"], doc["queues"]) == ("smtp", "open", ["emails"])
