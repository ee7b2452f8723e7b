"""Signals sent by the worker when it applies a change of the pause state.

Connect to them like Celery's own::

    @celery_pause.signals.worker_paused.connect
    def on_paused(sender, generation, scope, holds, **kwargs): ...

``sender`` is the worker's consumer. Handlers run on the consumer's event loop:
keep them short. Exceptions are logged, never raised into the worker.
"""

from __future__ import annotations

from celery.utils.dispatch import Signal

worker_paused = Signal(
    name="celery_pause.worker_paused",
    providing_args={"generation", "scope", "previous", "holds"},
)
"""The worker stopped starting tasks from ``scope`` (it changed from ``previous``)."""

worker_resumed = Signal(
    name="celery_pause.worker_resumed",
    providing_args={"generation", "scope", "previous", "holds"},
)
"""Every queue of the worker flows again (``scope`` is empty)."""

worker_limited = Signal(
    name="celery_pause.worker_limited",
    providing_args={"generation", "limits", "previous"},
)
"""The limits the worker applies changed: ``limits`` (holds) now, ``previous`` before."""
