"""The operator's tools: ``celery -A proj pause``, ``throttle``, ``resume``, ``pause status``,
``pause serve`` and ``pause init-store``, registered through Celery's
``celery.commands`` entry points."""

from .commands import pause, resume
from .throttle import throttle

__all__ = ("pause", "resume", "throttle")
