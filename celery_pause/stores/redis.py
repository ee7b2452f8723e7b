"""Redis store: the state as one JSON key, updated with WATCH/MULTI; reports in a hash."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar, cast

import redis

from ..errors import StoreError
from ..model.report import WorkerReport
from ..model.state import PauseState, unreadable_hold
from .base import (
    Change,
    ClockOffset,
    Snapshot,
    Store,
    Updated,
    bad_url,
    decode_record,
    decoded_or_error,
)
from .primitives import (
    R,
    Record,
    check_key,
    check_log_name,
    decode_entry,
)
from .redis_lease import ScriptedLeases
from .redis_notify import RedisNotifications
from .redis_records import SwappedRecords

logger = logging.getLogger(__name__)
T = TypeVar("T")
RESP2: dict[str, int] = {"protocol": 2} if int(redis.__version__.split(".")[0]) >= 5 else {}
"""The protocol the store speaks (URL ``?protocol=3`` chooses the other): redis-py 8 defaults
to RESP3, whose handshake also asks for maintenance notifications and once hung a reconnect
right after a Sentinel failover. RESP2 also reaches servers older than Redis 6; redis-py 4
speaks only RESP2 and takes no ``protocol``."""
POLICY_CHECK = 60.0
"""Seconds between two looks at the server's ``maxmemory-policy``."""

SCAN_COUNT = 1000


class BaseRedisStore(SwappedRecords, ScriptedLeases, Store):
    """The Redis stores' code on a redis-py client: :class:`RedisStore` (one keyspace) and
    the Redis Cluster store differ in the client, the keys and the hooks :meth:`_server`,
    :meth:`_time`, :meth:`_read_many` and :meth:`_migrate`."""

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
        self._written: dict[str, bytes | object | None] = {}
        """What this process last wrote of each record (:class:`SwappedRecords`)."""
        self.record_prefix = f"{prefix}:record:"
        """What each record's key begins with (``<prefix>:record:<key>``)."""

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
            kind = _text(kind)
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

    def legacy_log(self, log: str) -> list[dict[str, Any]]:
        """The list ``<prefix>:log:<name>`` of earlier releases, newest first."""
        with self._failing():
            raw = self.client.lrange(self._legacy_log_key(log), 0, -1)
        return [decode_entry(item) for item in raw]

    def drop_legacy_log(self, log: str) -> None:
        with self._failing():
            self.client.delete(self._legacy_log_key(log))

    def _legacy_log_key(self, log: str) -> str:
        return f"{self.prefix}:log:{check_log_name(log)}"

    # -- records: one key each -----------------------------------------------------------------
    def record_key(self, key: str) -> str:
        """The Redis key of record ``key``."""
        return self.record_prefix + check_key(key)

    def read_record(self, key: str) -> Record | None:
        with self._failing():
            self._migrate()
            raw = self.client.get(self.record_key(key))
        return decode_record(key, raw)

    def delete_record(self, key: str) -> None:
        self._written.pop(self.record_key(key), None)  # the next change finds it missing
        with self._failing():
            self._migrate()
            self.client.delete(self.record_key(key))

    def record_keys(self, prefix: str = "") -> list[str]:
        with self._failing():
            self._migrate()
            return sorted(self._scan(prefix))

    def read_records(self, prefix: str) -> dict[str, Record]:
        """Every record of the keys that start with ``prefix``: the keys (a ``SCAN``), then
        their values in one read (one per primary on a cluster)."""
        with self._failing():
            keys = self.record_keys(prefix)
            raw = self._read_many([self.record_key(key) for key in keys]) if keys else []
        found = {key: decode_record(key, value) for key, value in zip(keys, raw, strict=True)}
        return {key: record for key, record in found.items() if record is not None}

    def read_each(self, keys: Sequence[str]) -> dict[str, Record | StoreError | None]:
        """The records ``keys`` in one round trip (one per primary on a cluster); the next change
        of each record read is computed from what was read (:class:`SwappedRecords`)."""
        if not keys:
            return {}
        names = [self.record_key(key) for key in keys]
        with self._failing():
            self._migrate()
            raw = self._read_many(names)
        found = {}
        for key, name, value in zip(keys, names, raw, strict=True):
            found[key] = decoded_or_error(key, value)
            if not isinstance(found[key], StoreError):
                self._remember(name, value)
        return found

    def _scan(self, prefix: str) -> Iterator[str]:
        """The record keys that start with ``prefix``: a ``SCAN``."""
        start = len(self.record_prefix)
        pattern = glob_escape(self.record_prefix + prefix) + "*"
        for name in self.client.scan_iter(match=pattern, count=SCAN_COUNT):
            yield _text(name)[start:]

    def _read_many(self, names: list[str]) -> list[bytes | str | None]:
        """The values of the Redis keys ``names``, ``None`` where there is none."""
        return list(self.client.mget(names))

    def _migrate(self) -> None:
        """Move what an earlier release kept elsewhere into the records (nothing by default)."""

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
    """Keeps ``<prefix>:state`` (JSON), ``<prefix>:workers`` (hash of JSON reports) and each
    record as ``<prefix>:record:<key>`` (JSON, updated by a compare-and-set script, listed by
    a ``SCAN``).

    Earlier releases kept every record in the hash ``<prefix>:records`` and the history in the
    list ``<prefix>:log:history``: a process moves the hash's records at its first use of
    them (:meth:`_migrate`), and the history's first new entry takes the list over."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.legacy_key = f"{self.prefix}:records"
        self._migrated = False

    def read_with_record(self, key: str) -> tuple[Snapshot, Record | StoreError | None]:
        """The state and the record in one ``MGET``. ``MGET`` answers nothing for a key of
        another type, so a state found missing is read again with ``GET``, which tells (a
        record of another type reads as missing)."""
        with self._failing():
            self._migrate()
            raw_state, raw = self.client.mget([self.state_key, self.record_key(key)])
            state = PauseState.decode(raw_state) if raw_state else self._state(self.client)
        return Snapshot(state, self.now()), decoded_or_error(key, raw)

    def _migrate(self) -> None:
        """Once a process: move every record of the hash of earlier releases to its own key
        (unless a record is there already), then delete the hash, in one transaction that
        watches the hash (a record changed meanwhile is watched by its own change)."""
        if self._migrated:
            return

        def move(pipe: redis.client.Pipeline) -> None:
            fields = {_text(k): v for k, v in pipe.hgetall(self.legacy_key).items()}
            names = [self.record_key(key) for key in fields]
            present = pipe.mget(names) if names else []
            pipe.multi()
            for name, value, there in zip(names, fields.values(), present, strict=True):
                if there is None:
                    pipe.set(name, value)
            pipe.delete(self.legacy_key)

        if self.client.exists(self.legacy_key):
            self.client.transaction(move, self.legacy_key)
        self._migrated = True


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


def glob_escape(text: str) -> str:
    """``text`` as a Redis ``MATCH`` pattern that matches only itself."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)


def _text(name: bytes | str) -> str:
    return name.decode() if isinstance(name, bytes) else str(name)
