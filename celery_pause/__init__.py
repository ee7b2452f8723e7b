"""A persistent, cluster-wide pause switch for Celery workers."""

from __future__ import annotations

from celery import Celery

# Every import-time side effect of the package, here alone: importing beat connects
# its beat_init handler, importing control registers the remote commands, importing
# api.overload connects its task_retry handler, and censor_store_url() (called below)
# has Celery mask pause_store_url.
from . import beat, control  # noqa: F401
from .api import pause, resume, spend, status, throttle
from .api.overload import Overloaded
from .api.results import ClusterStatus, PauseResult, ResumeResult, ThrottleResult
from .api.sending import park_at_send
from .breaker.circuit import CircuitBreaker
from .breaker.status import BreakerStatus, breaker_status, breaker_statuses
from .breaker.task import BreakerTask
from .errors import (
    AlreadyPaused,
    ConfigurationError,
    InvalidInput,
    InvalidWindow,
    PauseError,
    PauseTimeout,
    SchemaError,
    StoreError,
    UnreadableRecord,
)
from .history import HistoryEntry, format_history, history
from .model.limit import Limit
from .model.report import WorkerReport
from .model.scope import Scope
from .model.state import Hold, PauseState
from .settings import censor_store_url
from .step import PauseStep

censor_store_url()

__version__ = "0.2.0.dev0"

__all__ = (
    "AlreadyPaused",
    "BreakerStatus",
    "BreakerTask",
    "CircuitBreaker",
    "ClusterStatus",
    "ConfigurationError",
    "HistoryEntry",
    "Hold",
    "InvalidInput",
    "InvalidWindow",
    "Limit",
    "Overloaded",
    "PauseError",
    "PauseResult",
    "PauseState",
    "PauseStep",
    "PauseTimeout",
    "ResumeResult",
    "SchemaError",
    "Scope",
    "StoreError",
    "ThrottleResult",
    "UnreadableRecord",
    "WorkerReport",
    "breaker_status",
    "breaker_statuses",
    "format_history",
    "history",
    "install",
    "pause",
    "resume",
    "spend",
    "status",
    "throttle",
)


def install(app: Celery) -> Celery:
    """Add :class:`PauseStep` to ``app``'s worker consumer
    (``app.steps["consumer"].add(PauseStep)``), and, with ``pause_park_at_send = True``,
    have ``app`` send a task whose scope is paused straight to its parking queue.

    Parameters:
        app: The Celery app whose workers take part in the pause.

    Returns:
        ``app``, so that ``app = install(Celery(...))`` reads as one line.
    """
    app.steps["consumer"].add(PauseStep)
    park_at_send(app)
    return app
