"""The store contract: one shared pause state and the workers' reports."""

from __future__ import annotations

import json
import math
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic

from kombu.utils.url import sanitize_url

from ..errors import ConfigurationError, InvalidInput, StoreError, UnreadableRecord
from ..model.outcome import Outcome
from ..model.report import WorkerReport
from ..model.state import PauseState
from . import primitives
from .primitives import Event, R, Record, RecordChange

PASSWORD = re.compile(r"(//[^/@:]*:)[^@]*@")
QUERY_PASSWORD = re.compile(r"([?&]password=)[^&]*")

Change = Callable[[PauseState, float], Outcome[PauseState, R]]
"""Given the current state and store time, the next state (``None``: no change) and a result."""


@dataclass(frozen=True)
class Snapshot:
    """The state as read, with the store's clock at the time of reading."""

    state: PauseState
    now: float


@dataclass(frozen=True)
class Updated(Generic[R]):
    """What :meth:`Store.update` committed: the state after it, whether it changed, and the
    result of the attempt that committed."""

    snapshot: Snapshot
    changed: bool
    result: R

    @classmethod
    def of(cls, current: PauseState, now: float, outcome: Outcome[PauseState, R]) -> Updated[R]:
        """The update ``outcome`` makes of ``current`` at store time ``now``."""
        if outcome.value is None:
            return cls(Snapshot(current, now), False, outcome.result)
        return cls(Snapshot(outcome.value, now), True, outcome.result)


@dataclass(frozen=True)
class RecordUpdated(Generic[R]):
    """What :meth:`Store.update_record` committed: the record after it (``None`` if there
    is none), whether it changed, and the result of the attempt that committed."""

    record: Record | None
    changed: bool
    result: R

    @classmethod
    def of(cls, current: Record | None, outcome: Outcome[Record, R]) -> RecordUpdated[R]:
        """The update ``outcome`` makes of ``current``."""
        if outcome.value is None:
            return cls(current, False, outcome.result)
        return cls(outcome.value or None, True, outcome.result)


