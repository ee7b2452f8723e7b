"""Store time is extrapolated from a monotonic clock: a step of a process's wall clock
(libfaketime, mid-run) leaves its estimate of the store's clock where it was."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from celery_pause.model.outcome import Outcome
from celery_pause.stores.base import Store
from support.harness import ROOT
from support.services import require
from support.stores import ADAPTERS, make_store

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
TOLERANCE = 1.0
"""Seconds the estimate may differ from the store's clock."""
REPORTER = """
import json, sys
from support.stores import make_store
store = make_store(*sys.argv[1:4])
for line in sys.stdin:
    print(json.dumps(store.now()), flush=True)
"""


def store_clock(store: Store) -> float:
    """The store's clock, read by the store itself (inside a transaction)."""
    return store.update(lambda state, now: Outcome(None, now)).result


@pytest.mark.skipif(not LIBFAKETIME.exists(), reason="needs libfaketime: apt-get install faketime")
@pytest.mark.parametrize("shift", ["+1h", "-1h"])
@pytest.mark.parametrize("kind", ["redis", "postgresql"])
def test_a_wall_clock_step_leaves_the_store_time_estimate_in_place(
    kind: str, shift: str, tmp_path: Path
) -> None:
    # Given a process whose wall clock libfaketime can step, estimating the store's clock
    adapter = ADAPTERS[kind]
    assert adapter.service is not None
    require(adapter.service[0], "127.0.0.1", adapter.service[1])
    url, prefix = adapter.url(tmp_path), f"celery-pause-test:{uuid.uuid4().hex[:10]}"
    fake = tmp_path / "faketime"
    fake.write_text("+0\n")
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "LD_PRELOAD": str(LIBFAKETIME),
        "FAKETIME_TIMESTAMP_FILE": str(fake),
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }
    store = make_store(kind, url, prefix)
    command = [sys.executable, "-c", REPORTER, kind, url, prefix]
    with subprocess.Popen(
        command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as reporter:
        assert reporter.stdin is not None and reporter.stdout is not None
        try:

            def estimate() -> float:
                assert reporter.stdin is not None and reporter.stdout is not None
                reporter.stdin.write("now\n")
                reporter.stdin.flush()
                return float(json.loads(reporter.stdout.readline()))

            before = estimate()
            assert abs(before - store_clock(store)) < TOLERANCE

            # When its wall clock steps by an hour
            fake.write_text(f"{shift}\n")

            # Then its estimate of the store's clock stays within a second of the store's
            after = estimate()
            assert abs(after - store_clock(store)) < TOLERANCE, (
                f"off by {after - store_clock(store):.0f}s"
            )
        finally:
            reporter.stdin.close()
            reporter.wait(timeout=10)
            store.close()
            adapter.purge(url, prefix)
