"""The celery-pause benchmark (run ``python -m bench.run``)."""
