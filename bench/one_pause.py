"""One ``pause(app, wait=True)``, its steps timed: in the benchmark's process, or alone in a
fresh one (``python -m bench.one_pause``, the app from ``PAUSE_TEST_*``), as ``celery pause
--wait`` or a one-off script runs it. It imports only what such a process has: the store's
client library is imported inside the call.
"""

from __future__ import annotations

import importlib
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery import Celery

import celery_pause

pause_api = importlib.import_module("celery_pause.api.holding")  # where pause() writes, notifies


@contextmanager
def steps(timings: dict[str, float]) -> Iterator[None]:
    """Record when ``pause()`` had announced the pause, written the state, sent the broadcast
    and the history."""
    announce, notify, confirmed = pause_api.announce, pause_api.notify_workers, pause_api.confirmed

    def timed_announce(*args: Any, **kwargs: Any) -> bool:
        sent = bool(announce(*args, **kwargs))
        timings["announced"] = time.time()
        return sent

    def timed_notify(*args: Any) -> None:
        timings["written"] = time.time()
        notify(*args)
        timings["notified"] = time.time()

    def timed_confirmed(*args: Any, **kwargs: Any) -> Any:
        timings["recorded"] = time.time()
        return confirmed(*args, **kwargs)

    pause_api.announce = timed_announce
    pause_api.notify_workers, pause_api.confirmed = timed_notify, timed_confirmed
    try:
        yield
    finally:
        pause_api.announce = announce
        pause_api.notify_workers, pause_api.confirmed = notify, confirmed


def timed_pause(app: Celery) -> dict[str, float]:
    """``pause(app, wait=True)``: ``called``, ``announced``, ``written``, ``notified``,
    ``recorded`` and ``returned`` (``time.time()``), and the generation it placed."""
    timings: dict[str, float] = {}
    with steps(timings):
        timings["called"] = time.time()
        result = celery_pause.pause(app, wait=True, timeout=30)
        timings["returned"] = time.time()
    timings["generation"] = result.generation
    return timings


if __name__ == "__main__":
    import sys

    from support.proj import app_from_env

    app = app_from_env()
    if "--status-first" in sys.argv:  # the store opened at the process's start, as advised
        celery_pause.status(app)
    print(json.dumps(timed_pause(app)))
