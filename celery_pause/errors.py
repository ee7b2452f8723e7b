"""Errors raised by celery-pause, all under :class:`PauseError`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from celery.exceptions import ImproperlyConfigured
from click import ClickException

if TYPE_CHECKING:
    from .api.results import PauseResult
    from .model.report import WorkerReport
    from .model.state import Hold


class PauseError(Exception):
    """Base class of every celery-pause error."""


class ConfigurationError(PauseError, ImproperlyConfigured):
    """A setting is missing or has a value celery-pause cannot use."""


class WorkerRefused(ConfigurationError, ClickException):
    """A worker cannot run celery-pause as configured; ``celery worker`` prints the reason
    and exits 1, as for its own command-line errors, without a traceback."""

    def __init__(self, message: str) -> None:
        ConfigurationError.__init__(self, message)
        ClickException.__init__(self, message)


class InvalidWindow(ConfigurationError):
    """A maintenance window in ``pause_windows`` is malformed, never ends, never fires or
    clashes with another."""


class StoreError(PauseError):
    """The pause store could not be read or written."""


class UnreadableRecord(StoreError):
    """A store record is not the JSON object it should be (damaged, or written by another
    program)."""


class SchemaError(StoreError):
    """The store's tables have a layout (schema version) this release cannot use."""


class AlreadyPaused(PauseError):
    """The scope already has a manual hold; pass ``force=True`` to replace it."""

    def __init__(self, holds: list[Hold]) -> None:
        self.holds = holds
        super().__init__(
            "already paused: "
            + "; ".join(hold.describe() for hold in holds)
            + " (use force=True to replace)"
        )


class PauseTimeout(PauseError):
    """The cluster did not confirm the pause in time; the pause stays in effect."""

    def __init__(
        self,
        timeout: float,
        busy: dict[str, list[str]],
        *,
        paused: PauseResult | None = None,
        silent: dict[str, float] | None = None,
    ) -> None:
        self.timeout = timeout
        self.busy = busy
        self.paused = paused
        """The pause that was recorded, when raised by :func:`celery_pause.pause`."""
        self.silent = silent or {}
        """Workers among ``busy`` that stopped reporting: seconds since they last did."""
        super().__init__(f"pause not confirmed within {timeout:g}s: {self._detail()}")

    @classmethod
    def of(cls, timeout: float, busy: Sequence[WorkerReport]) -> PauseTimeout:
        """The timeout for the workers ``busy``, which did not confirm."""
        return cls(
            timeout,
            {w.hostname: list(w.running) for w in busy},
            silent={w.hostname: w.silent for w in busy if w.silent},
        )

    def _detail(self) -> str:
        parts = []
        for host, tasks in sorted(self.busy.items()):
            if host in self.silent:
                said = f"was running {len(tasks)}" if tasks else "had not confirmed the pause"
                parts.append(f"{host}: lost contact {self.silent[host]:.0f}s ago, {said}")
            else:
                parts.append(
                    f"{host}: " + (", ".join(tasks) if tasks else "has not applied the pause")
                )
        return "; ".join(parts)


class InvalidInput(PauseError, ValueError):
    """An argument (duration, date, queue name, reason) is not acceptable."""
