"""Moving parked messages back in batches on a real Redis broker: in order, each exactly once,
its claim taken before it is published, twins dropped, anything unreadable kept."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery
from kombu import Connection

from celery_pause.model.parking import PARKED_HEADER, Marker, claim_key
from celery_pause.stores import Store
from celery_pause.stores.memory import MemoryStore
from celery_pause.worker.moving import BatchMove
from celery_pause.worker.parking import copy_connection, publish_copy
from support.harness import REDIS_BROKER
from support.services import require

LIFE = 600.0


class Broker:
    """A Redis broker's parking list and origin queue of one test (deleted after it)."""

    def __init__(self) -> None:
        name = uuid.uuid4().hex[:8]
        self.parked, self.origin, self.default = f"{name}.parked", f"{name}.origin", f"{name}.d"
        self.app = Celery(broker=REDIS_BROKER, set_as_current=False)
        self.app.conf.task_default_queue = self.default
        self.client = redis.Redis.from_url(REDIS_BROKER)
        self.conn: Connection = copy_connection(self.app)
        self.store: Store = MemoryStore("memory://moving", name)

    def park(self, tag: str, **marker: Any) -> Marker:
        """Send a task, then park it as a worker does: a copy in the parking list, marked."""
        with self.app.producer_or_acquire() as producer:
            self.app.send_task("t", args=(tag,), queue=f"{self.origin}.sent", producer=producer)
        raw = self.client.rpop(f"{self.origin}.sent")
        sent = _Message(json.loads(raw))
        mark = Marker(uuid.uuid4().hex, "h1", "", self.origin, **marker)
        with self.app.producer_or_acquire() as producer:
            publish_copy(producer, sent, mark, "", self.parked)
        return mark

    def mover(self) -> BatchMove:
        return BatchMove(self.conn, self.store, LIFE, self.default)

    def taken(self, queue: str) -> list[dict[str, Any]]:
        """Every message of ``queue``, oldest first, taken off it."""
        found = []
        while (raw := self.client.rpop(queue)) is not None:
            found.append(json.loads(raw))
        return found

    def close(self) -> None:
        self.client.delete(self.parked, self.origin, self.default, f"{self.origin}.sent")
        self.conn.release()


class _Message:
    """A sent message as kombu hands it to a consumer (what ``publish_copy`` reads)."""

    def __init__(self, payload: dict[str, Any]) -> None:
        self.headers = payload["headers"]
        self.properties = payload["properties"]
        self.content_type = payload["content-type"]
        self.content_encoding = payload["content-encoding"]
        self.body = payload["body"]
        if self.properties.get("body_encoding") == "base64":
            self.body = base64.b64decode(self.body)


@pytest.fixture
def broker() -> Iterator[Broker]:
    require("Redis", "127.0.0.1", 6379)
    broker = Broker()
    yield broker
    broker.close()


