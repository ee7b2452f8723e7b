"""A persistent, cluster-wide pause switch for Celery workers."""

from __future__ import annotations

from celery import Celery

from .api import ClusterStatus, PauseResult, ResumeResult, pause, resume, status
from .bootstep import PauseStep
from .errors import (
    AlreadyPaused,
    ConfigurationError,
    InvalidInput,
    PauseError,
    PauseTimeout,
    StoreError,
)
from .journal import HistoryEntry, format_history, history
from .report import WorkerReport
from .state import Hold, PauseState, Scope

__version__ = "0.1.0"

__all__ = (
    "AlreadyPaused",
    "ClusterStatus",
    "ConfigurationError",
    "HistoryEntry",
    "Hold",
    "InvalidInput",
    "PauseError",
    "PauseResult",
    "PauseState",
    "PauseStep",
    "PauseTimeout",
    "ResumeResult",
    "Scope",
    "StoreError",
    "WorkerReport",
    "format_history",
    "history",
    "install",
    "pause",
    "resume",
    "status",
)


def install(app: Celery) -> Celery:
    """Add :class:`PauseStep` to ``app``'s worker consumer; the same as
    ``app.steps["consumer"].add(PauseStep)``."""
    app.steps["consumer"].add(PauseStep)
    return app
