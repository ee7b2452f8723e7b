"""Settings of the test project; each run's own values come from ``DJANGO_PROJ_*``."""

from __future__ import annotations

import os

NAMESPACE = os.environ.get("DJANGO_PROJ_NAMESPACE", "django-proj")

SECRET_KEY = "celery-pause-tests-only"
USE_TZ = True
INSTALLED_APPS = [
    "django_celery_beat",
    "support.django_proj.reports",
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("DJANGO_PROJ_DB", ":memory:"),
    }
}

CELERY_BROKER_URL = os.environ.get("DJANGO_PROJ_BROKER", "redis://127.0.0.1:6379/14")
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_DEFAULT_QUEUE = f"{NAMESPACE}.default"
CELERY_CONTROL_EXCHANGE = f"ctl-{NAMESPACE}"
CELERY_EVENT_EXCHANGE = f"ev-{NAMESPACE}"
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_BEAT_MAX_LOOP_INTERVAL = 1

CELERY_PAUSE_STORE_URL = os.environ.get("DJANGO_PROJ_STORE", "redis://127.0.0.1:6379/15")
CELERY_PAUSE_KEY_PREFIX = f"celery-pause-test:{NAMESPACE}"
CELERY_PAUSE_POLL_INTERVAL = float(os.environ.get("DJANGO_PROJ_POLL", "0.5"))
