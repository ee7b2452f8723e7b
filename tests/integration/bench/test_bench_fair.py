"""``python -m bench.fair --quick`` runs to the end on real workers and reports every figure.

Its figures are measured, not asserted (docs/benchmarks.rst); this rehearses the benchmark so
that it still runs when someone needs the figures.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

from support.harness import ROOT
from support.redis_server import RedisServer
from support.services import require


def numbers(figures: object) -> list[float]:
    """Every number in ``figures`` (nested dicts and lists)."""
    if isinstance(figures, dict):
        return [n for value in figures.values() for n in numbers(value)]
    if isinstance(figures, list):
        return [n for value in figures for n in numbers(value)]
    return [float(figures)] if isinstance(figures, int | float) else []


def test_the_fair_benchmark_runs_and_reports_each_figure() -> None:
    # Given redis-server to start the benchmark's private broker and store on
    require("Redis", "127.0.0.1", 6379)
    assert RedisServer.available(), "redis-server is not installed"

    # When the quick benchmark runs
    done = subprocess.run(
        [sys.executable, "-m", "bench.fair", "--quick"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        timeout=600,
        check=False,
    )

    # Then it ends well with one JSON object holding every figure, each a finite number
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    report = json.loads(done.stdout)
    figures = report["figures"]
    for case in ("fifo", "fair", "fair_without_hook"):
        assert {"b_wait_p95_s", "starts_per_s_meanwhile"} <= set(figures["flood"][case])
    assert figures["weights"]["starts"] > 0
    assert figures["alone"]["fair_per_s"] and figures["alone"]["unthrottled_per_s"]
    assert figures["alone_without_hook"]["fair_per_s"] > 0
    assert all(math.isfinite(n) for n in numbers(figures))
    assert report["conditions"]["celery"]
