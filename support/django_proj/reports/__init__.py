"""An installed app whose tasks Celery finds with ``autodiscover_tasks()``."""
