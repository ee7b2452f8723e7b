"""The pool internals the start check needs, on the green pools' libraries as installed
(gevent and eventlet: optional, so not in the quick loop)."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
from celery.concurrency import thread
from celery.worker.request import Request

from celery_pause.worker.pools import missing_internals, threads_are_green


def test_celerys_in_process_pools_have_every_internal_the_start_check_needs() -> None:
    # Given Celery's threads and gevent pools as installed; When checked; Then nothing is missing
    assert missing_internals(thread.TaskPool(limit=1), thread, Request) == []
    from celery.concurrency import gevent

    assert missing_internals(gevent.TaskPool(limit=1), gevent, Request) == []
    with warnings.catch_warnings():  # eventlet is deprecated; celery was imported before it
        warnings.simplefilter("ignore")
        from celery.concurrency import eventlet

        assert missing_internals(eventlet.TaskPool(limit=1), eventlet, Request) == []


@pytest.mark.parametrize("pool", ["gevent", "eventlet"])
def test_green_threads_are_found_only_where_the_pools_library_patched_threading(
    pool: str,
) -> None:
    # Given this process, where nothing is monkey-patched
    # Then the worker's threads are not greenlets
    assert not threads_are_green(pool)

    # When the pool's library patches everything first, as `celery worker -P <pool>` does
    patch = {
        "gevent": "from gevent import monkey; monkey.patch_all()",
        "eventlet": "import eventlet; eventlet.monkey_patch()",
    }[pool]
    check = "from celery_pause.worker.pools import threads_are_green as green"
    found = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", f"{patch}\n{check}\nprint(green({pool!r}))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )

    # Then they are, and only for that pool's name
    assert found.stdout.strip() == "True", found.stderr
    assert not threads_are_green("threads")
