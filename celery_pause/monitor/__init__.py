"""What watches a worker's pause: :class:`~.step.MonitorStep` (events, counts, long-pause
warnings) and the :class:`~.view.WorkerView` the probes and metrics serve. It reads the worker
(:mod:`celery_pause.worker`); the worker never reads it."""
