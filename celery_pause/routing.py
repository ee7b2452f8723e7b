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
        info = request.delivery_info or {}
        routing_key = info.get("routing_key") or ""
        if len(self.queues) != self._known:
            self._rebuild()
        return self._routes.get((info.get("exchange") or "", routing_key), routing_key)

    def _rebuild(self) -> None:
        routes: dict[tuple[str, str], str] = {}
        for queue in self.queues.values():
            exchange = queue.exchange.name if queue.exchange is not None else ""
            routes.setdefault((exchange or "", queue.routing_key or queue.name), queue.name)
        self._routes = routes
        self._known = len(self.queues)


def queue_of(app: Celery, request: Any) -> str:
    """The queue a task request (a worker's ``Request`` or a task's ``request``) came from."""
    resolver: QueueResolver | None = getattr(app, "_celery_pause_resolver", None)
    if resolver is None:
        resolver = QueueResolver(app)
        app._celery_pause_resolver = resolver
    return resolver(request)