class Store(ABC):
    """Where the pause state lives. Implementations must make :meth:`update` atomic.

    Every method is part of the contract (abstract): a store that lacks one cannot be
    instantiated. Every I/O failure raises :class:`StoreError` naming the store by
    :attr:`display_url` (never a password); a URL a store cannot use raises
    :class:`ConfigurationError` from the constructor.
    """

    def __init__(self, url: str, prefix: str) -> None:
        self.url = url
        self.prefix = prefix

    @classmethod
    def open(cls, url: str, prefix: str, *, timeout: float, options: Mapping[str, Any]) -> Store:
        """The store at ``url`` as :func:`~celery_pause.stores.open_store` opens it, with the
        store timeout and transport options of the settings (most stores need neither)."""
        return cls(url, prefix)

    @property
    def display_url(self) -> str:
        """The URL with any password masked, safe to print."""
        return display(self.url)

    def failed(self, detail: object) -> StoreError:
        """The error for an I/O failure of this store: its URL (password masked) and why."""
        return StoreError(f"pause store {self.display_url} failed: {detail}")

    def now(self) -> float:
        """The store's clock, in seconds since the epoch: this host's by default (a store
        shared by several hosts answers with its own, as the Redis and SQL stores do)."""
        return time.time()

    @abstractmethod
    def read(self) -> Snapshot:
        """The current state and store time."""

    @abstractmethod
    def update(self, change: Change[R]) -> Updated[R]:
        """Apply ``change`` atomically; return the state after it, whether it changed, and
        the result of the attempt that committed.

        ``change`` may be called more than once (on contention) and must be pure.
        """

    @abstractmethod
    def put_worker(self, report: WorkerReport) -> None:
        """Record a worker's report."""

    @abstractmethod
    def remove_worker(self, hostname: str) -> None:
        """Forget a worker that shut down."""

    @abstractmethod
    def worker_reports(self) -> list[WorkerReport]:
        """Every recorded worker report, live or stale."""

    def read_with_reports(self) -> tuple[Snapshot, list[WorkerReport]]:
        """:meth:`read` and :meth:`worker_reports` together (what ``status()`` reads); a
        store may answer both in one round trip. The snapshot's clock is read after both."""
        state = self.read().state
        reports = self.worker_reports()
        return Snapshot(state, self.now()), reports

    def read_with_record(self, key: str) -> tuple[Snapshot, Record | StoreError | None]:
        """:meth:`read` and :meth:`read_record` of ``key`` together (what a worker polls); a
        store may answer both in one round trip. A record that cannot be read is answered as
        its error, so that the state is read all the same."""
        snapshot = self.read()
        return snapshot, self.read_each([key])[key]

    def reports_of(self, hostnames: Collection[str]) -> list[WorkerReport]:
        """The recorded reports of ``hostnames`` (those it has): what a wait reads after its
        first poll, so that each poll costs what is still busy, not the whole cluster."""
        wanted = set(hostnames)
        return [r for r in self.worker_reports() if r.hostname in wanted]

    def live_reports(self, ttl: float, now: float) -> list[WorkerReport]:
        """Reports seen within ``ttl`` seconds of store time ``now``, by hostname."""
        reports = (r for r in self.worker_reports() if now - r.seen <= ttl)
        return sorted(reports, key=lambda r: r.hostname)

    def warnings(self) -> list[str]:
        """What may make the store lose its state on its own (a Redis eviction policy);
        empty by default. Never raises: a store it cannot ask has nothing to say."""
        return []

    def init(self) -> str:
        """Create what the store needs (tables) unless it exists; say what was done."""
        return "nothing to create: this store needs no tables"

    def close(self) -> None:  # noqa: B027  (optional hook)
        """Release connections or files."""

    def notify(self) -> None:  # noqa: B027  (optional hook)
        """Tell every worker that :meth:`listen` s that the state changed (after a write);
        a store without notifications does nothing, its workers poll. Never raises."""

    def listen(self, callback: Callable[[], None]) -> Callable[[], None] | None:
        """Call ``callback`` from a thread of the store's own on each :meth:`notify` of any
        process (and after each reconnect, as one may have been missed); return what stops
        it, or ``None``: this store has no notifications (the default), the worker polls."""
        return None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.display_url} prefix={self.prefix!r}>"

    # -- records, and what is built on them ------------------------------------------------
    @abstractmethod
    def read_record(self, key: str) -> Record | None:
        """The JSON object stored as ``key``, or ``None``; :class:`StoreError` if unreadable."""

    @abstractmethod
    def update_record(self, key: str, change: RecordChange[R]) -> RecordUpdated[R]:
        """Apply ``change`` to record ``key`` atomically; return the record after it, whether
        it changed, and the result of the attempt that committed.

        Like :meth:`update`, ``change`` may run more than once and must be pure. A change
        that writes an empty record (``{}``) deletes it. An unreadable record raises
        :class:`StoreError` and is left as it is.
        """

    @abstractmethod
    def record_keys(self, prefix: str = "") -> list[str]:
        """The keys of every record whose key starts with ``prefix``, sorted."""

    def read_records(self, prefix: str) -> dict[str, Record]:
        """Every record whose key starts with ``prefix``, by key (stores with a bulk read
        override this one-by-one read)."""
        found = {key: self.read_record(key) for key in self.record_keys(prefix)}
        return {key: record for key, record in found.items() if record is not None}

    def read_each(self, keys: Sequence[str]) -> dict[str, Record | StoreError | None]:
        """The records ``keys``, by key: ``None`` where there is none, its error where one
        cannot be read (stores with a bulk read answer all in one round trip)."""
        found: dict[str, Record | StoreError | None] = {}
        for key in keys:
            try:
                found[key] = self.read_record(key)
            except StoreError as exc:
                found[key] = exc
        return found

    @abstractmethod
    def delete_record(self, key: str) -> None:
        """Remove record ``key``, also an unreadable one (no error if there is none)."""

    def append_log(self, log: str, entry: Mapping[str, Any], *, keep: int) -> None:
        """Put ``entry`` (a JSON object) first in the log ``log``, keeping the newest ``keep``.

        Independent of :meth:`update`: it neither takes part in nor waits for a
        state change, so it may be called right after one.
        """
        key, data = primitives.log_key(log), primitives.checked_entry(entry)
        before = self.legacy_log(log) if self.read_record(key) is None else None
        self.update_record(key, primitives.prepend(data, keep, before or []))
        if before is not None:
            self.drop_legacy_log(log)

    def read_log(self, log: str, *, limit: int | None = None) -> list[dict[str, Any]]:
        """The newest ``limit`` entries of ``log`` (every kept one by default), newest first."""
        if limit is not None and limit < 1:
            return []
        record = self.read_record(primitives.log_key(log))
        entries = primitives.entries_of(record) if record is not None else self.legacy_log(log)
        return entries[:limit]

    def legacy_log(self, log: str) -> list[dict[str, Any]]:
        """The entries of ``log`` as earlier releases kept them, newest first (none by
        default): read until the log's first append in a record takes them over."""
        return []

    def drop_legacy_log(self, log: str) -> None:  # noqa: B027  (optional hook)
        """Remove ``log`` as earlier releases kept it, once a record took it over."""

    def add_event(self, key: str, *, window: float, detail: str = "", limit: int = 1000) -> int:
        """Record an event now in the sliding window ``key``; return how many events
        the window holds (those of the last ``window`` seconds, at most ``limit``)."""
        change = primitives.add_event(window, detail, limit)
        return self.update_record(primitives.events_key(key), change).result

    def recent_events(self, key: str, *, window: float) -> list[Event]:
        """The events of the last ``window`` seconds in ``key``, oldest first."""
        events = primitives.events_of(self.read_record(primitives.events_key(key)), key)
        since = self.now() - window
        return [event for event in events if event.at >= since]

    def clear_events(self, key: str) -> None:
        """Forget every event in ``key``."""
        self.delete_record(primitives.events_key(key))

    def acquire_lease(self, key: str, owner: str, ttl: float) -> bool:
        """Take lease ``key`` for ``ttl`` seconds if it is free or expired, or extend it
        if ``owner`` holds it already; return whether ``owner`` holds it now."""
        return self.update_record(primitives.lease_key(key), primitives.acquire(owner, ttl)).result

    def acquire_leases(self, owners: Mapping[str, str], ttl: float) -> dict[str, bool]:
        """:meth:`acquire_lease` of each key for its owner in ``owners``; whether each owner
        holds its lease now (one round trip where the store allows)."""
        return {key: self.acquire_lease(key, owner, ttl) for key, owner in owners.items()}

    def release_lease(self, key: str, owner: str) -> bool:
        """Give up lease ``key`` if ``owner`` holds it; return whether it did."""
        return self.update_record(primitives.lease_key(key), primitives.release(owner)).result

    def lease_owner(self, key: str) -> str | None:
        """Who holds lease ``key`` now, or ``None`` if it is free or expired."""
        return primitives.lease_holder(self.read_record(primitives.lease_key(key)), self.now())


