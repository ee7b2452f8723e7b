"""Errors raised by celery-pause, all under :class:`PauseError`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from celery.exceptions import ImproperlyConfigured
from click import ClickException

if TYPE_CHECKING:
    from .api.results import PauseResult
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
        self, timeout: float, busy: dict[str, list[str]], *, paused: PauseResult | None = None
    ) -> None:
        self.timeout = timeout
        self.busy = busy
        self.paused = paused
        """The pause that was recorded, when raised by :func:`celery_pause.pause`."""
        detail = "; ".join(
            f"{host}: " + (", ".join(tasks) if tasks else "has not applied the pause")
            for host, tasks in sorted(busy.items())
        )
        super().__init__(f"pause not confirmed within {timeout:g}s: {detail}")


class InvalidInput(PauseError, ValueError):
    """An argument (duration, date, queue name, reason) is not acceptable."""
