"""The store contract: one shared pause state and the workers' reports."""

from __future__ import annotations

import json
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kombu.utils.url import sanitize_url

from ..errors import InvalidInput
from ..report import WorkerReport
from ..state import PauseState

LOG_NAME = re.compile(r"[a-z][a-z0-9_-]{0,63}\Z")

Change = Callable[[PauseState, float], PauseState | None]
"""Given the current state and store time, the next state, or ``None`` for no change."""


@dataclass(frozen=True)
class Snapshot:
    """The state as read, with the store's clock at the time of reading."""

    state: PauseState
    now: float


class Store(ABC):
    """Where the pause state lives. Implementations must make :meth:`update` atomic."""

    def __init__(self, url: str, prefix: str) -> None:
        self.url = url
        self.prefix = prefix

    @property
    def display_url(self) -> str:
        """The URL with any password masked, safe to print."""
        return sanitize_url(self.url)

    @abstractmethod
    def now(self) -> float:
        """The store's clock, in seconds since the epoch."""

    @abstractmethod
    def read(self) -> Snapshot:
        """The current state and store time."""

    @abstractmethod
    def update(self, change: Change) -> tuple[Snapshot, bool]:
        """Apply ``change`` atomically; return the resulting snapshot and whether it changed.

        ``change`` may be called more than once (on contention) and must be pure.
        """

    @abstractmethod
    def put_worker(self, report: WorkerReport) -> None:
        """Record a worker's report."""

    @abstractmethod
    def remove_worker(self, hostname: str) -> None:
        """Forget a worker that shut down."""

    @abstractmethod
    def worker_reports(self) -> list[WorkerReport]:
        """Every recorded worker report, live or stale."""

    def append_log(self, log: str, entry: Mapping[str, Any], *, keep: int) -> None:
        """Append ``entry`` (a JSON object) to the list ``log``, keeping the newest ``keep``.

        Independent of :meth:`update`: it neither takes part in nor waits for a
        state change, so it may be called right after one.
        """
        raise NotImplementedError(f"{type(self).__name__} keeps no logs")

    def read_log(self, log: str, *, limit: int | None = None) -> list[dict[str, Any]]:
        """The newest ``limit`` entries of ``log`` (every kept one by default), newest first."""
        raise NotImplementedError(f"{type(self).__name__} keeps no logs")

    def close(self) -> None:  # noqa: B027  (optional hook)
        """Release connections or files."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.display_url} prefix={self.prefix!r}>"


class ClockOffset:
    """The store's clock, read once a minute and extrapolated locally in between."""

    def __init__(self, read_clock: Callable[[], float], refresh: float = 60.0) -> None:
        self._read_clock = read_clock
        self._refresh = refresh
        self._offset = 0.0
        self._read_at = float("-inf")

    def now(self) -> float:
        local = time.time()
        if time.monotonic() - self._read_at > self._refresh:
            self._offset = self._read_clock() - local
            self._read_at = time.monotonic()
        return local + self._offset


def check_log_name(log: str) -> str:
    """A log name: lower-case letters, digits, ``-`` and ``_``, used in keys and file names."""
    if not LOG_NAME.match(log):
        raise InvalidInput(f"not a log name: {log[:40]!r}")
    return log


def encode_entry(entry: Mapping[str, Any]) -> bytes:
    """One log entry as compact single-line JSON."""
    try:
        return json.dumps(dict(entry), separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"log entries must be JSON objects: {exc}") from None


def decode_entry(raw: bytes | str) -> dict[str, Any]:
    """A stored log entry; something that is not one is reported, not dropped."""
    try:
        entry = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        return {"unreadable": f"{exc}"[:200]}
    if not isinstance(entry, dict):
        return {"unreadable": f"expected an object, got {type(entry).__name__}"}
    return entry
