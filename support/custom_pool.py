"""A pool from outside Celery, as ``-P custom`` with ``CELERY_CUSTOM_WORKER_POOL`` loads one.

It runs tasks as Celery's threads pool does, so it takes prefetched tasks in at
once; celery-pause cannot check a foreign pool's internals and must say so.
"""

from __future__ import annotations

from celery.concurrency.thread import TaskPool as ThreadsPool


class TaskPool(ThreadsPool):  # type: ignore[misc]
    """The tests' third-party pool."""
