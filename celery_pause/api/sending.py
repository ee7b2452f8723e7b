"""The producer's side of parking: a task sent while its scope is paused goes straight to the
pause's parking queue, so the shared queue never fills with work nobody may start; one a fair
limit covers goes straight to its label value's queue, to wait for its turn there.

:func:`park_at_send` wraps the app's ``amqp.send_task_message`` (every ``delay``,
``apply_async`` and ``send_task`` goes through it). On the first send it starts a thread
that reads the pause state every ``pause_poll_interval`` (:class:`~..beat.watch.BeatWatch`);
each send then looks the task up in that copy, with no store round trip. A task a pause
covers on every worker (not a circuit breaker's, whose trials must reach the workers) is
published to the pause's parking queue, with the header that says where it was going
(:mod:`celery_pause.model.parking`); the workers bring it back when the pause is lifted.
Before the first read, while the store cannot be read, on a broker that parks nothing, or
for a message it cannot read, the task is sent as it was: the workers still hold it.
"""

from __future__ import annotations

import functools
import logging
import threading
import uuid
from collections.abc import Mapping
from typing import Any

from celery import Celery

from ..beat.watch import BeatWatch
from ..model.content import label_value
from ..model.parking import PARKED_HEADER, Marker
from ..model.scope import Target
from ..model.state import BREAKER_PREFIX, Hold
from ..settings import config_for
from ..stores import store_for
from ..worker.parking import parked_queue, parks
from ..worker.registry import Registry
from .overload import ADAPTIVE

logger = logging.getLogger(__name__)

PASSING = (BREAKER_PREFIX, ADAPTIVE)
"""Sources of pauses a send does not park for: a breaker's (its trials must reach the
workers) and a Retry-After's (a second or so)."""


class ParkAtSend:
    """Sends the tasks of paused scopes to their parking queues."""

    def __init__(self, app: Celery, send: Any) -> None:
        self.app = app
        self._send = send
        self._watch: BeatWatch | None = None
        self._lock = threading.Lock()
        self._registry: Registry | None = None
        self._off = False
        self.prefix = ""
        self.labels: dict[str, str] = {}
        """The key prefix and ``pause_labels``, read at the first send (settings may come later)."""

    def __call__(self, producer: Any, name: str, message: Any, **options: Any) -> Any:
        try:
            found = self._hold_of(name, message, options)
            if found is not None:
                options = self._to_parking(*found, options)
        except Exception as exc:  # never in the way of a send: the workers hold it anyway
            logger.debug("celery-pause: sending %s as it was: %r", name, exc)
        return self._send(producer, name, message, **options)

    def _hold_of(
        self, name: str, message: Any, options: Mapping[str, Any]
    ) -> tuple[Hold, Target] | None:
        """The hold to park the task under (a pause first, else a fair limit), and the task's
        place in every dimension; ``None``: send it as it is."""
        watch = self._watching()
        if watch is None or not watch.store_ok:
            return None
        holds = [hold for hold in watch.active_holds() if _parks(hold)]
        if not holds:
            return None
        target = Target(
            queue=_queue_name(self.app, options), task=name, label=self._labels(message)
        )
        covering = [hold for hold in holds if hold.scope.covers(target)]
        hold = min(covering, key=lambda hold: not hold.pauses, default=None)
        return None if hold is None else (hold, target)

    def _watching(self) -> BeatWatch | None:
        """The state watch, started on the first send (the app's settings are read then);
        ``None`` when off (``pause_park_at_send``, or a broker that parks nothing)."""
        if self._watch is None and not self._off:
            with self._lock:
                if self._watch is None and not self._off:
                    self._watch = self._start()
                    self._off = self._watch is None
        return self._watch

    def _start(self) -> BeatWatch | None:
        config = config_for(self.app)
        if not (config.park_at_send and parks(self.app)):
            return None
        self.prefix, self.labels = config.key_prefix, dict(config.labels)
        watch = BeatWatch(store=store_for(self.app), config=config, on_read=_ignore, who="sender")
        watch.read_now()
        watch.start()
        return watch

    def _labels(self, message: Any) -> tuple[str, ...]:
        headers, _, body, _ = message
        kwargs = _kwargs_of(body)
        found = []
        for label, keyword in self.labels.items():
            value = headers.get(label) if isinstance(headers, dict) else None
            if value is None:
                value = kwargs.get(keyword)
            text = label_value(value)
            if text is not None:
                found.append(f"{label}={text}")
        return tuple(found)

    def _to_parking(self, hold: Hold, target: Target, options: dict[str, Any]) -> dict[str, Any]:
        """``options`` that send the message to its parking queue under ``hold`` instead (a
        fair limit's: the queue of the task's value, where it waits for its turn)."""
        exchange, key = _origin(self.app, options)
        if self._registry is None:
            self._registry = Registry(store_for(self.app), self.prefix)
        queue = self._registry.queue_for(hold, target)
        headers = dict(options.get("headers") or {})
        headers[PARKED_HEADER] = Marker(
            uuid.uuid4().hex, hold.id, exchange, key, sent=True
        ).to_header()
        return {
            **options,
            "queue": None,
            "exchange": queue,
            "routing_key": queue,
            "exchange_type": "direct",
            "declare": [parked_queue(queue)],
            "headers": headers,
        }


def park_at_send(app: Celery) -> None:
    """Have ``app`` send the tasks of paused scopes to their parking queues (once per app)."""
    amqp = app.amqp
    if isinstance(getattr(amqp, "send_task_message", None), ParkAtSend):
        return
    send = amqp.send_task_message
    amqp.send_task_message = functools.update_wrapper(ParkAtSend(app, send), send)


def _parks(hold: Hold) -> bool:
    """Whether a send parks under ``hold``: a pause (not a breaker's or a Retry-After's), or
    a fair limit."""
    if hold.pauses:
        return not hold.source.startswith(PASSING)
    return hold.limit is not None and hold.limit.fair is not None


def _ignore(*_: Any) -> None:
    """The watch's reader: the send looks at its copy of the state, nothing else to do."""


def _queue_name(app: Celery, options: Mapping[str, Any]) -> str:
    queue = options.get("queue")
    if queue is None:
        if options.get("exchange") is None:
            return str(app.amqp.default_queue.name)
        return str(options.get("routing_key") or "")
    return queue if isinstance(queue, str) else str(queue.name)


def _origin(app: Celery, options: Mapping[str, Any]) -> tuple[str, str]:
    """The exchange and routing key the message would have gone by."""
    exchange, key = options.get("exchange"), options.get("routing_key")
    if options.get("queue") is None and exchange:
        return str(getattr(exchange, "name", exchange)), str(key or "")
    return "", _queue_name(app, options)


def _kwargs_of(body: Any) -> Mapping[str, Any]:
    """The keyword arguments in a task message's body (protocol 2, or 1)."""
    kwargs: Any = {}
    if isinstance(body, tuple) and len(body) == 3:
        kwargs = body[1]
    elif isinstance(body, dict):
        kwargs = body.get("kwargs")
    return kwargs if isinstance(kwargs, dict) else {}
