"""Moving parked messages back where they came from, many at once, on a Redis broker.

Kombu moves a message with a fetch (which records it as unacknowledged), a publish and an
acknowledgement: six or more round trips, and a worker killed between the fetch and the
record loses the message. On Redis the lists are the queues, so a batch moves in two round
trips: the oldest messages are read where they lie, each is rewritten as the copy
:func:`~.parking.publish_copy` would publish (the marker header set, a new delivery tag), and
one script removes each exact message and pushes its copy onto its origin's list, atomically:
a message is either still parked or moved, never both and never neither.

A copy that holds its task id's claim hands it on *before* the move, to a copy id derived
from its own (so moving the same message again after a crash hands it to the same id).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kombu.connection import Connection

from ..errors import InvalidInput
from ..model.content import text_of
from ..model.parking import PARKED_HEADER, Marker, claim_key
from ..stores import Store
from .claims import hand_claim

logger = logging.getLogger(__name__)

MOVE = """
local moved = {}
for i = 1, #ARGV, 4 do
  local gone = redis.call('LREM', KEYS[tonumber(ARGV[i])], -1, ARGV[i + 1])
  if gone == 1 and ARGV[i + 2] ~= '0' then
    redis.call('LPUSH', KEYS[tonumber(ARGV[i + 2])], ARGV[i + 3])
  end
  moved[#moved + 1] = gone
end
return moved
"""
"""Remove each message (source key, message) and push its copy (target key, copy) if it was
there (a target of 0: only remove it); 1 or 0 for each, in order."""
COPIES = uuid.UUID("5f0e3c1e-6a57-4b1c-9d8e-2b1f0f7c4a11")
"""The namespace of the copy ids derived from the copies they replace."""


def moves_in_batches(conn: Connection) -> bool:
    """Whether ``conn``'s broker moves parked messages in batches (Redis)."""
    return conn.transport.driver_type == "redis"  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Parked:
    """A parked message as it lies in its list."""

    key: str
    raw: bytes
    payload: dict[str, Any] | None
    """The message as Celery sent it; ``None`` if it is not readable as one."""
    marker: Marker


class BatchMove:
    """Moves parked messages back on one Redis broker connection."""

    def __init__(self, conn: Connection, store: Store, life: float, default_queue: str) -> None:
        self.channel: Any = conn.default_channel
        self.store = store
        self.life = life
        self.default_queue = default_queue
        self._prefix: str = getattr(self.channel, "global_keyprefix", "") or ""
        self.dropped = 0
        """Messages dropped as twins (another copy of the task id holds its claim)."""
        self._routes: dict[tuple[str, str], str] = {}
        """The queue each origin (exchange, routing key) routes to, within one move."""

    def move(self, order: Sequence[str], *, hold: str, turn: bool) -> list[tuple[str, Marker]]:
        """Move back the oldest message of each queue named in ``order``, in that order (a
        queue named twice gives its two oldest); the queue and the copy's marker of each
        moved. A message whose task id another copy holds the claim of is dropped."""
        found = self._peek(Counter(order))
        picked = [(queue, parked) for queue in order if (parked := next(found[queue], None))]
        if not picked:
            return []
        fresh = [self._fresh(parked.marker, hold, turn) for _, parked in picked]
        owned = self._claims(picked, fresh)
        keys: list[str] = []
        args: list[Any] = []
        for (_, parked), marker in zip(picked, fresh, strict=True):
            mine = owned.get(marker.copy)
            copy, target = self._copy(parked, replace(marker, owned=bool(mine)))
            target_index = 0 if mine is False else _index(keys, target)
            args += [_index(keys, parked.key), parked.raw, target_index, copy]
        with self.channel.conn_or_acquire() as client:  # EVAL: kombu adds no key prefix to it
            done = client.eval(MOVE, len(keys), *keys, *args)
        moved = []
        for (queue, parked), marker, gone in zip(picked, fresh, done, strict=True):
            if gone and owned.get(marker.copy) is False:
                self.dropped += 1
                logger.warning(
                    "celery-pause: task %s: another copy of it has started; this one is dropped",
                    _task_id(parked),
                )
            elif gone:
                moved.append((queue, marker))
        return moved

    @staticmethod
    def _fresh(marker: Marker, hold: str, turn: bool) -> Marker:
        """The marker of the copy that replaces one marked ``marker``."""
        copy = _next_copy(marker.copy)
        return replace(
            marker, copy=copy, hold=marker.hold or hold, turn=turn, owned=False, sent=False
        )

    def _claims(self, picked: list[tuple[str, Parked]], fresh: list[Marker]) -> dict[str, bool]:
        """Take each copy's claim before it is published: copy id -> ``True`` (taken or handed
        on: it starts without asking), ``False`` (another copy holds it: a twin, dropped);
        copies left out (an id too long for a key, an unreadable message) claim at start."""
        owned: dict[str, bool] = {}
        asked: dict[str, str] = {}
        for (_, parked), marker in zip(picked, fresh, strict=True):
            task_id = _task_id(parked)
            try:
                key = claim_key(task_id)
            except InvalidInput:
                continue
            if parked.payload is None:
                continue
            if parked.marker.sent and not parked.marker.claimed:
                owned[marker.copy] = True  # never fetched before: no other copy of it exists
            elif key in asked:  # two copies of one id in one batch: the second is a twin
                owned[marker.copy] = False
            elif parked.marker.claimed:
                handed = hand_claim(self.store, task_id, parked.marker.copy, marker.copy, self.life)
                if handed is None:
                    owned[marker.copy] = False
                else:
                    asked[key] = marker.copy
            else:
                asked[key] = marker.copy
        taken = self.store.acquire_leases(asked, self.life) if asked else {}
        owned.update((copy, taken[key]) for key, copy in asked.items())
        return owned

    def depth(self, queues: Iterable[str]) -> int:
        """Messages waiting in ``queues`` (each of their priority lists), in one round trip."""
        with self.channel.conn_or_acquire() as client, client.pipeline(False) as pipe:
            for queue in queues:
                for step in self._steps():
                    pipe.execute_command("LLEN", self._key(queue, step))
            return sum(pipe.execute())

    def _peek(self, wanted: Counter[str]) -> dict[str, Iterator[Parked]]:
        """The oldest ``wanted[queue]`` messages of each queue, oldest first, in the order
        kombu fetches them (its priority lists first to last)."""
        lists = {queue: [self._key(queue, step) for step in self._steps()] for queue in wanted}
        with self.channel.conn_or_acquire() as client, client.pipeline(False) as pipe:
            for queue, keys in lists.items():
                for key in keys:
                    pipe.execute_command("LRANGE", key, -wanted[queue], -1)
            replies = iter(pipe.execute())
        found = {}
        for queue, keys in lists.items():
            messages = [self._parsed(key, raw) for key in keys for raw in reversed(next(replies))]
            found[queue] = iter(messages[: wanted[queue]])
        return found

    def _parsed(self, key: str, raw: bytes) -> Parked:
        """``raw`` as parked; one that is not a message of ours goes to the app's default
        queue as it is (not lost: the worker there says what it makes of it)."""
        try:
            payload = json.loads(raw)
            header = payload["headers"].get(PARKED_HEADER)
        except (ValueError, TypeError, KeyError, AttributeError):
            payload, header = None, None
        marker = Marker.from_header(header)
        if payload is None or marker is None:
            default = self.default_queue
            logger.warning("celery-pause: a parked message without its origin: sent to %s", default)
            return Parked(key, raw, payload, Marker(uuid.uuid4().hex, "", "", default))
        return Parked(key, raw, payload, marker)

    def _copy(self, parked: Parked, fresh: Marker) -> tuple[bytes | str, str]:
        """The copy of ``parked`` marked ``fresh``, and the list it goes to: its origin's, at
        its priority (its claim handed to it first, if it holds one)."""
        if parked.payload is None:
            return parked.raw, self._key(self.default_queue, 0)
        target = self._key(self._route(fresh), self.channel._get_message_priority(parked.payload))
        return json.dumps(_rewritten(parked.payload, fresh)), target

    def _route(self, marker: Marker) -> str:
        """The queue a message published to the marker's origin goes to (the first, if its
        exchange binds several to the key: a copy is one message)."""
        origin = (marker.exchange, marker.routing_key)
        if origin not in self._routes:
            queues = self.channel._lookup(*origin, self.default_queue)
            self._routes[origin] = queues[0] if queues else self.default_queue
        return self._routes[origin]

    def _key(self, queue: str, step: int) -> str:
        return self._prefix + str(self.channel._q_for_pri(queue, step))

    def _steps(self) -> list[int]:
        return list(self.channel.priority_steps)


def _task_id(parked: Parked) -> str:
    return text_of((parked.payload or {}).get("headers", {}).get("id"))


def _next_copy(copy: str) -> str:
    """The id of the copy that replaces ``copy``: the same each time ``copy`` is moved."""
    return uuid.uuid5(COPIES, copy).hex


def _rewritten(payload: dict[str, Any], marker: Marker) -> dict[str, Any]:
    """``payload`` as :func:`~.parking.publish_copy` would publish it again with ``marker``."""
    headers = {k: v for k, v in payload["headers"].items() if k != "redelivered"}
    headers[PARKED_HEADER] = marker.to_header()
    properties = dict(payload.get("properties") or {})
    properties["delivery_info"] = {"exchange": marker.exchange, "routing_key": marker.routing_key}
    properties["delivery_tag"] = str(uuid.uuid4())
    return {**payload, "headers": headers, "properties": properties}


def _index(keys: list[str], key: str) -> int:
    """``key``'s 1-based place in ``keys`` (added if new), as the script's KEYS count."""
    if key not in keys:
        keys.append(key)
    return keys.index(key) + 1