def without_marker(payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` less what a copy changes: its marker, delivery tag and where it goes."""
    headers = {k: v for k, v in payload["headers"].items() if k != PARKED_HEADER}
    drop = ("delivery_tag", "delivery_info")
    properties = {k: v for k, v in payload["properties"].items() if k not in drop}
    return {**payload, "headers": headers, "properties": properties}


def args_of(payload: dict[str, Any]) -> Any:
    return json.loads(base64.b64decode(payload["body"]))[0][0]


def test_a_batch_moves_the_oldest_in_order_each_once_with_its_claim_taken(broker: Broker) -> None:
    # Given five tasks parked in order
    marks = [broker.park(f"m{i}") for i in range(5)]
    before = [json.loads(raw) for raw in reversed(broker.client.lrange(broker.parked, 0, -1))]

    # When three are moved back for their turns
    moved = broker.mover().move([broker.parked] * 3, hold="h1", turn=True)

    # Then the three oldest are in the origin queue, in order, unchanged but for the marker:
    # a new copy id (derived from the old), fed for its turn, its claim already taken
    back = broker.taken(broker.origin)
    assert [args_of(p) for p in back] == ["m0", "m1", "m2"]
    copies = [Marker.from_header(p["headers"][PARKED_HEADER]) for p in back]
    assert [c.copy for c in copies if c] == [m.copy for _, m in moved]
    for payload, copy, old, parked in zip(back, copies, marks[:3], before[:3], strict=True):
        assert copy is not None and copy.turn and copy.owned and copy.copy != old.copy
        assert without_marker(payload) == without_marker(parked)
        assert payload["properties"]["delivery_info"]["routing_key"] == broker.origin
        owner = broker.store.lease_owner(claim_key(payload["headers"]["id"]))
        assert owner == copy.copy
    # ... and the two others still wait, parked
    assert [args_of(p) for p in broker.taken(broker.parked)] == ["m3", "m4"]


def test_a_copy_whose_claim_another_copy_holds_is_dropped(broker: Broker) -> None:
    # Given a parked task whose id another copy has claimed (it started)
    broker.park("twin")
    task_id = json.loads(broker.client.lindex(broker.parked, -1))["headers"]["id"]
    assert broker.store.acquire_lease(claim_key(task_id), "the-copy-that-ran", LIFE)

    # When it is moved back
    mover = broker.mover()
    moved = mover.move([broker.parked], hold="h1", turn=False)

    # Then it is gone from the parking list, and not sent on
    assert moved == [] and mover.dropped == 1
    assert broker.taken(broker.parked) == [] and broker.taken(broker.origin) == []


def test_a_move_cut_short_after_the_hand_over_moves_to_the_same_copy(broker: Broker) -> None:
    # Given a parked copy that holds its task's claim, handed on to its next copy by a move
    # that then died before it moved the message
    mark = broker.park("held", claimed=True)
    task_id = json.loads(broker.client.lindex(broker.parked, -1))["headers"]["id"]
    assert broker.store.acquire_lease(claim_key(task_id), mark.copy, LIFE)
    mover = broker.mover()
    raw = broker.client.lindex(broker.parked, -1)
    assert isinstance(raw, bytes)
    parked = mover._parsed(broker.parked, raw)
    mover._claims([(broker.parked, parked)], [mover._fresh(mark, "h1", False)])  # as it died

    # When it is moved again
    moved = broker.mover().move([broker.parked], hold="h1", turn=False)

    # Then it moves once, to the copy the claim was handed to
    (back,) = broker.taken(broker.origin)
    copy = Marker.from_header(back["headers"][PARKED_HEADER])
    assert copy is not None and copy.owned and [m.copy for _, m in moved] == [copy.copy]
    assert broker.store.lease_owner(claim_key(task_id)) == copy.copy


def test_an_unreadable_parked_message_goes_to_the_default_queue_as_it_is(
    broker: Broker,
) -> None:
    # Given a parked message that is not JSON, behind none
    broker.client.lpush(broker.parked, b"\x00not a message")

    # When it is moved
    broker.mover().move([broker.parked], hold="h1", turn=True)

    # Then it is off the parking list, in the default queue, byte for byte
    assert broker.client.llen(broker.parked) == 0
    assert broker.client.lrange(broker.default, 0, -1) == [b"\x00not a message"]


def test_a_copy_its_producer_parked_moves_owned_without_a_claim(broker: Broker) -> None:
    # Given a task its producer sent straight to the parking list (no worker ever fetched it)
    broker.park("sent", sent=True)
    task_id = json.loads(broker.client.lindex(broker.parked, -1))["headers"]["id"]

    # When it is moved back
    broker.mover().move([broker.parked], hold="h1", turn=True)

    # Then its copy starts without a claim: it can have no twin, so none was taken
    (back,) = broker.taken(broker.origin)
    copy = Marker.from_header(back["headers"][PARKED_HEADER])
    assert copy is not None and copy.owned and not copy.sent
    assert broker.store.lease_owner(claim_key(task_id)) is None
