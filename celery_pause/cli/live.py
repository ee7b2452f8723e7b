"""Live progress of ``pause --wait``: redrawn in place on a terminal, plain lines elsewhere."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TextIO

from ..api.results import PauseResult
from ..model.formatting import printable
from ..model.report import WorkerReport
from .render import pause_lines, progress_lines

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
