"""What the behaviour tests watch on real workers: held and scheduled tasks, and quiet."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from .harness import Cluster, Worker, started_between


def held(worker: Worker) -> int:
    """How many tasks ``worker`` holds, once it has applied the latest state."""
    return worker.wait_applied().held


def scheduled(cluster: Cluster, worker: Worker) -> int:
    """How many ETA tasks ``worker`` has scheduled (``inspect scheduled``)."""
    replies = cluster.app.control.inspect([worker.hostname], timeout=1).scheduled() or {}
    return len(replies.get(worker.hostname, []))


def stays_quiet(
    cluster: Cluster,
    since: float,
    seconds: float,
    *,
    records: Callable[[], list[dict[str, Any]]] | None = None,
) -> None:
    """Watch for ``seconds``: fail at the first task that starts after ``since``.

    Parameters:
        records: where starts are recorded (each with its ``started`` time); the
            cluster's task records by default.
    """
    read = records or cluster.records
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = started_between(read(), since, float("inf"))
        assert not started, f"tasks started while paused: {started}"
        time.sleep(0.05)


def most_at_once(spans: Sequence[Sequence[float]]) -> int:
    """The most of ``spans`` (each a start and an end) that overlap at one moment."""
    edges = sorted([(span[0], 1) for span in spans] + [(span[1], -1) for span in spans])
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return peak


def per_second(starts: list[float], since: float, until: float) -> list[int]:
    """Starts in each whole second from ``since`` to ``until``."""
    seconds = int(until - since)
    counts = [0] * seconds
    for t in starts:
        if since <= t < since + seconds:
            counts[int(t - since)] += 1
    return counts


def most_within(starts: Sequence[float], seconds: float = 1.0) -> int:
    """The most of ``starts`` in any window of ``seconds`` (half-open, sliding: each window
    opens at a start, which is where the most a window can hold are found)."""
    ordered = sorted(starts)
    most = end = 0
    for begin, at in enumerate(ordered):
        while end < len(ordered) and ordered[end] < at + seconds:
            end += 1
        most = max(most, end - begin)
    return most