def display(url: str) -> str:
    """``url`` with any password masked, safe to print, also when it does not parse (a bad
    port); each of several ``;``-separated URLs (Sentinel) on its own."""
    return ";".join(_display_one(part.strip()) if part.strip() else "" for part in url.split(";"))


def _display_one(url: str) -> str:
    try:
        return sanitize_url(url)
    except ValueError:
        return QUERY_PASSWORD.sub(r"\1**", PASSWORD.sub(r"\1**@", url))


def bad_url(url: str, problem: str) -> ConfigurationError:
    """The error for a store URL that cannot be used: the URL (password masked) and why."""
    joined = problem if problem.startswith(":") else f" {problem}"
    return ConfigurationError(f"pause_store_url {display(url)!r}{joined}")


def call_bound(timeout: float) -> float:
    """Seconds one store call may take before it fails with :class:`StoreError`: three
    store timeouts (whole seconds), room for a lock another writer holds for a moment."""
    return 3.0 * max(1, math.ceil(timeout))


def encode_record(record: dict[str, Any]) -> bytes:
    """A record as compact JSON; only JSON objects are records."""
    if not isinstance(record, dict):
        raise InvalidInput(f"a record must be a JSON object, got {type(record).__name__}")
    try:
        return json.dumps(record, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"a record must be JSON: {exc}") from None


def decode_record(key: str, raw: bytes | str | None) -> dict[str, Any] | None:
    """A stored record; :class:`~celery_pause.errors.UnreadableRecord` if it is not a JSON
    object (never dropped)."""
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise UnreadableRecord(f"record {key!r} is unreadable: {exc}"[:300]) from None
    if not isinstance(value, dict):
        raise UnreadableRecord(f"record {key!r} is not a JSON object but {type(value).__name__}")
    return value


def decoded_or_error(key: str, raw: bytes | str | None) -> Record | StoreError | None:
    """:func:`decode_record`, with an unreadable record answered as its error."""
    try:
        return decode_record(key, raw)
    except StoreError as exc:
        return exc


class ClockOffset:
    """The store's clock, read once a minute and extrapolated in between from this host's
    monotonic clock: a step of the wall clock (NTP, a VM resumed) changes nothing."""

    def __init__(self, read_clock: Callable[[], float], refresh: float = 60.0) -> None:
        self._read_clock = read_clock
        self._refresh = refresh
        self._offset = 0.0
        """Store time minus ``time.monotonic()``, as of the last read."""
        self._read_at = float("-inf")

    def now(self) -> float:
        if time.monotonic() - self._read_at > self._refresh:
            store_now = self._read_clock()
            self._read_at = time.monotonic()
            self._offset = store_now - self._read_at
        return time.monotonic() + self._offset
