"""What the pause gate adds to each task on its way to the pool, in nanoseconds.

The gate wraps the consumer's ``on_task_request``. Here a real Celery ``Request``
(built from a kombu ``Message`` of task protocol 2) goes through the gate and,
as the baseline in the same run, straight to the handler the gate wraps. The
difference is the whole per-task cost of an installed, open gate; everything
else the step does runs off the task path (a store thread, a 1 s timer).
"""

from __future__ import annotations

import json
import timeit
import uuid
from functools import partial

from celery import Celery
from celery.worker.request import Request
from kombu.message import Message

from celery_pause.model.scope import Scope
from celery_pause.routing import QueueResolver
from celery_pause.worker.gate import Gate

QUEUE = "bench.gate"


def gate_cost(calls: int = 200_000, repeats: int = 7) -> dict[str, float]:
    """Best-of-``repeats`` nanoseconds per call: the handler alone, then through the gate
    while nothing is paused and while another queue is paused."""
    app = Celery("gate-cost", set_as_current=False)
    app.conf.task_default_queue = QUEUE

    @app.task(name="bench.noop", shared=False)
    def noop() -> None:
        """Never runs: only its request is built."""

    request = _request(app, noop.name)
    handled: list[Request] = []
    handler = handled.append
    gate = Gate(handler, QueueResolver(app))
    other_paused = Gate(handler, QueueResolver(app))
    other_paused.hold_to(Scope.of(["bench.other"]))
    variants = {"handler": handler, "gate_open": gate, "gate_other_paused": other_paused}
    best: dict[str, float] = {}
    for _ in range(repeats):
        for name, call in variants.items():
            seconds = timeit.timeit(partial(call, request), number=calls)
            best[name] = min(best.get(name, seconds), seconds)
            handled.clear()
    per_call = {name: seconds / calls * 1e9 for name, seconds in best.items()}
    return {
        "handler_ns": round(per_call["handler"], 1),
        "gate_open_ns": round(per_call["gate_open"], 1),
        "gate_other_paused_ns": round(per_call["gate_other_paused"], 1),
        "added_open_ns": round(per_call["gate_open"] - per_call["handler"], 1),
        "added_other_paused_ns": round(per_call["gate_other_paused"] - per_call["handler"], 1),
    }


def _request(app: Celery, name: str) -> Request:
    task = app.amqp.as_task_v2(str(uuid.uuid4()), name, args=(), kwargs={})
    message = Message(
        body=json.dumps(task.body),
        headers=task.headers,
        properties=task.properties,
        delivery_info={"exchange": "", "routing_key": QUEUE},
        content_type="application/json",
        content_encoding="utf-8",
    )
    return Request(message, app=app)
