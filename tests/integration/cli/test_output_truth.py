"""Input that cannot forge output, a store that cannot reach the workers refused, and bounds
that refuse absurd times: through click's runner, on a real Redis store."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

import celery_pause
from celery_pause import cli
from celery_pause.model.outcome import Outcome
from celery_pause.model.scope import Scope
from celery_pause.model.state import Hold
from celery_pause.stores import store_for
from support.cli import invoke, pause
from support.harness import Cluster
from support.proj import make_app

FORGED = "x\x1b[2J\nState: RUNNING"


@pytest.mark.parametrize(
    "args",
    [
        ["-Q", FORGED],
        ["--tasks", "proj.\x07bell"],
        ["-d", "w1@h\u202egnp.exe"],
        ["--by", "ann\r\nState: RUNNING"],
    ],
    ids=["queue", "task", "worker", "operator"],
)
def test_a_name_with_a_control_character_is_refused(
    redis_cluster: Cluster, args: list[str]
) -> None:
    # When an operator pauses with a name holding a control or other non-printable character
    result = pause(redis_cluster, *args)

    # Then it is a usage error that shows the name escaped, and nothing is written
    assert result.exit_code == 2, result.output
    assert "printable" in result.output
    assert "\x1b" not in result.output and "\x07" not in result.output
    assert celery_pause.status(redis_cluster.app).holds == ()


def test_status_escapes_what_the_store_holds(redis_cluster: Cluster) -> None:
    # Given a hold written into the store by something that did not check its text
    hostile = Hold(
        scope=Scope.of([FORGED]), reason="deploy\x1b[1A\rState: RUNNING", paused_by="m\x1b[31m"
    )
    store_for(redis_cluster.app).update(
        lambda state, now: Outcome(state.with_holds([replace(hostile, paused_at=now)]), None)
    )

    # When the status is shown as text and as JSON
    text = pause(redis_cluster, "status")
    doc = pause(redis_cluster, "status", "--json")

    # Then no control character reaches the terminal: each is written as its escape
    for output in (text.output, doc.output):
        assert not any(ch in output for ch in "\x1b\r\x07"), repr(output)
    assert "\\x1b[2J\\nState: RUNNING" in text.output
    assert [line for line in text.output.splitlines() if line.startswith("State:")] == [
        text.output.splitlines()[0]
    ]
    # ... and the JSON keeps the value, escaped by JSON itself
    (hold,) = json.loads(doc.output)["holds"]
    assert hold["queues"] == [FORGED]


def test_a_memory_store_is_refused_by_the_cli_and_serve(tmp_path: Path) -> None:
    # Given an app whose pause store is memory:// (it lives in one process)
    app = make_app(namespace="memory-cli", broker="memory://", store="memory://")

    # When the CLI pauses, shows the status, or serves the admin API
    for args in (["--reason", "x"], ["status"], ["serve", "--no-auth", "--port", "0"]):
        result = invoke(app, cli.pause, *args)

        # Then it refuses and says why, and writes nothing
        assert result.exit_code != 0, result.output
        assert "memory://" in result.output and "cannot reach the workers" in result.output
    assert celery_pause.status(app).holds == ()


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"resume_after": 1e12}, "at most 366 days"),
        ({"resume_at": 1e300}, "out of range"),
    ],
    ids=["resume_after", "resume_at"],
)
def test_absurd_times_are_refused(
    redis_cluster: Cluster, options: dict[str, float], expected: str
) -> None:
    # When a pause is asked to resume after a trillion seconds, or in the year 1e292
    with pytest.raises(celery_pause.InvalidInput, match=expected):
        celery_pause.pause(redis_cluster.app, **options)  # type: ignore[arg-type]

    # Then nothing was written
    assert celery_pause.status(redis_cluster.app).holds == ()


def test_strict_refuses_a_worker_name_that_matches_no_live_worker(redis_cluster: Cluster) -> None:
    # When an operator drains a worker that is not live, with --strict
    result = pause(redis_cluster, "-d", "ghost@*", "--strict")

    # Then it is refused, the name is said, and nothing is written
    assert result.exit_code == 2, result.output
    assert "worker 'ghost@*' matches no live worker" in result.output
    assert celery_pause.status(redis_cluster.app).holds == ()
