"""The README's first command, ``python examples/demo.py``: end to end, and Ctrl-C."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType

import pytest
import redis

from support.harness import REDIS_BROKER, ROOT, wait_for
from support.services import require

DEMO = ROOT / "examples" / "demo.py"
HELD = re.compile(r"(\d+) task\(s\) received before the pause started only after the resume")
SUMMARY = re.compile(r"^ran=(\d+) started_during_pause=(\d+) lost=(\d+)$", re.MULTILINE)
HEADER = re.compile(r"celery-pause demo (\w+): ")


def require_installed() -> None:
    if not any(ep.name == "pause" for ep in entry_points(group="celery.commands")):
        message = "celery-pause is not installed (pip install -e .): the demo needs its CLI"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def demo_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that mention ``text`` (the run's id)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{entry.name}: {cmdline}")
    return found


def run_demo(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], str]:
    result = subprocess.run(
        [sys.executable, str(DEMO), *args], cwd=tmp_path, env=demo_env(),
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    header = HEADER.search(result.stdout)
    assert header, result.stdout + result.stderr
    return result, header.group(1)


@pytest.mark.parametrize("broker", ["filesystem", "redis"])
def test_demo_tells_the_whole_story_and_the_pause_holds(tmp_path: Path, broker: str) -> None:
    # Given an installed package, and (for the Redis story) a Redis server
    require_installed()
    args = []
    if broker == "redis":
        require("Redis", "127.0.0.1", 6379)
        args = ["--broker", REDIS_BROKER]

    # When the demo runs from an unrelated directory
    started = time.monotonic()
    result, run_id = run_demo(tmp_path, *args)
    took = time.monotonic() - started

    # Then it passes through every step: two workers, a CLI pause confirmed by both,
    # a restart while paused, status, resume
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    for step in (
        "both workers are up",
        "$ celery -A demo_app pause --wait",
        "| Confirmed by 2 workers: nothing in scope is running.",
        "(0 since paused)",
        "w2 is back and paused from its first moment",
        "| State: PAUSED (all queues)",
        "| All queues flow again.",
        "The pause held: nothing started while paused, nothing was lost.",
    ):
        assert step in out, f"missing {step!r} in:\n{out}"

    # And tasks a worker had received before the pause were held and started after the resume
    held = HELD.search(out)
    assert held and int(held.group(1)) >= 1, out

    # And the summary says tasks ran, none during the pause, none lost
    (summary,) = SUMMARY.findall(out)
    ran, during, lost = map(int, summary)
    assert ran > 0 and (during, lost) == (0, 0)
    assert out.rstrip().splitlines()[-1] == f"ran={ran} started_during_pause=0 lost=0"

    # And nothing it started is left running, nor left in Redis
    assert not processes_mentioning(f"demo-{run_id}")
    if broker == "redis":
        client = redis.Redis.from_url(REDIS_BROKER)
        assert not list(client.scan_iter(f"*{run_id}*"))
    print(f"demo on {broker}: {took:.1f}s, ran={ran}")


def test_ctrl_c_stops_every_process_the_demo_started(tmp_path: Path) -> None:
    # Given the demo running, with its workers up and tasks flowing
    require_installed()
    demo = subprocess.Popen(
        [sys.executable, str(DEMO)], cwd=tmp_path, env=demo_env(),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    assert demo.stdout is not None
    lines: list[str] = []
    try:
        stdout = demo.stdout

        def flowing() -> bool:
            lines.append(stdout.readline())
            return "2. Tasks flow" in lines[-1] or demo.poll() is not None

        wait_for(flowing, timeout=120, what="tasks to flow")
        header = HEADER.search("".join(lines))
        assert header, lines
        run_id = header.group(1)
        assert processes_mentioning(f"demo-{run_id}"), "the workers should be running"

        # When the user presses Ctrl-C
        os.kill(demo.pid, signal.SIGINT)
        rest, _ = demo.communicate(timeout=120)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()

    # Then it exits 130 having stopped every process it started
    assert demo.returncode == 130, "".join(lines) + rest
    assert "Interrupted: stopping every process the demo started" in rest
    assert not processes_mentioning(f"demo-{run_id}")


def load_demo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("demo_under_test", DEMO)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_demo_tally_fails_when_a_task_starts_during_the_pause_or_is_lost() -> None:
    # Given the demo's tally, a pause window [10, 20) and three tasks sent
    tally = load_demo().Tally.of
    sent = {"a", "b", "c"}

    def start(task_id: str, at: float) -> dict[str, object]:
        return {"id": task_id, "at": at, "worker": "w1"}

    # Then all three run outside the window: held
    ok = tally(sent, [start("a", 5), start("b", 9.9), start("c", 20)], 10, 20)
    assert ok.held and ok.line() == "ran=3 started_during_pause=0 lost=0"

    # And one starting inside the window: not held
    during = tally(sent, [start("a", 5), start("b", 10), start("c", 21)], 10, 20)
    assert not during.held and during.line() == "ran=3 started_during_pause=1 lost=0"

    # And one never starting: lost, not held
    lost = tally(sent, [start("a", 5), start("b", 25)], 10, 20)
    assert not lost.held and lost.line() == "ran=2 started_during_pause=0 lost=1"

    # And one starting twice: not held
    assert not tally(
        sent, [start("a", 5), start("b", 25), start("c", 26), start("c", 27)], 10, 20
    ).held
