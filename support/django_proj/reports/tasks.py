"""The app's tasks: each records when it started, for the tests to count."""

from __future__ import annotations

import json
import os
import time

import redis
from celery import shared_task
from django.conf import settings

RECORDS_URL = "redis://127.0.0.1:6379/13"
_records = redis.Redis.from_url(os.environ.get("DJANGO_PROJ_RECORDS", RECORDS_URL))


def records_key() -> str:
    return f"celery-pause-test:{settings.NAMESPACE}:records"


@shared_task(bind=True)
def build_report(self, report_id: int, duration: float = 0.0) -> int:  # type: ignore[no-untyped-def]
    """Record the start of report ``report_id``, then work for ``duration`` seconds."""
    entry = {"id": self.request.id, "task": self.name, "tag": report_id, "started": time.time()}
    _records.rpush(records_key(), json.dumps(entry))
    time.sleep(duration)
    return report_id


@shared_task(bind=True)
def refresh_dashboard(self) -> None:  # type: ignore[no-untyped-def]
    """The periodic task django-celery-beat sends."""
    entry = {"id": self.request.id, "task": self.name, "tag": "beat", "started": time.time()}
    _records.rpush(records_key(), json.dumps(entry))
