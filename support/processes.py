"""Every process the harness starts, so that none outlives the run that started it.

A run stopped early unwinds through its ``finally`` blocks and context managers, which
stop what it started: Ctrl-C raises ``KeyboardInterrupt``, and SIGTERM (a timeout's
signal) raises ``SystemExit`` once :func:`raise_on_sigterm` is installed. Whatever is
still running at exit is killed, with its process group if it leads one (a worker and
its pool processes).
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
from contextlib import suppress
from types import FrameType
from typing import TypeVar

P = TypeVar("P", bound="subprocess.Popen[bytes]")

_running: list[subprocess.Popen[bytes]] = []


def track(process: P) -> P:
    """Register ``process`` to be killed at exit if it still runs then; ``process``."""
    if not _running:
        atexit.register(kill_all)
    _running[:] = [known for known in _running if known.poll() is None]
    _running.append(process)
    return process


def kill_all() -> None:
    """SIGKILL every registered process still running (its group if it leads one)."""
    for process in _running:
        if process.poll() is not None:
            continue
        with suppress(ProcessLookupError):
            if os.getpgid(process.pid) == process.pid:
                os.killpg(process.pid, signal.SIGKILL)
            else:
                process.kill()
        with suppress(subprocess.TimeoutExpired):
            process.wait(10)
    _running.clear()


def raise_on_sigterm() -> None:
    """Make SIGTERM raise ``SystemExit(143)`` in the main thread, as Ctrl-C raises
    ``KeyboardInterrupt``, so that a run killed by a timeout stops what it started."""

    def stop(signum: int, frame: FrameType | None) -> None:
        # A second SIGTERM must not cut the clean-up short; SIGKILL still can.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
