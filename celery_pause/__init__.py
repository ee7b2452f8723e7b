"""A persistent, cluster-wide pause switch for Celery workers."""

from __future__ import annotations

from celery import Celery

from .api import ClusterStatus, PauseResult, ResumeResult, pause, resume, status
from .bootstep import PauseStep
from .breaker import BreakerStatus, BreakerTask, CircuitBreaker, breaker_statuses
from .breaker_step import BreakerStep
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
    "BreakerStatus",
    "BreakerStep",
    "BreakerTask",
    "CircuitBreaker",
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
    "breaker_statuses",
    "format_history",
    "history",
    "install",
    "pause",
    "resume",
    "status",
)


def install(app: Celery) -> Celery:
    """Add :class:`PauseStep` to ``app``'s worker consumer; the same as
    ``app.steps["consumer"].add(PauseStep)``. :class:`BreakerStep` comes along:
    it does nothing unless a task uses a :class:`CircuitBreaker`."""
    app.steps["consumer"].add(PauseStep)
    app.steps["consumer"].add(BreakerStep)
    return app
