"""Redis store: the state as one JSON key, updated with WATCH/MULTI; reports in a hash."""

from __future__ import annotations

import json
import logging
import math
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar, cast

import redis

from ..errors import StoreError
from ..model.report import WorkerReport
from ..model.state import PauseState, unreadable_hold
from .base import (
    Change,
    ClockOffset,
    Event,
    R,
    Record,
    RecordChange,
    RecordUpdated,
    Snapshot,
    Store,
    Updated,
    bad_url,
    check_key,
    check_log_name,
    decode_entry,
    decode_record,
    encode_entry,
    encode_record,
)
from .redis_notify import RedisNotifications

logger = logging.getLogger(__name__)
T = TypeVar("T")
RESP2: dict[str, int] = {"protocol": 2} if int(redis.__version__.split(".")[0]) >= 5 else {}
"""The protocol the store speaks (URL ``?protocol=3`` chooses the other): redis-py 8 defaults
to RESP3, whose handshake also asks for maintenance notifications and once hung a reconnect
right after a Sentinel failover. RESP2 also reaches servers older than Redis 6; redis-py 4
speaks only RESP2 and takes no ``protocol``."""
POLICY_CHECK = 60.0
"""Seconds between two looks at the server's ``maxmemory-policy``."""

# Extend the lease if ``owner`` holds it, else take it only if it is free.
ACQUIRE_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
return 0
"""
RELEASE_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class BaseRedisStore(Store):
    """The Redis stores' code on a redis-py client: :class:`RedisStore` (one keyspace) and
    the Redis Cluster store differ in the client, the keys and the hooks :meth:`_server`
    and :meth:`_time`."""

    def __init__(
        self,
        url: str,
        prefix: str,
        *,
        timeout: float = 2.0,
        client: redis.Redis | None = None,
        replicas: int = 0,
    ) -> None:
        """``client`` replaces the one made from ``url`` (Sentinel); with ``replicas``, a
        state change counts only once that many replicas acknowledged it (``WAIT``)."""
        super().__init__(url, prefix)
        self.state_key = f"{prefix}:state"
        self.workers_key = f"{prefix}:workers"
        self.client = client or _client(url, timeout)
        self.replicas = replicas
        self.timeout = timeout
        self._clock = ClockOffset(lambda: self._time(self._server(), self.state_key))
        self._policy: str | None = None
        self._policy_at = float("-inf")
        self.records_key = f"{prefix}:records"
        self._acquire_lease = self.client.register_script(ACQUIRE_LEASE)
        self._release_lease = self.client.register_script(RELEASE_LEASE)

    @classmethod
    def open(
        cls, url: str, prefix: str, *, timeout: float, options: Mapping[str, Any]
    ) -> BaseRedisStore:
        return cls(url, prefix, timeout=timeout)

    def _server(self) -> redis.Redis:
        """The server that holds the state: where ``TIME``, ``WAIT`` and ``INFO`` go."""
        return self.client

    def _time(self, client: redis.Redis, key: str) -> float:
        """The clock of ``key``'s server, read through ``client`` (a transaction's pipe)."""
        seconds, micros = client.time()
        return float(seconds) + micros / 1e6

    def now(self) -> float:
        with self._failing():
            return self._clock.now()

    def read(self) -> Snapshot:
        with self._failing():
            current = self._state(self.client)
        return Snapshot(current, self.now())

    def _state(self, client: redis.Redis | redis.client.Pipeline) -> PauseState:
        """The stored state; a key of another Redis type (a list someone ``LPUSH``-ed)
        reads as unreadable state, paused everywhere, which ``resume --force`` replaces
        (``SET`` overwrites a key of any type)."""
        try:
            return PauseState.decode(client.get(self.state_key))
        except redis.ResponseError as exc:
            if not str(exc).startswith("WRONGTYPE"):
                raise
            kind = client.type(self.state_key)
            kind = kind.decode() if isinstance(kind, bytes) else str(kind)
            detail = f"unreadable pause state: {self.state_key} is a Redis {kind}, not a string"
            return PauseState(generation=0, holds=(unreadable_hold(detail[:200]),))

    def update(self, change: Change[R]) -> Updated[R]:
        def transaction(pipe: redis.client.Pipeline) -> tuple[Updated[R], bool]:
            current = self._state(pipe)
            now = self._time(pipe, self.state_key)
            outcome = change(current, now)
            if outcome.value is not None:
                pipe.multi()
                pipe.set(self.state_key, outcome.value.encode())
            return Updated.of(current, now, outcome), _lifts_only(current, outcome.value)

        with self._failing():
            updated, lifts = self._transaction(transaction, self.state_key)
            if self.replicas and updated.changed:
                self._wait_for_replicas(lifts=lifts)
        return updated

    def _transaction(self, work: Callable[[redis.client.Pipeline], T], key: str) -> T:
        """Run ``work`` watching ``key`` until its transaction commits (it runs again when
        ``key`` changed meanwhile); what the attempt that committed returned."""
        run = cast(Callable[[redis.client.Pipeline], None], work)
        return cast(T, self.client.transaction(run, key, value_from_callable=True))

    def _wait_for_replicas(self, *, lifts: bool = False) -> None:
        """Acknowledge a state change only once replicas hold it: a failover then keeps it.
        ``WAIT`` gets half the socket timeout, so its answer arrives within it.

        A change that ``lifts`` holds only is acknowledged without them (with a warning):
        a failover that lost it would bring back what it lifted, paused, not run what it
        held. Right after a failover the new master often has no replica yet (the old
        master still resyncs), and a resume must work then.
        """
        wait = self.timeout / 2
        acknowledged = int(self._server().wait(self.replicas, max(1, int(wait * 1000))))
        if acknowledged >= self.replicas:
            return
        shortfall = (
            f"pause store {self.display_url}: the change reached the master but "
            f"{acknowledged} of {self.replicas} replica(s) acknowledged it within {wait:g}s"
        )
        if not lifts:
            raise StoreError(
                f"{shortfall}; a failover now could lose it. Check the replicas, then the status"
            )
        logger.warning(
            "celery-pause: %s; it only lifts holds: a failover that lost it would pause "
            "again. Check the status after a failover",
            shortfall,
        )

    def warnings(self) -> list[str]:
        """A warning when the server's ``maxmemory-policy`` may evict the pause state: its
        keys have no TTL, so only ``noeviction`` and the ``volatile-*`` policies spare them."""
        policy = self._eviction_policy()
        if policy is None or policy == "noeviction" or policy.startswith("volatile-"):
            return []
        return [
            f"maxmemory-policy is {policy}: under memory pressure Redis may evict "
            f"{self.state_key}, and a state that is gone reads as nothing paused; "
            "set maxmemory-policy noeviction (or a volatile-* policy)"
        ]

    def _eviction_policy(self) -> str | None:
        """The server's ``maxmemory-policy`` (``INFO memory`` where ``CONFIG`` is renamed
        away, as on managed servers), or ``None`` if it cannot be asked."""
        if time.monotonic() - self._policy_at > POLICY_CHECK:
            try:
                policy = self._server().info("memory").get("maxmemory_policy")
            except redis.RedisError:
                return None
            # A policy is a word of the server's: anything else is not shown.
            known = isinstance(policy, str) and policy.replace("-", "").isalpha()
            self._policy = policy if known else None
            self._policy_at = time.monotonic()
        return self._policy

    def put_worker(self, report: WorkerReport) -> None:
        with self._failing():
            self.client.hset(self.workers_key, report.hostname, report.encode())

    def remove_worker(self, hostname: str) -> None:
        with self._failing():
            self.client.hdel(self.workers_key, hostname)

    def worker_reports(self) -> list[WorkerReport]:
        with self._failing():
            raw = self.client.hvals(self.workers_key)
        return WorkerReport.decode_all(raw)

    def read_with_reports(self) -> tuple[Snapshot, list[WorkerReport]]:
        """The state and every report in one round trip (``GET`` and ``HVALS``, pipelined)."""
        with self._failing():
            pipe = self.client.pipeline(transaction=False)
            pipe.get(self.state_key)
            pipe.hvals(self.workers_key)
            try:
                raw_state, raw_reports = pipe.execute()
            except redis.ResponseError:
                return super().read_with_reports()  # a key of another type: said by each
        return Snapshot(PauseState.decode(raw_state), self.now()), WorkerReport.decode_all(
            raw_reports
        )

    def reports_of(self, hostnames: Collection[str]) -> list[WorkerReport]:
        if not hostnames:
            return []
        with self._failing():
            raw = self.client.hmget(self.workers_key, list(hostnames))
        return WorkerReport.decode_all(value for value in raw if value is not None)

    def append_log(self, log: str, entry: Mapping[str, Any], *, keep: int) -> None:
        key = f"{self.prefix}:log:{check_log_name(log)}"
        data = encode_entry(entry)
        with self._failing():
            pipe = self.client.pipeline(transaction=True)
            pipe.lpush(key, data)
            pipe.ltrim(key, 0, max(keep, 1) - 1)
            pipe.execute()

    def read_log(self, log: str, *, limit: int | None = None) -> list[dict[str, Any]]:
        key = f"{self.prefix}:log:{check_log_name(log)}"
        if limit is not None and limit < 1:
            return []
        with self._failing():
            raw = self.client.lrange(key, 0, -1 if limit is None else limit - 1)
        return [decode_entry(item) for item in raw]

    # -- shared counters, records and leases --------------------------------------------
    def add_event(self, key: str, *, window: float, detail: str = "", limit: int = 1000) -> int:
        events_key = f"{self.prefix}:events:{check_key(key)}"
        now = self.now()
        member = json.dumps({"at": now, "id": uuid.uuid4().hex[:12], "detail": detail})
        with self._failing(), self.client.pipeline(transaction=True) as pipe:
            pipe.zadd(events_key, {member: now})
            pipe.zremrangebyscore(events_key, "-inf", f"({now - window}")
            pipe.zremrangebyrank(events_key, 0, -limit - 1)
            pipe.zcard(events_key)
            pipe.expire(events_key, math.ceil(window) + 60)
            results = pipe.execute()
        return int(results[3])

    def recent_events(self, key: str, *, window: float) -> list[Event]:
        events_key = f"{self.prefix}:events:{check_key(key)}"
        now = self.now()
        with self._failing():
            raw = self.client.zrangebyscore(events_key, now - window, "+inf", withscores=True)
        pairs = cast(list[tuple[bytes, float]], raw)
        return [_event(member, score) for member, score in pairs]

    def clear_events(self, key: str) -> None:
        with self._failing():
            self.client.delete(f"{self.prefix}:events:{check_key(key)}")

    def read_record(self, key: str) -> Record | None:
        with self._failing():
            raw = self.client.hget(self.records_key, check_key(key))
        return decode_record(key, raw)

    def update_record(self, key: str, change: RecordChange[R]) -> RecordUpdated[R]:
        check_key(key)

        def transaction(pipe: redis.client.Pipeline) -> RecordUpdated[R]:
            current = decode_record(key, pipe.hget(self.records_key, key))
            outcome = change(current, self._time(pipe, self.records_key))
            if outcome.value is not None:
                data = encode_record(outcome.value)
                pipe.multi()
                if outcome.value:
                    pipe.hset(self.records_key, key, data)
                else:
                    pipe.hdel(self.records_key, key)
            return RecordUpdated.of(current, outcome)

        with self._failing():
            return self._transaction(transaction, self.records_key)

    def delete_record(self, key: str) -> None:
        with self._failing():
            self.client.hdel(self.records_key, check_key(key))

    def read_records(self, prefix: str) -> dict[str, Record]:
        with self._failing():
            raw = self.client.hgetall(self.records_key)
        found = ((k.decode() if isinstance(k, bytes) else str(k), v) for k, v in raw.items())
        return {
            key: record
            for key, value in found
            if key.startswith(prefix) and (record := decode_record(key, value)) is not None
        }

    def record_keys(self, prefix: str = "") -> list[str]:
        with self._failing():
            keys = self.client.hkeys(self.records_key)
        names = (k.decode() if isinstance(k, bytes) else str(k) for k in keys)
        return sorted(name for name in names if name.startswith(prefix))

    def acquire_lease(self, key: str, owner: str, ttl: float) -> bool:
        lease_key = f"{self.prefix}:lease:{check_key(key)}"
        millis = max(1, int(ttl * 1000))
        with self._failing():
            return bool(self._acquire_lease(keys=[lease_key], args=[json.dumps(owner), millis]))

    def release_lease(self, key: str, owner: str) -> bool:
        lease_key = f"{self.prefix}:lease:{check_key(key)}"
        with self._failing():
            return bool(self._release_lease(keys=[lease_key], args=[json.dumps(owner)]))

    def lease_owner(self, key: str) -> str | None:
        with self._failing():
            raw = self.client.get(f"{self.prefix}:lease:{check_key(key)}")
        if raw is None:
            return None
        try:
            owner = json.loads(raw)
        except ValueError:
            return "<unreadable>"
        return owner if isinstance(owner, str) else "<unreadable>"

    def close(self) -> None:
        self.client.close()

    @contextmanager
    def _failing(self) -> Iterator[None]:
        """Turn redis-py's errors into :class:`StoreError`, with the password masked."""
        try:
            yield
        except redis.RedisError as exc:
            raise self.failed(exc) from None


