"""The project's Celery app, the way Django projects define it."""

from __future__ import annotations

import os

from celery import Celery

import celery_pause

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "support.django_proj.settings")

app = Celery("django_proj")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
celery_pause.install(app)
