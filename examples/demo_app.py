"""The Celery app of the demo: one task that records when it starts and finishes.

``examples/demo.py`` configures it through ``DEMO_*`` environment variables for
every process it starts (workers, the CLI and itself):

* ``DEMO_DIR``: a private directory for records, logs, the file store and, with
  no broker given, kombu's filesystem transport;
* ``DEMO_ID``: the run's name; queue, control exchange and store keys carry it;
* ``DEMO_BROKER``: a broker URL, or empty for the filesystem transport.

Run it yourself with ``celery -A demo_app worker`` from this directory after
setting the three variables.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from celery import Celery, signals
from kombu.transport import TRANSPORT_ALIASES, filesystem
from kombu.utils.json import dumps

import celery_pause

DIR = Path(os.environ.get("DEMO_DIR") or Path.cwd() / "demo-data")
RUN = os.environ.get("DEMO_ID") or "demo"
BROKER = os.environ.get("DEMO_BROKER") or ""
QUEUE = f"demo-{RUN}"
RECORDS = DIR / "records"
TASK = "demo.work"


class AtomicFilesystemChannel(filesystem.Channel):
    """kombu's filesystem channel, with messages and bindings written atomically.

    kombu writes a message file in place, so a worker polling the folder can
    take it before it is complete and fail on half a JSON document (losing the
    message); two processes binding at once can read an exchange table being
    created. Here a message is written under a hidden name and renamed into
    place (the reader skips names that start with a dot), and bindings are read
    and written under one lock.
    """

    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:
        name = f"{round(time.monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        folder = Path(self.data_folder_out)
        partial = folder / f".{name}.partial"
        partial.write_bytes(dumps(payload).encode())
        os.replace(partial, folder / name)

    @contextmanager
    def _bindings_locked(self) -> Iterator[None]:
        self.control_folder.mkdir(parents=True, exist_ok=True)
        with open(self.control_folder / ".bindings.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def get_table(self, exchange: str) -> Any:
        with self._bindings_locked():
            return super().get_table(exchange)

    def _queue_bind(self, *args: Any) -> Any:
        with self._bindings_locked():
            return super()._queue_bind(*args)


class AtomicFilesystemTransport(filesystem.Transport):
    """kombu's filesystem transport using :class:`AtomicFilesystemChannel`."""

    Channel = AtomicFilesystemChannel


TRANSPORT_ALIASES["demofs"] = f"{__name__}:AtomicFilesystemTransport"


def settings() -> dict[str, Any]:
    """Broker and store: kombu's filesystem transport and the file store, or ``DEMO_BROKER``."""
    common = {
        "task_default_queue": QUEUE,
        "control_exchange": f"demo-ctl-{RUN}",
        "pause_key_prefix": f"celery-pause-demo:{RUN}",
        "pause_poll_interval": 0.5,
        "worker_prefetch_multiplier": 4,
        "broker_connection_retry_on_startup": True,
    }
    if BROKER.startswith(("redis://", "rediss://")):
        return {**common, "broker_url": BROKER, "pause_store_url": BROKER}
    if BROKER:
        return {**common, "broker_url": BROKER, "pause_store_url": f"file://{DIR / 'store'}"}
    folders = {name: DIR / name for name in ("broker", "processed", "control")}
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    return {
        **common,
        "broker_url": "demofs://",
        "broker_transport_options": {
            "data_folder_in": str(folders["broker"]),
            "data_folder_out": str(folders["broker"]),
            "store_processed": True,  # moved within DIR, never copied across file systems
            "processed_folder": str(folders["processed"]),
            "control_folder": str(folders["control"]),
            "polling_interval": 0.1,
        },
        "pause_store_url": f"file://{DIR / 'store'}",
    }


app = Celery("demo_app", set_as_current=False)
app.conf.update(settings())
celery_pause.install(app)


def record(kind: str, task_id: str, hostname: str) -> None:
    """Write one record file atomically: ``<task id>.<unique>.<kind>``."""
    RECORDS.mkdir(parents=True, exist_ok=True)
    entry = {"id": task_id, "worker": hostname, "at": time.time()}
    name = f"{task_id}.{uuid.uuid4().hex[:8]}.{kind}"
    partial = RECORDS / f".{name}"
    partial.write_text(json.dumps(entry))
    os.replace(partial, RECORDS / name)


@app.task(name=TASK, bind=True)
def work(self: Any, seconds: float) -> None:
    """Record the start, work for ``seconds``, record the finish."""
    record("start", self.request.id, self.request.hostname or "?")
    time.sleep(seconds)
    record("finish", self.request.id, self.request.hostname or "?")


@signals.task_received.connect
def received(sender: Any = None, request: Any = None, **kwargs: Any) -> None:
    """Record that a worker received a task message (before its gate decides)."""
    if request is not None and request.name == TASK:
        record("received", request.id, request.hostname or "?")
