"""Live progress of ``pause --wait``: redrawn in place on a terminal, plain lines elsewhere;
and the lines of its outcome when it counted lost workers."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TextIO

from ..api.results import PauseResult
from ..model.formatting import printable
from ..model.report import APPLIED, WorkerReport
from .render import pause_lines, progress_lines, task_label

Heading = Callable[[PauseResult], list[str]]

REDRAW_EVERY = 0.1
"""Seconds between redraws on a terminal."""
ERASE_LINE_ABOVE = "\x1b[F\x1b[K"


class LiveProgress:
    """A ``progress`` callback for :func:`celery_pause.pause` with ``wait=True``.

    It first prints what the pause does, once; then the workers' progress. On a
    terminal that block is redrawn in place (at most every :data:`REDRAW_EVERY`
    seconds); elsewhere (logs, pipes) each change is printed once.
    """

    def __init__(
        self,
        *,
        stream: TextIO,
        tty: bool,
        clock: Callable[[], float] = time.monotonic,
        heading: Heading = pause_lines,
        what: str = "pause",
    ) -> None:
        """``heading`` says what the recorded hold does (once); ``what`` names it in the
        progress lines (``pause``, ``limit``)."""
        self.paused: PauseResult | None = None
        self.heading = heading
        self.what = what
        self.stream = stream
        self.tty = tty
        self.clock = clock
        self.last: list[WorkerReport] = []
        self._shown: list[str] = []
        self._height = 0
        self._drawn_at = float("-inf")

    def __call__(self, paused: PauseResult, workers: Sequence[WorkerReport]) -> None:
        if self.paused is None:
            self.paused = paused
            self._write(self.heading(paused))
        self.last = list(workers)
        lines = progress_lines(workers, paused.generation, self.what)
        if lines == self._shown:
            return
        if self.tty:
            if self.clock() - self._drawn_at < REDRAW_EVERY:
                return
            self._erase()
            self._height = len(lines)
            self._drawn_at = self.clock()
        self._write(lines)
        self._shown = lines

    def close(self) -> None:
        """Remove the live block from a terminal, leaving room for the final word."""
        if self.tty:
            self._erase()
        self._shown = []

    def _erase(self) -> None:
        self.stream.write(ERASE_LINE_ABOVE * self._height)
        self.stream.flush()
        self._height = 0

    def _write(self, lines: Sequence[str]) -> None:
        self.stream.write("".join(printable(line) + "\n" for line in lines))
        self.stream.flush()


def confirmed_line(result: PauseResult, what: str = "pause") -> str:
    """``Confirmed by 3 workers: …``, after a wait; it counts the :attr:`~PauseResult.lost`
    workers apart."""
    lost = result.lost
    count = len(result.workers) - len(lost)
    if not lost:
        done = "nothing in scope is running" if what == "pause" else "the limit is in force"
        return f"Confirmed by {count} worker{'s' if count != 1 else ''}: {done}."
    them = "itself" if len(lost) == 1 else "themselves"
    done = "nothing in scope starts anywhere" if what == "pause" else "the limit is in force"
    return (
        f"Confirmed by {count} of {len(result.workers)} workers, {len(lost)} lost contact and "
        f"fenced {them}: {done}."
    )


def lost_lines(result: PauseResult, hint: str, what: str = "pause") -> list[str]:
    """The lost workers a wait counted: each fenced (it starts nothing), and what it last
    reported running, which a worker cut off rather than dead may still be finishing."""
    lost = result.lost
    one = len(lost) == 1
    who, it, itself = (
        ("1 worker", "it", "itself") if one else (f"{len(lost)} workers", "they", "themselves")
    )
    lines = [
        f"lost contact with {who} before {it} confirmed the {what}; silent for over "
        f"pause_worker_ttl + pause_lease, {it} fenced {itself} and start{'s' if one else ''} "
        "nothing, but a worker cut off rather than dead may still be finishing what it ran:"
    ]
    lines.extend(f"  {r.hostname}  {fenced_text(r, result.generation, what)}" for r in lost)
    lines.append(
        f"Wait for lost workers with --wait-for-lost; follow them with `{hint} pause status`."
    )
    return lines


def fenced_text(report: WorkerReport, generation: int, what: str = "pause") -> str:
    """``lost contact 21s ago; it last reported 2 tasks running (2 in scope: …)``."""
    count = max(report.active, len(report.running))
    applied = report.status == APPLIED and report.generation >= generation
    text = f"lost contact {report.silent:.0f}s ago"
    if not applied:
        text += f", before it applied the {what}"
    text += f"; it last reported {count} task{'s' if count != 1 else ''} running"
    if report.running:
        labels = [task_label(report, i, full=True) for i in range(len(report.running))]
        scope = "scope" if applied else "scope it had applied"
        text += f" ({len(labels)} in the {scope}: {', '.join(labels)})"
    return text
