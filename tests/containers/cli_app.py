"""The app ``celery -A tests.containers.cli_app pause status`` runs on the test side: the test's
app as the command sees it, its name (which names the store's keys), broker and store from
``CELERY_APP_MAIN``, ``CELERY_BROKER_URL`` and ``CELERY_PAUSE_STORE_URL``."""

from __future__ import annotations

import os

from celery import Celery

app = Celery(os.environ["CELERY_APP_MAIN"], broker=os.environ["CELERY_BROKER_URL"])
if os.environ.get("CELERY_PAUSE_STORE_URL"):
    app.conf.pause_store_url = os.environ["CELERY_PAUSE_STORE_URL"]
