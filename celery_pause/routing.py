"""Which queue a task request came from, by its exchange and routing key."""

from __future__ import annotations

from typing import Any

from celery import Celery


class QueueResolver:
    """Finds the queue a request came from, by its exchange and routing key."""

    def __init__(self, app: Celery) -> None:
        self.queues = app.amqp.queues
        self._routes: dict[tuple[str, str], str] = {}
        self._known = -1

    def __call__(self, request: Any) -> str:
        """The queue's name; ``""`` where the delivery names none (a message's delivery
        info is the producer's to write: anything but text reads as no name)."""
        info = request.delivery_info
        if type(info) is not dict:
            return ""
        routing_key, exchange = _text(info.get("routing_key")), _text(info.get("exchange"))
        if len(self.queues) != self._known:
            self._rebuild()
        return self._routes.get((exchange, routing_key), routing_key)

    def _rebuild(self) -> None:
        routes: dict[tuple[str, str], str] = {}
        for queue in self.queues.values():
            exchange = queue.exchange.name if queue.exchange is not None else ""
            routes.setdefault((exchange or "", queue.routing_key or queue.name), queue.name)
        self._routes = routes
        self._known = len(self.queues)


def _text(value: Any) -> str:
    return value if type(value) is str else ""


def queue_of(app: Celery, request: Any) -> str:
    """The queue a task request (a worker's ``Request`` or a task's ``request``) came from."""
    resolver: QueueResolver | None = getattr(app, "_celery_pause_resolver", None)
    if resolver is None:
        resolver = QueueResolver(app)
        app._celery_pause_resolver = resolver
    return resolver(request)
