"""Scopes beyond queues on real brokers and workers: one task type, one worker."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import click
import pytest
from celery.bin.base import CLIContext
from click.testing import CliRunner, Result

import celery_pause
from celery_pause import cli
from celery_pause.model.scope import Scope
from celery_pause.model.validation import MAX_NAME, MAX_NAMES
from support.harness import ROOT, Cluster, Worker, wait_for
from support.proj import OTHER_TASK, RECORD_TASK


def started(cluster: Cluster, task: str, since: float = 0.0) -> list[dict[str, Any]]:
    return [r for r in cluster.records() if r["task"] == task and r["started"] >= since]


def exactly_once(cluster: Cluster, sent: list[str]) -> None:
    ids = [r["id"] for r in cluster.records() if r["id"] in set(sent)]
    assert sorted(ids) == sorted(sent), "lost or duplicated tasks"


def test_a_paused_task_type_is_held_while_its_queue_flows(cluster: Cluster) -> None:
    # Given a worker (prefetch window 8) and a queue where one task type is paused
    worker = cluster.worker("w1", concurrency=2)
    worker.wait_applied()
    result = celery_pause.pause(cluster.app, tasks=[OTHER_TASK], wait=True, timeout=20)
    paused_at = time.time()
    assert result.hold.scope.describe() == f"task {OTHER_TASK}"

    # When more tasks of the paused type than the prefetch window arrive first, then others
    held = [cluster.send(f"held{i}", task=OTHER_TASK) for i in range(12)]
    flowing = [cluster.send(f"flow{i}", 0.02) for i in range(12)]

    # Then every task of the other type runs while none of the paused type starts:
    # held messages do not use up the prefetch window
    wait_for(
        lambda: len(started(cluster, RECORD_TASK)) >= len(flowing),
        timeout=30,
        what="the unpaused task type to run",
    )
    assert not started(cluster, OTHER_TASK), "a task of the paused type started"
    report = wait_for(
        lambda: (r := worker.wait_applied(result.generation)).held == len(held) and r,
        timeout=15,
        what="all the paused type's messages to wait in the gate, beyond the window",
    )
    (reply,) = cluster.app.control.broadcast(
        "pause_state", destination=[worker.hostname], reply=True, timeout=5
    )
    state = reply[worker.hostname]
    assert state["held"].get(OTHER_TASK, 0) == report.held
    assert state["scope"] == [{"queues": None, "tasks": [OTHER_TASK], "workers": None}]

    # When the task type is resumed
    resumed_at = time.time()
    celery_pause.resume(cluster.app, tasks=[OTHER_TASK])

    # Then every held task runs, exactly once, after the resume
    wait_for(
        lambda: len(started(cluster, OTHER_TASK)) >= len(held),
        timeout=30,
        what="the held task type to run",
    )
    assert all(r["started"] >= resumed_at for r in started(cluster, OTHER_TASK, paused_at))
    exactly_once(cluster, held + flowing)


def celery(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", "support.proj", *args],
        cwd=ROOT,
        env=cluster.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_cli_pauses_and_resumes_a_task_pattern(redis_cluster: Cluster) -> None:
    # Given a worker with a backlog of both task types
    worker = redis_cluster.worker("w1")
    worker.wait_applied()

    # When the CLI pauses the second type by a pattern and waits
    paused = celery(redis_cluster, "pause", "--tasks", "support.proj.record_o*", "--wait")
    assert paused.returncode == 0, paused.stderr
    assert "Paused task support.proj.record_o*" in paused.stdout
    since = time.time()
    held = [redis_cluster.send(f"held{i}", task=OTHER_TASK) for i in range(3)]
    flowing = [redis_cluster.send(f"flow{i}") for i in range(3)]

    # Then status shows the task dimension; the other type runs, the paused one does not
    status = json.loads(celery(redis_cluster, "pause", "status", "--json").stdout)
    assert status["holds"][0]["tasks"] == ["support.proj.record_o*"]
    assert status["state"] == "PARTIAL"
    wait_for(
        lambda: len(started(redis_cluster, RECORD_TASK)) >= 3, timeout=30, what="the other type"
    )
    assert not started(redis_cluster, OTHER_TASK)

    # And the worker answers Celery's own inspect command with what it holds
    inspected = celery(redis_cluster, "inspect", "pause_state", "--json", "-d", worker.hostname)
    assert inspected.returncode == 0, inspected.stderr
    answer = json.loads(inspected.stdout)[worker.hostname]
    assert answer["held"] == {OTHER_TASK: 3}
    assert answer["holds"][0]["tasks"] == ["support.proj.record_o*"]

    # When resumed with the same pattern, every held task runs exactly once
    resumed = celery(redis_cluster, "resume", "--tasks", "support.proj.record_o*")
    assert resumed.returncode == 0, resumed.stderr
    wait_for(lambda: len(started(redis_cluster, OTHER_TASK)) >= 3, timeout=30, what="held tasks")
    assert all(r["started"] > since for r in started(redis_cluster, OTHER_TASK))
    exactly_once(redis_cluster, held + flowing)


def starts_on(cluster: Cluster, worker: Worker, since: float) -> list[dict[str, Any]]:
    return [r for r in cluster.records() if r["worker"] == worker.hostname and r["started"] > since]


def test_draining_one_worker_hands_its_prefetched_tasks_to_the_other(cluster: Cluster) -> None:
    # Given two workers that both have a backlog prefetched
    w1, w2 = cluster.worker("w1"), cluster.worker("w2")
    w1.wait_applied()
    w2.wait_applied()
    sent = [cluster.send(f"t{i}", 0.3) for i in range(16)]
    wait_for(
        lambda: {r["worker"] for r in cluster.records()} == {w1.hostname, w2.hostname},
        timeout=30,
        what="both workers to start tasks",
    )

    # When w1 is drained by its hostname, and the pause confirmed
    result = celery_pause.pause(cluster.app, workers=[w1.hostname], wait=True, timeout=30)
    drained_at = time.time()
    assert not result.warnings

    # Then w2 runs everything else, w1's prefetched tasks included, and w1 starts nothing
    wait_for(lambda: len(cluster.records()) >= len(sent), timeout=60, what="every task to run")
    assert not starts_on(cluster, w1, drained_at), "the drained worker started a task"
    exactly_once(cluster, sent)
    assert w1.wait_applied(result.generation).held == 0, "nothing stranded on the drained worker"

    # When w1 is restarted under the hold, it starts drained
    assert w1.stop() == 0
    restarted = cluster.worker("w1")
    restarted.wait_applied(result.generation)
    more = [cluster.send(f"r{i}", 0.05) for i in range(4)]
    wait_for(lambda: len(cluster.records()) >= len(sent) + 4, timeout=30, what="w2 to run them")
    assert not starts_on(cluster, restarted, drained_at)

    # When the worker is resumed, it takes work again
    celery_pause.resume(cluster.app, workers=[w1.hostname])
    resumed_at = time.time()
    again = [cluster.send(f"a{i}", 0.3) for i in range(6)]
    wait_for(
        lambda: starts_on(cluster, restarted, resumed_at),
        timeout=30,
        what="the resumed worker to take work",
    )
    wait_for(lambda: len(cluster.records()) >= len(sent) + 10, timeout=30, what="the rest")
    exactly_once(cluster, sent + more + again)


def invoke(cluster: Cluster, command: click.Command, *args: str) -> Result:
    obj = CLIContext(app=cluster.app, no_color=True, workdir=None)
    return CliRunner().invoke(command, list(args), obj=obj, catch_exceptions=False)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--tasks", ""), "empty task name"),
        (("--tasks", "a,,b"), "empty task name"),
        (("-d", ",".join(f"w{i}@h" for i in range(MAX_NAMES + 1))), "at most 100 workers"),
        (("--tasks", "t" * (MAX_NAME + 1)), "task name longer than 200"),
        (("--tasks", "x", "status"), "--tasks belongs to `pause` itself"),
        (("-d", "w1@h", "status"), "--destination belongs to `pause` itself"),
    ],
)
def test_bad_scopes_are_refused_before_anything_is_written(
    redis_cluster: Cluster, args: tuple[str, ...], message: str
) -> None:
    # When the CLI is given a bad scope
    result = invoke(redis_cluster, cli.pause, *args)

    # Then it exits 2 naming the problem, and nothing was written
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert celery_pause.status(redis_cluster.app).state.generation == 0


def test_names_that_match_nothing_known_are_recorded_with_a_warning(redis_cluster: Cluster) -> None:
    # When a task pattern no task matches and a worker no live worker matches are paused
    result = invoke(redis_cluster, cli.pause, "--tasks", "nosuch.*", "-d", "ghost@*")

    # Then both are recorded, with a warning each, and the command succeeds
    assert result.exit_code == 0, result.output
    assert "task 'nosuch.*' matches no task registered in this app" in result.stderr
    assert "worker 'ghost@*' matches no live worker" in result.stderr
    (hold,) = celery_pause.status(redis_cluster.app).holds
    assert hold.scope == Scope.of(tasks=["nosuch.*"], workers=["ghost@*"])

    # And the same scope is resumed whole, through the API
    celery_pause.resume(redis_cluster.app, tasks=["nosuch.*"], workers=["ghost@*"])
    assert not celery_pause.status(redis_cluster.app).holds
