"""``celery pause status`` run from the test side names the worker containers."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from celery_pause.contrib.pytest import PauseSetup

from .conftest import ROOT

# The celery command, with the tier's guard in its process too.
GUARDED_CELERY = (
    "import sys; from tests.containers import guard; guard.install(); "
    "from celery.__main__ import main; sys.argv[0] = 'celery'; main()"
)


@pytest.fixture
def celery_worker_cluster(two_workers: Any) -> Any:
    return two_workers


def test_pause_status_names_every_worker_container(celery_pause_setup: PauseSetup) -> None:
    # Given two worker containers that confirmed a pause
    celery_pause_setup.pause(reason="cli check")
    app = celery_pause_setup.app
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "CELERY_APP_MAIN": app.main,
        "CELERY_BROKER_URL": app.conf.broker_url,
    }
    if app.conf.get("pause_store_url"):
        env["CELERY_PAUSE_STORE_URL"] = app.conf.pause_store_url

    # When the operator's command runs on the test side
    command = [sys.executable, "-c", GUARDED_CELERY, "-A", "tests.containers.cli_app"]
    done = subprocess.run(
        [*command, "pause", "status"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    # Then it shows the pause and names both containers' workers
    assert done.returncode == 0, done.stderr
    assert "cli check" in done.stdout, done.stdout
    for name in celery_pause_setup.nodenames():
        assert name in done.stdout, done.stdout
