"""Integrations with other tools: ``celery_pause.contrib.pytest``, fixtures for pytest-celery."""