class RedisStore(RedisNotifications, BaseRedisStore):
    """Keeps ``<prefix>:state`` (JSON), ``<prefix>:workers`` (hash of JSON reports)
    and ``<prefix>:log:<name>`` (lists of JSON entries, newest first) in one keyspace.

    Events live in sorted sets ``<prefix>:events:<key>`` (JSON members scored by
    time), records in the hash ``<prefix>:records`` (JSON objects, updated with
    WATCH/MULTI) and leases in ``<prefix>:lease:<key>`` (a JSON string with a
    Redis expiry, taken and released by Lua scripts).
    """


def _lifts_only(before: PauseState, after: PauseState | None) -> bool:
    """Whether ``after`` pauses nothing ``before`` did not: it adds or alters no hold and
    drops no skip of a window's occurrence, so losing it can only pause again."""
    return after is not None and (
        all(hold in before.holds for hold in after.holds)
        and all(skip in after.skips for skip in before.skips)
    )


def _client(url: str, timeout: float) -> redis.Redis:
    """A client for ``url``; :class:`ConfigurationError` for a URL redis-py cannot read."""
    try:
        return redis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout, **RESP2
        )
    except ValueError as exc:
        raise bad_url(url, f"is not a Redis URL: {exc}") from None


def _event(member: bytes | str, score: float) -> Event:
    try:
        data = json.loads(member)
        return Event(at=float(data["at"]), detail=str(data.get("detail", "")))
    except (ValueError, KeyError, TypeError):
        return Event(at=float(score), detail="<unreadable event>")
