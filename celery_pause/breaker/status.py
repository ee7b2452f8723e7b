"""What ``pause status`` shows of each breaker, read from its record in the store."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from celery import Celery

from ..errors import StoreError
from ..model.formatting import format_time
from ..model.scope import Scope
from ..model.state import UNREADABLE
from ..stores import Store, store_for
from .circuit import RECORD_PREFIX, CircuitBreaker, breakers_of
from .record import HALF_OPEN, OPEN, BreakerRecord


@dataclass(frozen=True)
class BreakerStatus:
    """One breaker as ``pause status`` shows it."""

    name: str
    state: str
    failures: int
    fail_max: int
    window: float
    opened_at: float | None = None
    next_probe_at: float | None = None
    reset_timeout: float | None = None
    last_error: str | None = None
    prober: str | None = None
    period: int = 0
    queues: tuple[str, ...] | None = None
    hold_id: str | None = None
    ramp_until: float | None = None
    """While it closes with a ramp: when the ramp ends (a failure before re-opens it)."""
    now: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """The fields as JSON (times as epoch seconds), for ``pause status --json``."""
        data = asdict(self)
        data.pop("now")
        data["queues"] = None if self.queues is None else list(self.queues)
        return data

    def describe(self) -> str:
        """One line for people."""
        scope = "its tasks" if self.queues is None else Scope.of(self.queues).describe()
        parts = [f"circuit {self.name} ({scope}): {self.state}"]
        if self.state != UNREADABLE:
            parts.append(f"{self.failures}/{self.fail_max} failures in {self.window:g}s")
        if self.state in (OPEN, HALF_OPEN) and self.opened_at is not None:
            parts.append(f"opened at {format_time(self.opened_at)}")
        if self.state == OPEN and self.next_probe_at is not None:
            wait = max(0.0, self.next_probe_at - self.now)
            parts.append(f"next probe at {format_time(self.next_probe_at)} (in {wait:.0f}s)")
        if self.ramp_until is not None:
            parts.append(f"ramping until {format_time(self.ramp_until)}")
        if self.state == HALF_OPEN:
            parts.append(f"probing (period {self.period}) by {self.prober or 'nobody yet'}")
        if self.last_error:
            parts.append(f"last error: {self.last_error}")
        return "; ".join(parts)


def breaker_status(app: Celery, breaker: CircuitBreaker) -> BreakerStatus:
    """``breaker``'s state as the cluster sees it.

    Parameters:
        app: The Celery app whose store holds the breaker's record.
        breaker: The breaker to read.

    Returns:
        Its state, failures in the window, hold, probe and last error.

    Raises:
        StoreError: The store cannot be reached, or the breaker's record is unreadable.
    """
    return _status(store_for(app), breaker.name, breaker)


def breaker_statuses(app: Celery) -> list[BreakerStatus]:
    """Every breaker of ``app`` and every breaker with state in its store, by name.

    Parameters:
        app: The Celery app whose breakers (its tasks' and its store's) to read.

    Returns:
        One status a breaker, sorted by name.

    Raises:
        StoreError: The store cannot be reached, or a breaker's record is unreadable.
    """
    store = store_for(app)
    known = breakers_of(app)
    names = {key[len(RECORD_PREFIX) :] for key in store.record_keys(RECORD_PREFIX)}
    return [_status(store, name, known.get(name)) for name in sorted(names | set(known))]


def _status(store: Store, name: str, breaker: CircuitBreaker | None) -> BreakerStatus:
    key = RECORD_PREFIX + name
    try:
        record = BreakerRecord.from_json(name, store.read_record(key))
    except (StoreError, ValueError) as exc:
        return BreakerStatus(
            name=name, state=UNREADABLE, failures=0, fail_max=0, window=0.0,
            last_error=str(exc)[:300],
        )  # fmt: skip
    if breaker is not None:
        record = record.with_policy(breaker.policy)
    last_error = record.last_error
    try:
        events = store.recent_events(key, window=record.window) if record.window else []
        prober = store.lease_owner(key) if record.state == HALF_OPEN else None
    except StoreError as exc:  # a damaged window or lease: the record still says the state
        events, prober, last_error = [], None, str(exc)[:300]
    now = store.now()
    return BreakerStatus(
        name=name,
        state=record.state,
        failures=len(events),
        fail_max=record.fail_max,
        window=record.window,
        opened_at=record.opened_at,
        next_probe_at=record.next_probe_at,
        reset_timeout=record.reset_timeout,
        last_error=events[-1].detail if events else last_error,
        prober=prober,
        period=record.period,
        queues=record.queues,
        hold_id=record.hold_id,
        ramp_until=record.ramp_until if record.ramping(now) else None,
        now=now,
    )
