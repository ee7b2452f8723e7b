"""Real Celery requests for the gate's tests, built from kombu messages as a worker's strategy
builds them."""

from __future__ import annotations

import uuid
from typing import Any

from celery import Celery
from celery.worker.request import Request
from kombu import Message

app = Celery("requests", set_as_current=False)


@app.task(name="proj.task", shared=False)
def task(**kwargs: Any) -> None:
    """The task every request here is of."""


TASK = app.tasks["proj.task"]


def request_of(label: Any, *, header: Any = None, kwargs: Any = None, **fields: Any) -> Request:
    """A real request of ``proj.task`` whose message carries the tenant ``label`` (as its
    keyword argument ``tenant_id``, or as its header when ``header`` is true), ``kwargs``
    for a whole keyword table, and ``fields`` over its headers (``id``, ``shadow``, ...)."""
    task_id = str(uuid.uuid4())
    headers: dict[str, Any] = {"id": task_id, "task": TASK.name, **fields}
    if header:
        headers["tenant"] = label
    body = ((), {"tenant_id": label} if kwargs is None else kwargs, {})
    message = Message(
        body=b"", headers=headers, delivery_info={"routing_key": "default", "exchange": ""}
    )
    return Request(message, app=app, task=TASK, body=body, decoded=True)
