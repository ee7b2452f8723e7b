"""A benchmark stopped early (SIGTERM from a timeout, Ctrl-C) stops every process it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from contextlib import suppress
from pathlib import Path

import psutil
import pytest

from support.harness import ROOT, wait_for
from support.redis_server import RedisServer
from support.services import require

MARK = "CELERY_PAUSE_BENCH_STOP_TEST"
"""An environment variable the benchmark's processes inherit: how the test finds them."""


def running(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Those of ``processes`` still running (not ended, not a zombie)."""
    found = []
    for process in processes:
        with suppress(psutil.Error):
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
    return found


def started_by(bench: subprocess.Popen[bytes], mark: str) -> list[psutil.Process]:
    """The benchmark's descendants, and any process whose environment carries ``mark``
    (a redis-server rewrites its environment for its title: only the first finds it)."""
    found: dict[int, psutil.Process] = {}
    with suppress(psutil.Error):
        found.update((p.pid, p) for p in psutil.Process(bench.pid).children(recursive=True))
    for process in psutil.process_iter():
        with suppress(psutil.Error):
            if process.pid != bench.pid and process.environ().get(MARK) == mark:
                found.setdefault(process.pid, process)
    return running(list(found.values()))


def is_worker(process: psutil.Process) -> bool:
    with suppress(psutil.Error):
        return "celery" in process.cmdline() and "worker" in process.cmdline()
    return False


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_quick_benchmark_stopped_early_leaves_no_process_running(
    stop: signal.Signals, tmp_path: Path
) -> None:
    # Given a quick benchmark that has started its servers and a worker
    require("Redis", "127.0.0.1", 6379)
    if not RedisServer.available():
        pytest.skip("redis-server is not installed")
    mark = uuid.uuid4().hex
    started: list[psutil.Process] = []
    log = tmp_path / "bench.log"  # not a pipe: a surviving child would hold it open
    with open(log, "wb") as out:
        bench = subprocess.Popen(
            [sys.executable, "-m", "bench.run", "--quick", "--json"],
            cwd=ROOT,
            env={**os.environ, MARK: mark, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.DEVNULL,
            stderr=out,
        )
    try:
        wait_for(
            lambda: any(is_worker(p) for p in started_by(bench, mark)),
            timeout=120,
            what="the benchmark to start a worker",
            interval=0.1,
        )

        # When it is stopped
        started = started_by(bench, mark)
        bench.send_signal(stop)

        # Then it exits, and no process it started is left running
        assert bench.wait(timeout=90) != 0, log.read_text(errors="replace")[-2000:]
        try:
            wait_for(
                lambda: not running([*started, *started_by(bench, mark)]),
                timeout=30,
                what="every process the benchmark started to end",
            )
        except AssertionError:
            left = [" ".join(p.cmdline()) for p in running([*started, *started_by(bench, mark)])]
            raise AssertionError(f"still running after the benchmark exited: {left}") from None
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait(10)
        for process in running(started):
            with suppress(psutil.Error):
                process.kill()
