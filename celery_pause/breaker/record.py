"""A circuit breaker's shared state: one JSON record in the store, and its transitions.

Every transition is a pure function of the record and the store's clock, returning
the next record or ``None`` when it does not apply; the store runs it atomically
(:meth:`Store.update_record`), so concurrent workers agree on one outcome.

    closed --(fail_max failures in window, or one while its ramp lasts)--> open
    open --(reset_timeout passed, lease taken)--> half-open (a new period)
    half-open --(success_threshold successes)--> closed (ramping, with a ``ramp``)
    half-open --(a counted failure)--> open, reset_timeout grown by backoff_factor
    open/half-open --(its hold removed by an operator)--> closed
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TypeVar

from ..model.jsonfields import optional_str, require_str
from ..model.outcome import Outcome
from ..model.ramp import ramp_holds
from ..model.scope import Scope
from ..model.state import Hold

CLOSED = "closed"
OPEN = "open"
HALF_OPEN = "half-open"
STATES = (CLOSED, OPEN, HALF_OPEN)

R = TypeVar("R")


@dataclass(frozen=True)
class Policy:
    """The numbers the transitions need, from the breaker's options."""

    fail_max: int
    window: float
    reset_timeout: float
    max_reset_timeout: float
    backoff_factor: float
    half_open_trials: int
    success_threshold: int
    queues: tuple[str, ...] | None = None


