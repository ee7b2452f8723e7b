"""The operator's tools: ``celery -A proj pause``, ``resume``, ``pause status``,
``pause serve`` and ``pause init-store``, registered through Celery's
``celery.commands`` entry points."""

from .commands import pause, resume

__all__ = ("pause", "resume")
