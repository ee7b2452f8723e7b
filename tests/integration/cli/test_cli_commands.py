"""The real ``celery -A support.proj pause | resume | pause status`` commands, as run by hand."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import time
from importlib.metadata import entry_points

import pytest

import celery_pause
from support.harness import ROOT, Cluster, wait_for


@pytest.fixture(autouse=True)
def installed() -> None:
    """The commands exist only once the package is installed (``pip install -e .``)."""
    names = {ep.name for ep in entry_points(group="celery.commands")}
    if not {"pause", "resume"} <= names:
        message = "celery-pause is not installed: its celery.commands entry points are missing"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "support.proj", *args]


def celery(cluster: Cluster, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command(*args), cwd=ROOT, env={**cluster.env(), **env},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_pause_status_resume_through_celery(redis_cluster: Cluster) -> None:
    # Given a live worker
    worker = redis_cluster.worker("w1")
    worker.wait_applied()

    # When the operator pauses and waits
    paused = celery(
        redis_cluster, "pause", "--wait", "--reason", "Deploying v2.0", "--by", "alice@ops"
    )

    # Then the pause is confirmed by that worker
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.startswith("Paused all queues: running tasks will finish")
    assert "Confirmed by 1 worker: nothing in scope is running." in paused.stdout

    # And status shows it, as text and as JSON
    text = celery(redis_cluster, "pause", "status")
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("State: PAUSED (all queues) since ")
    assert '  hold  manual  on all queues  by alice@ops  "Deploying v2.0"' in text.stdout
    assert f"  {worker.hostname}  paused  applied gen 1  running 0 (0 in scope)" in text.stdout
    doc = json.loads(celery(redis_cluster, "pause", "status", "--json").stdout)
    assert (doc["state"], doc["generation"], doc["totals"]["paused"]) == ("PAUSED", 1, 1)

    # And a second pause is refused with exit 1 and the --force hint
    again = celery(redis_cluster, "pause")
    assert again.returncode == 1
    assert "already paused" in again.stderr and "--force" in again.stderr
    assert "celery -A support.proj resume" in again.stderr

    # And a usage error exits 2 naming the option
    usage = celery(redis_cluster, "pause", "--force", "--resume-after", "whenever")
    assert usage.returncode == 2
    assert "--resume-after" in usage.stderr and "not a duration" in usage.stderr

    # When resumed, the worker applies it
    resumed = celery(redis_cluster, "resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "All queues flow again." in resumed.stdout
    worker.wait_applied(2)
    assert celery_pause.status(redis_cluster.app).paused.everything is False


def test_unreachable_store_through_celery_masks_the_password(redis_cluster: Cluster) -> None:
    result = celery(
        redis_cluster, "pause", "status", PAUSE_TEST_STORE="redis://:hunter2@127.0.0.1:1/0"
    )
    assert result.returncode == 1
    assert "redis://:**@127.0.0.1:1/0" in result.stderr
    assert "hunter2" not in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def interrupted(cluster: Cluster, *args: str) -> tuple[int, str]:
    """Run ``celery <args>`` until it shows its wait's progress, then press Ctrl-C: its exit
    code and what it wrote to stderr."""
    waiting = subprocess.Popen(
        command(*args), cwd=ROOT, env=cluster.env(),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_for(
            lambda: "Waiting:" in (waiting.stdout.readline() if waiting.stdout else ""),
            timeout=60, what="progress",
        )  # fmt: skip
        waiting.send_signal(signal.SIGINT)
        _, err = waiting.communicate(timeout=30)
    finally:
        if waiting.poll() is None:
            waiting.kill()
    return waiting.returncode, err


def test_ctrl_c_while_waiting_keeps_the_pause(redis_cluster: Cluster) -> None:
    # Given a worker busy with a long task, and an operator waiting for the pause
    worker = redis_cluster.worker("w1")
    worker.wait_applied()
    redis_cluster.send("long", 3.0)
    redis_cluster.wait_records(1)

    # When they press Ctrl-C while it waits
    code, err = interrupted(redis_cluster, "pause", "--wait")

    # Then the command stops with 130, saying the pause stays, and it does
    assert code == 130, err
    assert "Stopped waiting. The pause stays in effect." in err
    assert celery_pause.status(redis_cluster.app).paused.everything


def test_ctrl_c_while_waiting_for_a_throttle_keeps_the_limit(redis_cluster: Cluster) -> None:
    # Given a worker frozen after it started (it cannot confirm), and an operator waiting for
    # a limit
    worker = redis_cluster.worker("w1")
    worker.wait_applied()
    assert worker.proc is not None
    os.kill(worker.proc.pid, signal.SIGSTOP)
    try:
        # When they press Ctrl-C while it waits
        code, err = interrupted(redis_cluster, "throttle", "--concurrency", "2", "--wait")
    finally:
        os.kill(worker.proc.pid, signal.SIGCONT)

    # Then the command stops with 130, saying the limit stays, and it does
    assert code == 130, err
    assert "Stopped waiting. The limit stays in effect." in err
    limits = celery_pause.status(redis_cluster.app).state.limits(time.time())
    assert [hold.limit.concurrency for hold in limits if hold.limit] == [2]


def test_wait_redraws_its_progress_in_place_on_a_terminal(redis_cluster: Cluster) -> None:
    # Given a worker busy with a task, and the command's output on a terminal
    worker = redis_cluster.worker("w1")
    worker.wait_applied()
    task_id = redis_cluster.send("busy", 2.0)
    redis_cluster.wait_records(1)
    controller, terminal = pty.openpty()
    waiting = subprocess.Popen(
        command("pause", "--wait"), cwd=ROOT, env=redis_cluster.env(),
        stdin=subprocess.DEVNULL, stdout=terminal, stderr=terminal,
    )  # fmt: skip
    os.close(terminal)

    # When the pause is confirmed
    screen = b""
    try:
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # the terminal closed: the command is done
                break
            if not chunk:
                break
            screen += chunk
        assert waiting.wait(60) == 0, screen.decode(errors="replace")
    finally:
        os.close(controller)
        if waiting.poll() is None:
            waiting.kill()

    # Then the progress named the task, was erased in place, and the confirmation is left
    text = screen.decode(errors="replace")
    assert f"finishing 1: support.proj.record[{task_id[:8]}]" in text
    assert "\x1b[F\x1b[K" in text
    assert text.rstrip().endswith("Confirmed by 1 worker: nothing in scope is running.")


def test_a_ramped_resume_through_celery(redis_cluster: Cluster) -> None:
    # Given queue a paused, with a worker on it
    worker = redis_cluster.worker("w1", queues=[redis_cluster.queue("a")])
    worker.wait_applied()
    queue = redis_cluster.queue("a")
    assert celery(redis_cluster, "pause", "-Q", queue).returncode == 0

    # When the operator resumes it over ten minutes
    resumed = celery(redis_cluster, "resume", "-Q", queue, "--ramp", "10m")

    # Then the resume says so, status shows the ramp, and the worker applies it
    assert resumed.returncode == 0, resumed.stderr
    assert f"Ramping up: the start rate of queue {queue} rises to 100 tasks/s until " in (
        resumed.stdout
    )
    assert f"Queue {queue} flows again." in resumed.stdout
    text = celery(redis_cluster, "pause", "status").stdout
    assert "Ramping (a pause wins at once):" in text
    assert f"  queue {queue}: 0% through a ramp of 10 minutes, at 0." in text
    (ramp,) = json.loads(celery(redis_cluster, "pause", "status", "--json").stdout)["ramps"]
    scope = [{"queues": [queue], "tasks": None, "workers": None}]
    assert (ramp["scope"], ramp["duration"], "sharers" in ramp) == (scope, 600.0, False)
    assert 0 <= ramp["progress"] < 0.05 and ramp["rate"] < 5
    worker.wait_applied(2)

    # And a ramp longer than a day, or on a queue that flows, is refused; nothing changes
    too_long = celery(redis_cluster, "resume", "-Q", queue, "--ramp", "2d")
    flowing = celery(redis_cluster, "resume", "-Q", queue, "--ramp", "1m")
    assert too_long.returncode == 2 and "at most a day (86400 s), got 172800 s" in too_long.stderr
    assert flowing.returncode == 2 and f"nothing to ramp: queue {queue} is not paused" in (
        flowing.stderr
    )
    assert celery_pause.status(redis_cluster.app).state.generation == 2
