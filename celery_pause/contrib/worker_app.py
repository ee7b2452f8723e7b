"""The app module of a celery-pause worker container.

A template: pytest-celery fills in the imports, the app's name and the test's configuration
(the three ``... = None`` / ``Celery(...)`` lines) and writes it into the container as
``app.py``. The store comes from ``CELERY_PAUSE_STORE_URL`` when the container is given one (a
store other than the broker); the worker runs :class:`~celery_pause.PauseStep`.
"""

from __future__ import annotations

import os

from celery import Celery

import celery_pause

imports = None

app = Celery("celery_test_app")
config = None

if config:
    app.config_from_object(config)
if os.environ.get("CELERY_PAUSE_STORE_URL"):
    app.conf.pause_store_url = os.environ["CELERY_PAUSE_STORE_URL"]
celery_pause.install(app)

if __name__ == "__main__":
    app.start()
