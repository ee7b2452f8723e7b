"""``celery beat`` while paused: periodic tasks whose hold says ``beat="skip"`` are not sent.

Without this part, beat keeps sending periodic tasks into paused queues and a resume
releases them all at once. Importing :mod:`celery_pause` (as adding the pause step
does) connects a ``beat_init`` handler (:mod:`.hook`). In a beat process of an app
with the pause step it wraps the live scheduler's ``apply_entry`` and ``apply_async``
(whatever the scheduler class: Celery's own, django-celery-beat's, redbeat's), so each
due entry is checked against the pause state a small thread keeps fresh
(:mod:`.watch`). An entry whose task falls in the scope of an active hold with the
``skip`` policy is not sent; the schedule advances as if it ran, so a resume brings no
burst and no catch-up (:mod:`.guard`). Beat's command line and ``beat_scheduler`` stay
as they are. Depends only on the core.
"""

from __future__ import annotations

from .hook import on_beat_init

__all__ = ("on_beat_init",)
