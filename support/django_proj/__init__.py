"""A Django project as users write one: ``celery.py`` beside the settings, the Celery app
configured from Django's settings under the ``CELERY`` namespace, tasks autodiscovered from
the installed apps, and django-celery-beat's database scheduler.

The tests give each run its own namespace, broker and database through ``DJANGO_PROJ_*``
environment variables (read in :mod:`.settings`).
"""

from __future__ import annotations

from .celery import app as celery_app

__all__ = ("celery_app",)
