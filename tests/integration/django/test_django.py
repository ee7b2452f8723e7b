"""A Django project, as users have one: settings under the ``CELERY`` namespace, tasks found by
``autodiscover_tasks()``, the CLI run as ``celery -A proj``, and beat on django-celery-beat's
``DatabaseScheduler`` (:mod:`support.django_proj`).

Every process runs the project as Django runs it (``DJANGO_SETTINGS_MODULE``); the test side
reads the state through a Celery app configured from the same settings, in a subprocess of its
own, since Django configures itself once per process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from support.harness import REDIS_BROKER, ROOT, wait_for
from support.services import require

PROJECT = "support.django_proj"
TASKS = f"{PROJECT}.reports.tasks"
RECORDS_URL = "redis://127.0.0.1:6379/13"
STORE_URL = "redis://127.0.0.1:6379/15"


@dataclass
class Project:
    """One run of the Django project: its namespace, database and processes."""

    tmp: Path
    namespace: str = field(default_factory=lambda: "dj" + uuid.uuid4().hex[:10])
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def env(self, **overrides: str) -> dict[str, str]:
        return {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": f"{PROJECT}.settings",
            "DJANGO_PROJ_NAMESPACE": self.namespace,
            "DJANGO_PROJ_DB": str(self.tmp / "db.sqlite3"),
            "DJANGO_PROJ_BROKER": REDIS_BROKER,
            "DJANGO_PROJ_STORE": STORE_URL,
            "PYTHONPATH": str(ROOT),
            **overrides,
        }

    @property
    def queue(self) -> str:
        return f"{self.namespace}.default"

    def celery(
        self, *args: str, timeout: float = 60, **env: str
    ) -> subprocess.CompletedProcess[str]:
        """``celery -A support.django_proj ARGS`` to its end."""
        return subprocess.run(
            [sys.executable, "-m", "celery", "-A", PROJECT, *args],
            cwd=ROOT,
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def python(self, code: str) -> Any:
        """Run ``code`` in the project (Django set up, the Celery app as ``app``); the JSON
        it prints."""
        prelude = (
            "import django, json; django.setup()\n"
            f"from {PROJECT} import celery_app as app\n"
            "import celery_pause\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", prelude + code],
            cwd=ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    def start(self, *args: str, log: str, **env: str) -> subprocess.Popen[bytes]:
        """``celery -A support.django_proj ARGS`` in the background, output to ``log``."""
        with open(self.tmp / log, "ab") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", PROJECT, *args],
                cwd=ROOT,
                env=self.env(**env),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.processes.append(process)
        return process

    def worker(self) -> subprocess.Popen[bytes]:
        worker = self.start(
            "worker", "-n", f"w1@{self.namespace}", "-Q", self.queue, "-c", "2",
            "--without-mingle", "--without-gossip", "-l", "info", log="worker.log",
        )  # fmt: skip
        wait_for(self.worker_reports, timeout=60, what="the worker to report to the store")
        return worker

    def worker_reports(self) -> list[str]:
        code = "print(json.dumps([w.hostname for w in celery_pause.status(app).workers]))"
        return list(self.python(code))

    def log(self, name: str) -> str:
        with suppress(OSError):
            return (self.tmp / name).read_text(errors="replace")
        return ""

    def records(self) -> list[dict[str, Any]]:
        client = redis.Redis.from_url(RECORDS_URL)
        key = f"celery-pause-test:{self.namespace}:records"
        return [json.loads(raw) for raw in client.lrange(key, 0, -1)]

    def send(self, count: int, duration: float = 0.0) -> list[str]:
        """Queue ``count`` reports the way a Django view would (``.delay``)."""
        code = (
            f"from {TASKS} import build_report\n"
            f"print(json.dumps([build_report.delay(i, {duration}).id for i in range({count})]))"
        )
        return list(self.python(code))

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                with suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
        client = redis.Redis.from_url(STORE_URL)
        for key in client.scan_iter(f"celery-pause-test:{self.namespace}*"):
            client.delete(key)


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    require("Redis", "127.0.0.1", 6379)
    run = Project(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "django", "migrate", "-v", "0"],
        cwd=ROOT,
        env=run.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    yield run
    run.close()


def test_a_django_project_pauses_its_autodiscovered_tasks_from_the_cli(project: Project) -> None:
    # Given a worker of the project, which says at start that the pause step is active ...
    project.worker()
    assert "celery-pause: active; store redis://127.0.0.1:6379/15" in project.log("worker.log")
    # ... busy with a backlog it has partly prefetched
    sent = project.send(12, duration=0.3)
    wait_for(lambda: project.records(), timeout=30, what="the first report to start")

    # When an operator pauses the project's tasks by pattern and waits
    paused = project.celery("pause", "--tasks", f"{TASKS}.*", "--reason", "deploy", "--wait")

    # Then the CLI confirms without warning that the pattern matches nothing ...
    assert paused.returncode == 0, paused.stdout + paused.stderr
    assert "Confirmed by 1 worker" in paused.stdout
    assert "matches no task" not in paused.stdout + paused.stderr
    # ... and nothing starts while paused, prefetched tasks included
    started = len(project.records())
    assert started < len(sent), "the whole backlog ran before the pause"
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        assert len(project.records()) == started, "a task started while paused"
        time.sleep(0.05)

    # When the operator resumes, Then every report runs exactly once
    resumed = project.celery("resume")
    assert resumed.returncode == 0, resumed.stderr
    wait_for(lambda: len(project.records()) >= len(sent), timeout=60, what="the backlog to run")
    assert sorted(r["id"] for r in project.records()) == sorted(sent)


def test_a_misspelt_task_name_warns_and_strict_refuses_it(project: Project) -> None:
    # When an operator pauses a task name the project does not define
    typo = project.celery("pause", "--tasks", f"{TASKS}.build_reprot")

    # Then the pause is recorded with a warning that names it
    assert typo.returncode == 0, typo.stderr
    assert f"task '{TASKS}.build_reprot' matches no task registered" in typo.stderr

    # And with --strict it is refused and nothing is written
    strict = project.celery("pause", "--tasks", f"{TASKS}.build_repor", "--strict")
    assert strict.returncode == 2, strict.stdout + strict.stderr
    assert "matches no task registered" in strict.stderr
    holds = project.python("print(json.dumps([h.id for h in celery_pause.status(app).holds]))")
    assert len(holds) == 1, "--strict wrote a hold"


def test_a_setting_is_named_as_the_django_project_spells_it(project: Project) -> None:
    # When the CLI and a worker run with an unusable CELERY_PAUSE_POLL_INTERVAL
    status = project.celery("pause", "status", DJANGO_PROJ_POLL="0")
    worker = project.celery("worker", "-Q", project.queue, DJANGO_PROJ_POLL="0")

    # Then both refuse, naming the setting as settings.py spells it
    for refused in (status, worker):
        assert refused.returncode != 0
        assert "CELERY_PAUSE_POLL_INTERVAL must be positive" in refused.stderr + refused.stdout
        assert "pause_poll_interval" not in refused.stderr + refused.stdout


def test_beat_on_the_database_scheduler_skips_while_paused(project: Project) -> None:
    # Given a one-second periodic task stored in django-celery-beat's tables, a worker, and beat
    # running the DatabaseScheduler
    project.python(
        "from django_celery_beat.models import IntervalSchedule, PeriodicTask\n"
        "every, _ = IntervalSchedule.objects.get_or_create(every=1, period='seconds')\n"
        "PeriodicTask.objects.create(name='dashboard', interval=every,\n"
        f"    task='{TASKS}.refresh_dashboard', queue=app.conf.task_default_queue)\n"
        "print(json.dumps(True))"
    )
    project.worker()
    beat = project.start("beat", "-l", "info", log="beat.log")
    wait_for(lambda: len(project.records()) >= 2, timeout=60, what="beat's runs to start")

    # When the queue is paused with the beat policy "skip"
    project.python(
        "celery_pause.pause(app, queues=[app.conf.task_default_queue], beat='skip', wait=True)\n"
        "print(json.dumps(True))"
    )
    paused_at = time.time()

    # Then beat skips its runs (it logs each), and none reaches the worker
    wait_for(
        lambda: project.log("beat.log").count("beat skipped dashboard") >= 3,
        timeout=30,
        what="beat to skip three runs",
    )
    assert beat.poll() is None, project.log("beat.log")
    resumed_at = time.time()
    skipped = [r for r in project.records() if paused_at + 1 <= r["started"] <= resumed_at]
    assert not skipped, f"runs reached the worker while paused: {skipped}"

    # And after the resume beat sends again, and the history counts the skipped runs
    project.celery("resume")
    wait_for(
        lambda: [r for r in project.records() if r["started"] > resumed_at],
        timeout=30,
        what="beat's runs to start again",
    )
    counts = project.python(
        "print(json.dumps([e.skipped for e in celery_pause.history(app) if e.action == 'skip']))"
    )
    assert counts and counts[0]["dashboard"] >= 3
