"""The app that real worker subprocesses run in the tests; tasks record when they start.

Each test gets its own namespace: queue names, store prefix, control exchange
and record key all derive from it, so tests (and test runs) never share state.
The worker reads its settings from ``PAUSE_TEST_*`` environment variables; the
test process builds the same app with :func:`make_app`.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from datetime import timedelta
from typing import Any

import redis
from billiard.process import current_process
from celery import Celery
from celery.schedules import schedule

import celery_pause

RECORDS_URL = "redis://127.0.0.1:6379/13"
RECORD_TASK = "support.proj.record"
OTHER_TASK = "support.proj.record_other"
"""A second task type that records the same way, for pauses of one task type."""
CALL_TASK = "support.proj.call"
"""Calls a downstream (:mod:`support.downstream`); a 429 raises :class:`Overloaded`."""
AUTORETRY_TASK = "support.proj.call_autoretry"
"""Calls it the way Celery users do today: ``autoretry_for`` with a jittered backoff."""


class TooManyRequests(Exception):
    """The downstream answered 429 (the autoretry task's exception)."""


def make_app(
    *,
    namespace: str,
    broker: str,
    store: str | None = None,
    poll_interval: float = 1.0,
    install: bool = True,
    **extra: Any,
) -> Celery:
    """An app whose queues, store keys and control exchange are private to ``namespace``.

    ``install=False`` leaves the pause step out (the benchmark's baseline); records go
    to ``PAUSE_TEST_RECORDS`` when set (the benchmark's private Redis).
    """
    breaker_options = extra.pop("test_breaker", None)
    beat_every = extra.pop("test_beat_every", None)
    windows = extra.pop("test_windows", None)
    app = Celery("celery_pause_tests", set_as_current=False)
    app.conf.update(
        broker_url=broker,
        pause_key_prefix=f"celery-pause-test:{namespace}",
        pause_poll_interval=poll_interval,
        task_default_queue=f"{namespace}.default",
        control_exchange=f"ctl-{namespace}",
        event_exchange=f"ev-{namespace}",
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
        **extra,
    )
    if store:
        app.conf.pause_store_url = store
    if beat_every is not None:
        # One periodic entry, "tick", recording into the default queue every beat_every seconds.
        app.conf.beat_schedule = {
            "tick": {
                "task": RECORD_TASK,
                "schedule": float(beat_every),
                "args": ("beat",),
                "options": {"queue": f"{namespace}.default"},
            }
        }
    if windows is not None:
        # Windows as JSON: "every" (seconds) stands for schedule(run_every=every seconds),
        # queue names are local to the namespace (as Cluster.queue names them).
        app.conf.pause_windows = [
            {
                **{key: value for key, value in window.items() if key not in ("every", "queues")},
                "schedule": schedule(run_every=timedelta(seconds=window["every"])),
                "queues": [f"{namespace}.{q}" for q in window["queues"]]
                if window.get("queues")
                else None,
            }
            for window in windows
        ]
    if install:
        app.steps["consumer"].add(celery_pause.PauseStep)
    records = redis.Redis.from_url(os.environ.get("PAUSE_TEST_RECORDS", RECORDS_URL))
    record_key = f"celery-pause-test:{namespace}:records"
    finished_key = f"celery-pause-test:{namespace}:finished"

    def record(self: Any, tag: str, duration: float = 0.0, **labels: Any) -> str:
        """Record this task's start (id, name, tag, queue, time, worker and its main
        process, and any keyword arguments: labels such as ``tenant_id``), work for
        ``duration`` (``time.sleep``: it yields on gevent and eventlet, which patch it),
        then record that it finished (under ``finished_key``)."""
        entry = {
            "id": self.request.id,
            "task": self.name,
            "tag": tag,
            "queue": (self.request.delivery_info or {}).get("routing_key"),
            "started": time.time(),
            "worker": self.request.hostname,
            "worker_pid": worker_pid(),
            "labels": labels,
            "seen": {  # what the task sees of its message: a custom header, parking's, retries
                "trace": getattr(self.request, "trace", None),
                "parked_header": getattr(self.request, "celery_pause_parked", None) is not None,
                "retries": self.request.retries,
                "eta": self.request.eta,
            },
        }
        records.rpush(record_key, recorded(entry))
        if isinstance(labels.get("spend"), dict):  # what the task really cost
            celery_pause.spend(**labels["spend"])
        time.sleep(duration)
        done = {"id": self.request.id, "worker_pid": worker_pid(), "finished": time.time()}
        records.rpush(finished_key, json.dumps(done))
        return tag

    for name in (RECORD_TASK, OTHER_TASK):
        app.task(name=name, bind=True, shared=False)(record)

    def call(self: Any, url: str) -> int:
        """Call the downstream at ``url`` once: on 200 record the success (with the retries
        the task spent and its message header ``probe``); on 429 raise what the task's kind
        raises."""
        try:
            urllib.request.urlopen(f"{url}?task={self.request.id}", timeout=10).close()
        except urllib.error.HTTPError as exc:
            if exc.code != 429:
                raise
            if self.name == AUTORETRY_TASK:
                raise TooManyRequests(exc.headers.get("Retry-After")) from None
            wait = exc.headers.get("Retry-After")
            raise celery_pause.Overloaded(retry_after=wait, why="429 from the downstream") from None
        entry = {"id": self.request.id, "task": self.name, "tag": "call", "started": time.time(),
                 "worker": self.request.hostname, "retries": self.request.retries,
                 "probe": vars(self.request).get("probe")}  # fmt: skip
        records.rpush(record_key, recorded(entry))
        return 200

    app.task(name=CALL_TASK, bind=True, shared=False)(call)
    app.task(
        name=AUTORETRY_TASK,
        bind=True,
        shared=False,
        autoretry_for=(TooManyRequests,),
        retry_backoff=True,
        retry_jitter=True,
    )(call)

    if breaker_options is not None:
        from .breaker_proj import register

        register(app, namespace, breaker_options)
    return app


def recorded(entry: dict[str, Any]) -> str:
    """``entry`` as JSON; keyword arguments JSON cannot hold (the hostile-input tests send
    bytes, objects and integers past ``str``'s limit) by their type's name."""
    try:
        return json.dumps(entry, default=lambda value: f"<{type(value).__name__}>")
    except (ValueError, RecursionError):
        return json.dumps({**entry, "labels": "<unrecordable>"})


def worker_pid() -> int:
    """The pid of the worker's main process: a prefork child's parent, or this process
    (threads, gevent, eventlet and solo run tasks in the main process)."""
    return os.getppid() if current_process().name != "MainProcess" else os.getpid()


def app_from_env() -> Celery:
    extra = json.loads(os.environ.get("PAUSE_TEST_EXTRA", "{}"))
    return make_app(
        namespace=os.environ["PAUSE_TEST_NAMESPACE"],
        broker=os.environ["PAUSE_TEST_BROKER"],
        store=os.environ.get("PAUSE_TEST_STORE"),
        poll_interval=float(os.environ.get("PAUSE_TEST_POLL", "1.0")),
        install=os.environ.get("PAUSE_TEST_INSTALL", "1") != "0",
        **extra,
    )


if "PAUSE_TEST_NAMESPACE" in os.environ:
    app = app_from_env()