@dataclass(frozen=True)
class BreakerRecord:
    """One breaker's state as the whole cluster sees it."""

    name: str
    state: str = CLOSED
    hold_id: str | None = None
    """The hold of the current (or, once closed, the last) open period."""
    hold_placed: bool = False
    opened_at: float | None = None
    next_probe_at: float | None = None
    reset_timeout: float | None = None
    """The reset timeout in force: it grows with every failed half-open period."""
    failures: int = 0
    """Failures in the window when it tripped."""
    last_error: str | None = None
    period: int = 0
    """Number of the latest half-open period (a fencing token for its prober)."""
    prober: str | None = None
    half_open_at: float | None = None
    trials: tuple[str, ...] = ()
    succeeded: tuple[str, ...] = ()
    closed_at: float | None = None
    ramp_until: float | None = None
    """End of the ramp the breaker closed with, if any; a failure before it re-opens it."""
    fail_max: int = 0
    window: float = 0.0
    queues: tuple[str, ...] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    """Fields written by a newer version, kept as they are."""

    # -- transitions ------------------------------------------------------------------
    def trip(
        self, now: float, count: int, error: str, policy: Policy, hold_id: str
    ) -> BreakerRecord | None:
        """Open if closed and ``count`` failures reached ``fail_max``, or at once while
        the breaker's ramp lasts."""
        if self.state != CLOSED or (count < policy.fail_max and not self.ramping(now)):
            return None
        return replace(
            self,
            state=OPEN,
            hold_id=hold_id,
            hold_placed=False,
            opened_at=now,
            next_probe_at=now + policy.reset_timeout,
            reset_timeout=policy.reset_timeout,
            failures=count,
            last_error=error,
            prober=None,
            half_open_at=None,
            trials=(),
            succeeded=(),
            ramp_until=None,
        )

    def placed(self, hold_id: str) -> BreakerRecord | None:
        """Note that the hold ``hold_id`` is in the pause state."""
        if self.state == CLOSED or self.hold_id != hold_id or self.hold_placed:
            return None
        return replace(self, hold_placed=True)

    def begin_half_open(self, now: float, prober: str) -> BreakerRecord | None:
        """Start a half-open period run by ``prober``, who must hold the probe lease.

        From open once ``next_probe_at`` passed, or from a half-open period whose
        prober lost the lease (it crashed): that period ends and a new one starts.
        """
        due = self.state == OPEN and self.next_probe_at is not None and now >= self.next_probe_at
        orphaned = self.state == HALF_OPEN and self.prober != prober
        if not (due or orphaned):
            return None
        return replace(
            self,
            state=HALF_OPEN,
            period=self.period + 1,
            prober=prober,
            half_open_at=now,
            trials=(),
            succeeded=(),
        )

    def add_trial(self, period: int, prober: str, task_id: str, limit: int) -> BreakerRecord | None:
        """Admit ``task_id`` as a trial of ``period``, up to ``limit`` trials a period."""
        if not self._runs(period) or self.prober != prober:
            return None
        if task_id in self.trials or len(self.trials) >= limit:
            return None
        return replace(self, trials=(*self.trials, task_id))

    def succeed(
        self, period: int, key: str, threshold: int, now: float, ramp: float | None = None
    ) -> BreakerRecord | None:
        """Count success ``key`` (a trial's task id, or a probe's) in ``period``;
        close at ``threshold`` successes, ramping over ``ramp`` seconds if given."""
        if not self._runs(period) or key in self.succeeded:
            return None
        if not key.startswith("probe:") and key not in self.trials:
            return None
        succeeded = (*self.succeeded, key)
        if len(succeeded) < threshold:
            return replace(self, succeeded=succeeded)
        return self.close(now, ramp)

    def fail(
        self, period: int, now: float, error: str, policy: Policy, key: str | None = None
    ) -> BreakerRecord | None:
        """Re-open after a failed trial (``key``) or probe in ``period``, backing off."""
        if not self._runs(period):
            return None
        if key is not None and not key.startswith("probe:") and key not in self.trials:
            return None
        timeout = min(
            (self.reset_timeout or policy.reset_timeout) * policy.backoff_factor,
            policy.max_reset_timeout,
        )
        return replace(
            self,
            state=OPEN,
            next_probe_at=now + timeout,
            reset_timeout=timeout,
            last_error=error,
            prober=None,
            trials=(),
            succeeded=(),
        )

    def close(self, now: float, ramp: float | None = None) -> BreakerRecord:
        """Closed, with the timeout back to its configured value, ramping over ``ramp``
        seconds if given; ``hold_id`` is kept so that a hold left behind by an interrupted
        close can be recognised."""
        return replace(
            self,
            state=CLOSED,
            hold_placed=False,
            next_probe_at=None,
            reset_timeout=None,
            prober=None,
            half_open_at=None,
            trials=(),
            succeeded=(),
            closed_at=now,
            ramp_until=None if ramp is None else now + ramp,
        )

    def forced_close(self, hold_id: str, now: float) -> BreakerRecord | None:
        """Close because hold ``hold_id`` was removed by someone else (a forced resume)."""
        if self.state == CLOSED or self.hold_id != hold_id:
            return None
        return self.close(now)

    def ramping(self, now: float) -> bool:
        """Whether the breaker is closed and the ramp it closed with still lasts at ``now``."""
        return self.state == CLOSED and self.ramp_until is not None and now < self.ramp_until

    def ramp_on(self, scope: Scope, peak: float, source: str) -> tuple[Hold, ...]:
        """The holds of the ramp on ``scope`` that this close started, if it closed with one."""
        if self.state != CLOSED or self.ramp_until is None or self.closed_at is None:
            return ()
        duration = self.ramp_until - self.closed_at
        return ramp_holds(scope, start=self.closed_at, duration=duration, peak=peak, source=source)

    def with_policy(self, policy: Policy) -> BreakerRecord:
        """The record carrying the breaker's settings, for status readers."""
        return replace(self, fail_max=policy.fail_max, window=policy.window, queues=policy.queues)

    def _runs(self, period: int) -> bool:
        return self.state == HALF_OPEN and self.period == period

    # -- JSON -------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        extra = data.pop("extra")
        data["trials"] = list(self.trials)
        data["succeeded"] = list(self.succeeded)
        data["queues"] = None if self.queues is None else list(self.queues)
        return {**extra, **data}

    @classmethod
    def from_json(cls, name: str, data: dict[str, Any] | None) -> BreakerRecord:
        """Decode a record; :class:`ValueError` if it is not one."""
        if data is None:
            return cls(name=name)
        try:
            state = data["state"]
            if state not in STATES:
                raise ValueError(f"unknown state {state!r}")
            queues = data.get("queues")
            known = set(cls.__dataclass_fields__)
            return cls(
                name=name,
                state=state,
                hold_id=optional_str(data.get("hold_id")),
                hold_placed=bool(data.get("hold_placed", False)),
                opened_at=_opt_float(data.get("opened_at")),
                next_probe_at=_opt_float(data.get("next_probe_at")),
                reset_timeout=_opt_float(data.get("reset_timeout")),
                failures=int(data.get("failures", 0)),
                last_error=optional_str(data.get("last_error")),
                period=int(data.get("period", 0)),
                prober=optional_str(data.get("prober")),
                half_open_at=_opt_float(data.get("half_open_at")),
                trials=tuple(require_str(t) for t in data.get("trials", ())),
                succeeded=tuple(require_str(t) for t in data.get("succeeded", ())),
                closed_at=_opt_float(data.get("closed_at")),
                ramp_until=_opt_float(data.get("ramp_until")),
                fail_max=int(data.get("fail_max", 0)),
                window=float(data.get("window", 0.0)),
                queues=None if queues is None else tuple(require_str(q) for q in queues),
                extra={k: v for k, v in data.items() if k not in known},
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"unreadable breaker record {name!r}: {exc!r}"[:300]) from None


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


Rule = Callable[[BreakerRecord, float], Outcome[BreakerRecord, R]]
"""Given the record and store time, the next record (``None``: no change) and a result."""
