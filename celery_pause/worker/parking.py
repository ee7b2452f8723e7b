"""Moving held messages out of the worker, and the claim a moved copy takes before it starts.

:class:`Parking` publishes a held request's message, unchanged but for the
:data:`~celery_pause.model.parking.PARKED_HEADER`, to its hold's parking queue on the
worker's broker (with publisher confirms on AMQP), and acknowledges the original only
then. It runs on the consumer loop, which owns the original's channel. Brokers other
than Redis and RabbitMQ park nothing: their held messages stay in the worker, as before.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

from celery import Celery
from celery.worker import state as worker_state
from celery.worker.request import Request
from kombu.connection import Connection
from kombu.entity import Exchange, Queue
from kombu.messaging import Producer

from ..errors import InvalidInput
from ..model.content import text_of
from ..model.fair import OTHERS, fair_value
from ..model.parking import (
    PARKED_HEADER,
    SOURCE_COPY,
    Marker,
    claim_key,
)
from ..model.scope import Target
from ..model.state import Hold
from ..stores import Store
from .claims import hand_claim
from .figures import GateCounters
from .registry import Registry

logger = logging.getLogger(__name__)

Held = tuple[Request, float]
"""A held request and since when (``time.monotonic()``) it is held."""
TargetOf = Callable[[Request], Target]

PARKING_DRIVERS = ("redis", "amqp")
"""Brokers whose held messages are parked: those that can count and confirm them."""
KEPT_PROPERTIES = ("correlation_id", "reply_to", "expiration", "message_id", "timestamp", "type")
"""Message properties a copy keeps (beside priority, delivery mode and the content's type)."""


def parked_queue(name: str) -> Queue:
    """The durable queue ``name``, bound to a direct exchange of its own name."""
    return Queue(name, Exchange(name, "direct", durable=True), routing_key=name, durable=True)  # type: ignore[no-untyped-call]


def publish_copy(producer: Producer, message: Any, marker: Marker, exchange: str, key: str) -> None:
    """Publish ``message`` (a kombu message as received) again to ``exchange`` with routing
    key ``key``: body, headers and properties as they were, the marker header set."""
    properties = message.properties or {}
    headers = {k: v for k, v in (message.headers or {}).items() if k != "redelivered"}
    headers[PARKED_HEADER] = marker.to_header()
    kept = {name: properties[name] for name in KEPT_PROPERTIES if properties.get(name) is not None}
    producer.publish(  # type: ignore[no-untyped-call]
        message.body,
        exchange=exchange,
        routing_key=key,
        headers=headers,
        content_type=message.content_type,
        content_encoding=message.content_encoding,
        priority=properties.get("priority"),
        delivery_mode=properties.get("delivery_mode") or 2,
        retry=False,
        **kept,
    )


def parks(app: Celery) -> bool:
    """Whether ``app``'s broker is one held messages are parked on (:data:`PARKING_DRIVERS`)."""
    return app.connection_for_write().transport.driver_type in PARKING_DRIVERS


def copy_connection(app: Celery) -> Connection:
    """A connection of its own to the app's broker; on AMQP each publish waits for the
    broker's confirm."""
    conn = app.connection_for_write()
    if conn.transport.driver_type == "amqp":
        conn.transport_options = {**(conn.transport_options or {}), "confirm_publish": True}
    return conn  # type: ignore[no-any-return]


class Parking:
    """Parks held requests, and has each copy that may have a twin claim its task id."""

    def __init__(
        self, app: Celery, store: Store, *, prefix: str, life: float, max_held: int
    ) -> None:
        """Nothing parked yet.

        Parameters:
            app: The worker's app (its broker is where messages are parked).
            store: The pause store (the parking queues' records, the claims).
            prefix: The store's key prefix, which names the parking queues.
            life: Seconds a claim is kept (:func:`~celery_pause.model.parking.claim_life`).
            max_held: Requests held in the worker before the newest are parked.
        """
        self.app = app
        self.store = store
        self.prefix = prefix
        self.life = life
        self.max_held = max_held
        self.enabled = parks(app)
        self.counters = GateCounters()
        """Where parked and dropped copies are counted (the gate's, once it parks with this)."""
        self._pauses: tuple[Hold, ...] = ()
        self._conn: Connection | None = None
        self._producer: Producer | None = None
        self._declared: set[str] = set()
        self.registry = Registry(store, prefix)
        self._fair: tuple[Hold, ...] = ()
        self._limits: tuple[Hold, ...] = ()
        self.turns_named: frozenset[str] = frozenset()
        """The limits this worker parked tasks in the turns queues of (they are fed)."""
        self.recent = True
        """Whether any task was parked within a claim's life (read from the store's record by
        :class:`~.unparking.Unparking`): only then does a redelivered message claim its id."""

    def park(self, request: Request, hold: str, queue_of: Callable[[], str]) -> bool:
        """Park ``request``'s message under ``hold`` in the queue ``queue_of`` names; whether
        it did (then the original is acknowledged and the request forgotten). A broker or
        store that fails leaves it."""
        try:
            queue = queue_of()
            copy, old = uuid.uuid4().hex, self._claimant(request)
            message = request.message
            info = message.delivery_info if isinstance(message.delivery_info, Mapping) else {}
            marker = Marker(
                copy=copy,
                hold=hold,
                exchange=text_of(info.get("exchange")),
                routing_key=text_of(info.get("routing_key")),
                claimed=old is not None,
            )
            publish_copy(self._producer_for(queue), message, marker, queue, queue)
            # Handed only once the copy is safe: a failure before leaves the claim with the
            # held original, and the copy then loses it when it comes to start.
            task_id = text_of(request.id)
            if old is not None and hand_claim(self.store, task_id, old, copy, self.life) is None:
                self._drop(request)  # a twin: another copy holds the claim (the copy loses too)
                return True
        except Exception as exc:  # the broker or store failed: the message stays held
            logger.warning("celery-pause: cannot park task %s: %r", text_of(request.id), exc)
            self._reset()
            return False
        self._forget(request)
        self.counters.parked += 1
        self.recent = True
        return True

    def _claimant(self, request: Request) -> str | None:
        """The copy ``request`` claims as, if it claims at all (it may hold the claim)."""
        old = self.copy_of(request)
        return None if old is None or (old == SOURCE_COPY and not self.recent) else old

    def _drop(self, request: Request) -> None:
        """Drop ``request``: another copy of its task id has claimed it."""
        logger.warning(
            "celery-pause: task %s: another copy of it has started; this one is dropped",
            text_of(request.id),
        )
        self._forget(request)
        self.counters.dropped += 1

    @staticmethod
    def _forget(request: Request) -> None:
        """Acknowledge ``request`` (another copy of it is safe) and forget it."""
        try:
            request.acknowledge()
        except Exception as exc:  # the channel is gone: the broker redelivers it, and the
            # copy that comes back then loses its claim to the one that is safe
            logger.debug("celery-pause: task %s not acknowledged: %r", text_of(request.id), exc)
        worker_state.task_ready(request)

    def _producer_for(self, queue: str) -> Producer:
        if self._producer is None:
            self._conn = copy_connection(self.app)
            self._producer = Producer(self._conn.channel())  # type: ignore[no-untyped-call]
        if queue not in self._declared:
            parked_queue(queue)(self._producer.channel).declare()  # type: ignore[no-untyped-call]
            self._declared.add(queue)
        return self._producer

    def _reset(self) -> None:
        """Drop the connection after a failure (the next park opens a new one)."""
        conn, self._conn, self._producer = self._conn, None, None
        self._declared.clear()
        if conn is not None:
            try:
                conn.release()  # type: ignore[no-untyped-call]
            except Exception as exc:
                logger.debug("celery-pause: closing the parking connection: %r", exc)

    def close(self) -> None:
        self._reset()

    # -- what to park ----------------------------------------------------------------------
    def under(self, holds: Iterable[Hold]) -> None:
        """The holds in force: a held request is parked under the first pause that covers
        it; one a fair limit covers waits for its turn in its value's queue."""
        holds = tuple(holds)
        self._pauses = tuple(hold for hold in holds if hold.pauses)
        self._limits = tuple(h for h in holds if h.limit is not None and not h.pauses)
        self._fair = tuple(h for h in self._limits if h.limit and h.limit.fair is not None)

    def takes_turn(self, request: Request, target_of: TargetOf) -> bool:
        """Whether ``request`` was parked to wait for its turn: a fair limit covers it and it
        is not the copy that limit fed back for its turn. Parking that fails lets it start
        (out of turn: nothing is lost). Its place is read only while a fair limit is in force."""
        if not self._fair:
            return False
        target = target_of(request)
        hold = next((h for h in self._fair if h.scope.covers(target)), None)
        if hold is None or not self.enabled:
            return False
        marker = self.marker_of(request)
        if marker is not None and marker.turn and marker.hold == hold.id:
            return False
        return self._park_for_turn(request, hold, target)

    def _park_for_turn(self, request: Request, hold: Hold, target: Target) -> bool:
        """Park ``request`` in the turns queue of the limit ``hold`` (of its label value if
        the limit is fair), to be fed back (:mod:`.feeding`)."""

        def queue_of() -> str:
            fair = hold.limit.fair if hold.limit is not None else None
            value = OTHERS if fair is None else fair_value(target.label, fair)
            queue = self.registry.name_value(hold.id, value)
            self.turns_named = self.turns_named | {hold.id}
            return queue

        return self.park(request, hold.id, queue_of)

    def hold_of(self, target: Target) -> Hold | None:
        """The pause ``target`` is parked under; ``None``: none in force covers it, keep it."""
        return next((hold for hold in self._pauses if hold.scope.covers(target)), None)

    def overflow(self, held: list[Held], most: int, target_of: TargetOf) -> list[Held]:
        """The newest of ``held`` (oldest first) past the first ``most`` that can be parked."""
        return _newest_past(held, most, lambda t: self.hold_of(t) is not None, target_of)

    def waiting_overflow(self, waiting: list[Held], most: int, target_of: TargetOf) -> list[Held]:
        """The newest of ``waiting`` (requests waiting for a limit, oldest first) past the
        first ``most`` that a limit in force covers."""
        return _newest_past(waiting, most, lambda t: self._limit_of(t) is not None, target_of)

    def park_waiting(self, entries: list[Held], target_of: TargetOf) -> list[Held]:
        """Park each of ``entries`` a limit covers in that limit's turns queue, to be fed back
        as the workers can start it (:mod:`.feeding`), until one fails; those left, in order."""
        left: list[Held] = []
        for index, entry in enumerate(entries):
            target = target_of(entry[0])
            hold = self._limit_of(target)
            if hold is None:
                left.append(entry)
            elif not self._park_for_turn(entry[0], hold, target):
                return left + entries[index:]
        return left

    def _limit_of(self, target: Target) -> Hold | None:
        return next((hold for hold in self._limits if hold.scope.covers(target)), None)

    def park_all(self, entries: list[Held], target_of: TargetOf) -> list[Held]:
        """Park each of ``entries`` a pause covers, until one fails; those left (in order)."""
        left: list[Held] = []
        for index, entry in enumerate(entries):
            target = target_of(entry[0])
            hold = self.hold_of(target)
            if hold is None:
                left.append(entry)
            elif not self.park(entry[0], hold.id, partial(self.registry.queue_for, hold, target)):
                return left + entries[index:]
        return left

    # -- the claim before a start ---------------------------------------------------------
    @staticmethod
    def marker_of(request: Request) -> Marker | None:
        """The marker of a parked or fed copy; ``None`` for any other (never raises)."""
        try:
            headers = request.message.headers
            return Marker.from_header(headers.get(PARKED_HEADER)) if headers else None
        except Exception:
            return None

    @classmethod
    def copy_of(cls, request: Request) -> str | None:
        """The copy ``request`` claims as before it starts; ``None``: it needs no claim (never
        moved, never redelivered). Never raises: headers are message content."""
        try:
            marker = cls.marker_of(request)
            if marker is not None:
                return marker.copy
            return SOURCE_COPY if cls.redelivered(request) else None
        except Exception:
            return None

    @staticmethod
    def redelivered(request: Request) -> bool:
        """Whether the broker delivers ``request``'s message again (never raises)."""
        try:
            info = request.message.delivery_info
            return isinstance(info, Mapping) and info.get("redelivered") is True
        except Exception:
            return False

    def claims(self, request: Request) -> bool:
        """Whether ``request`` may start: yes if its copy needs no claim or won it. A copy that
        lost the claim is acknowledged and forgotten: another copy of the id has started.

        Raises:
            StoreError: The store cannot be reached: nothing is known, hold it.
        """
        marker = self.marker_of(request)
        copy = marker.copy if marker is not None else self.copy_of(request)
        if copy is None or (copy == SOURCE_COPY and not self.recent):
            return True
        # An owned copy's claim was taken as it was moved; delivered again, it may have been
        # parked meanwhile (a worker killed mid-park leaves it and its next copy): it asks.
        owned = marker is not None and marker.owned and not self.redelivered(request)
        try:
            won = owned or self.store.acquire_lease(claim_key(text_of(request.id)), copy, self.life)
        except InvalidInput:  # an id too long for a key: never moved by us, let it run
            return True
        if won:
            request_dict = getattr(request, "_request_dict", None)
            if isinstance(request_dict, dict):
                request_dict.pop(PARKED_HEADER, None)  # the task sees its headers as sent
            return True
        self._drop(request)
        return False


def _newest_past(
    entries: list[Held], most: int, parks: Callable[[Target], bool], target_of: TargetOf
) -> list[Held]:
    """The newest of ``entries`` (oldest first), past the first ``most``, whose place
    ``parks`` says can be parked."""
    over: list[Held] = []
    for entry in reversed(entries):
        if len(entries) - len(over) <= most:
            break
        if parks(target_of(entry[0])):
            over.append(entry)
    return over
