"""The celery-pause benchmark (run ``python bench/run.py``)."""
