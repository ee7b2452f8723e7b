"""What reading a label adds to a request in the gate, in nanoseconds, side by side.

    python -m bench.label_cost            # one JSON object on stdout

Real Celery ``Request`` objects (task protocol 2, from kombu ``Message``\\ s) go through the
gate, best of several repeats, in one run:

- nothing paused (the gate's pass-through), the baseline;
- another tenant paused by label, each request's label in a message header;
- the same, the label in a keyword argument (``pause_labels``);
- another task name paused (no label read), for comparison.

The gate reads the labels a rule lists only while one does: the first line is what every task
costs when no label scope is in force.
"""

from __future__ import annotations

import json
import timeit
import uuid
from functools import partial
from typing import Any

from celery import Celery
from celery.worker.request import Request
from kombu.message import Message

from celery_pause.model.scope import Scope
from celery_pause.routing import QueueResolver
from celery_pause.worker.gate import Gate

QUEUE = "bench.labels"
LABELS = {"tenant": "tenant_id"}


def label_cost(calls: int = 100_000, repeats: int = 7) -> dict[str, float]:
    """Best-of-``repeats`` nanoseconds per request through each gate."""
    app = Celery("label-cost", set_as_current=False)
    app.conf.task_default_queue = QUEUE

    @app.task(name="bench.report", shared=False)
    def report(report_id: int, tenant_id: str = "") -> None:
        """Never runs: only its request is built."""

    by_header = _request(app, report.name, headers={"tenant": "acme"})
    by_kwarg = _request(app, report.name, kwargs={"tenant_id": "acme"})
    handled: list[Request] = []

    def gate(scope: Scope) -> Gate:
        made = Gate(handled.append, QueueResolver(app), labels=LABELS)
        made.hold_to(scope)
        return made

    other_tenant = gate(Scope.of(labels=["tenant=other"]))
    variants: dict[str, tuple[Any, Request]] = {
        "open": (gate(Scope()), by_kwarg),
        "label_in_header": (other_tenant, by_header),
        "label_in_kwargs": (other_tenant, by_kwarg),
        "other_task_paused": (gate(Scope.of(tasks=["bench.other"])), by_kwarg),
    }
    best: dict[str, float] = {}
    for _ in range(repeats):
        for name, (through, request) in variants.items():
            seconds = timeit.timeit(partial(through, request), number=calls)
            best[name] = min(best.get(name, seconds), seconds)
            assert len(handled) == calls, f"{name}: a request was held"
            handled.clear()
    return {f"{name}_ns": round(seconds / calls * 1e9, 1) for name, seconds in best.items()}


def _request(app: Celery, name: str, **options: Any) -> Request:
    headers = options.pop("headers", {})
    task = app.amqp.as_task_v2(str(uuid.uuid4()), name, args=(7,), **options)
    message = Message(
        body=json.dumps(task.body),
        headers={**task.headers, **headers},
        properties=task.properties,
        delivery_info={"exchange": "", "routing_key": QUEUE},
        content_type="application/json",
        content_encoding="utf-8",
    )
    return Request(message, app=app)


if __name__ == "__main__":
    print(json.dumps(label_cost(), indent=1))
