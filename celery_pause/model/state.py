"""The pause state: holds, the scope they pause, and their JSON encoding.

The state is a set of *holds*. A task is paused while at least one active hold
covers it (:mod:`.scope`): a hold is *live* until its ``resume_at`` passes and *active* once its
``start_at`` (if any) has come too, both judged by the store's clock. A live hold not yet started
is *scheduled*. Beside the holds the state keeps, per maintenance window, the store time until
which its occurrences are skipped (:mod:`.windows`). Every change to the state increases its
generation; every generation written since the state was first written from nothing (no
state, or an unreadable one replaced) shares that state's *epoch*, a random id: a worker
that reads no state, or an older generation of its epoch, knows the store forgot
(:mod:`.restoring`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from .formatting import clip, format_time
from .jsonfields import number, optional_str, require_str
from .limit import MAX_RATE, Limit
from .scope import EVERYTHING, NOTHING, Scope, rule_from_json

SCHEMA = 1
MANUAL = "manual"
BREAKER_PREFIX = "breaker:"
WINDOW_PREFIX = "window:"
UNREADABLE = "unreadable"
BEAT_QUEUE = "queue"
"""Beat policy: beat sends periodic tasks of the hold's scope; workers hold them (the default)."""
BEAT_SKIP = "skip"
"""Beat policy: beat does not send periodic tasks of the hold's scope while the hold is active."""
BEAT_POLICIES = (BEAT_QUEUE, BEAT_SKIP)


def fresh_id() -> str:
    """A new random id (of a hold, or of an epoch)."""
    return uuid.uuid4().hex[:12]


@dataclass(frozen=True)
class Hold:
    """One reason for queues to be paused."""

    scope: Scope
    source: str = MANUAL
    paused_by: str | None = None
    reason: str | None = None
    paused_at: float = 0.0
    resume_at: float | None = None
    id: str = field(default_factory=fresh_id)
    start_at: float | None = None
    """Store time the hold starts; ``None``: at once (it was placed at ``paused_at``)."""
    beat: str = BEAT_QUEUE
    """What ``celery beat`` does with periodic tasks in scope: ``queue`` or ``skip``."""
    limit: Limit | None = None
    """``None``: the hold pauses its scope; else it limits its scope's rate or concurrency."""

    @property
    def pauses(self) -> bool:
        """Whether the hold stops its scope (a limit only slows it)."""
        return self.limit is None

    @property
    def ramp(self) -> bool:
        """Whether the hold is a ramped resume: a limit whose rate rises until it ends."""
        return self.limit is not None and self.limit.rise is not None

    def live(self, now: float) -> bool:
        """Whether the hold is still in place (active or scheduled) at store time ``now``."""
        return self.resume_at is None or now < self.resume_at

    def started(self, now: float) -> bool:
        """Whether the hold's start has come at store time ``now``."""
        return self.start_at is None or self.start_at <= now

    def active(self, now: float) -> bool:
        """Whether the hold pauses its scope at store time ``now``."""
        return self.live(now) and self.started(now)

    @property
    def began(self) -> float:
        """When the hold starts (or started) pausing: ``start_at``, else ``paused_at``."""
        return self.paused_at if self.start_at is None else self.start_at

    @property
    def manual(self) -> bool:
        return self.source == MANUAL

    @property
    def window(self) -> str | None:
        """The name of the maintenance window this hold is an occurrence of, if any."""
        return self.source[len(WINDOW_PREFIX) :] if self.source.startswith(WINDOW_PREFIX) else None

    def describe(self) -> str:
        kind = "hold" if self.limit is None else f"limit {self.limit.describe()}"
        parts = [f"{self.source} {kind} on {self.scope.describe()}"]
        if self.paused_by:
            parts.append(f"by {clip(self.paused_by)}")
        if self.start_at is not None:
            parts.append(f"from {format_time(self.start_at)}")
            if self.resume_at is not None:
                parts.append(f"to {format_time(self.resume_at)}")
        elif self.paused_at:
            parts.append(f"at {format_time(self.paused_at)}")
        if self.beat != BEAT_QUEUE:
            parts.append(f"(beat {self.beat})")
        if self.reason:
            parts.append(f"({clip(self.reason)!r})")
        return " ".join(parts)

    def overlaps_in_time(self, other: Hold, now: float) -> bool:
        """Whether the two holds are (or will be) active at some same moment after ``now``."""
        start = max(now, self.began, other.began)
        ends = [t for t in (self.resume_at, other.resume_at) if t is not None]
        return not ends or start < min(ends)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            **self.scope.rule.to_json(),
            "source": self.source,
            "paused_by": self.paused_by,
            "reason": self.reason,
            "paused_at": self.paused_at,
            "resume_at": self.resume_at,
            "start_at": self.start_at,
            "beat": self.beat,
            **({} if self.limit is None else self.limit.to_json()),
        }

    @classmethod
    def from_json(cls, data: Any) -> Hold:
        """Decode one hold; anything unexpected becomes an unreadable hold."""
        try:
            rule = rule_from_json(data)
            resume_at = data.get("resume_at")
            start_at = data.get("start_at")
            beat = data.get("beat", BEAT_QUEUE)
            if beat not in BEAT_POLICIES:
                raise ValueError(f"beat is {beat!r}")
            return cls(
                id=require_str(data["id"]),
                scope=Scope(frozenset({rule})),
                source=require_str(data["source"]),
                paused_by=optional_str(data.get("paused_by")),
                reason=optional_str(data.get("reason")),
                paused_at=number(data["paused_at"]),
                resume_at=None if resume_at is None else number(resume_at),
                start_at=None if start_at is None else number(start_at),
                beat=beat,
                limit=Limit.from_json(data),
            )
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            return unreadable_hold(f"unreadable hold: {exc!r}"[:200])


@dataclass(frozen=True)
class Restored:
    """How a worker restored the state after the store forgot it."""

    by: str
    """The worker's hostname."""
    at: float
    """Store time of the restore."""
    lost: str
    """What the store held instead: ``the store held no state``, or an older generation."""
    generation: int
    """The generation the worker knew and restored."""

    def to_json(self) -> dict[str, Any]:
        return {"by": self.by, "at": self.at, "lost": self.lost, "generation": self.generation}

    @classmethod
    def from_json(cls, data: Any) -> Restored:
        """Decode it; :class:`TypeError` or :class:`KeyError` for anything amiss."""
        generation = data["generation"]
        if type(generation) is not int:
            raise TypeError(f"restored generation is {generation!r}")
        return cls(
            by=require_str(data["by"]),
            at=number(data["at"]),
            lost=require_str(data["lost"]),
            generation=generation,
        )


def unreadable_hold(detail: str) -> Hold:
    """A hold on every queue standing for state that could not be decoded."""
    return Hold(scope=EVERYTHING, source=UNREADABLE, reason=detail, id=UNREADABLE)


@dataclass(frozen=True)
class PauseState:
    """Every hold in the cluster, and the generation of this version."""

    generation: int = 0
    holds: tuple[Hold, ...] = ()
    skips: tuple[tuple[str, float], ...] = ()
    """``(window name, store time)``: that window's occurrences starting before it are skipped."""
    epoch: str = ""
    """Shared by every generation since the state was first written from nothing; empty
    when nothing is stored (or the document predates epochs)."""
    restored: Restored | None = None
    """Set when a worker restored this state after the store forgot it, until the next
    change."""

    @property
    def nothing(self) -> bool:
        """Whether this is the state read when no state is stored."""
        return not self.epoch and self.generation == 0 and not self.holds

    def following(self, **changes: Any) -> PauseState:
        """The next generation with ``changes``: same epoch (a fresh one for a state
        written from nothing or replacing an unreadable one), no longer restored."""
        epoch = self.epoch or fresh_id()
        return replace(self, generation=self.generation + 1, epoch=epoch, restored=None, **changes)

    def live_holds(self, now: float) -> tuple[Hold, ...]:
        """The holds still in place at ``now``: active and scheduled ones."""
        return tuple(hold for hold in self.holds if hold.live(now))

    def active_holds(self, now: float) -> tuple[Hold, ...]:
        """The holds that pause at ``now``."""
        return tuple(hold for hold in self.holds if hold.active(now))

    def scheduled_holds(self, now: float) -> tuple[Hold, ...]:
        """The holds that start after ``now``, soonest first."""
        scheduled = (hold for hold in self.holds if hold.live(now) and not hold.started(now))
        return tuple(sorted(scheduled, key=lambda hold: hold.began))

    def paused(self, now: float) -> Scope:
        """What is paused at store time ``now``: the union of the active pausing holds'
        scopes (limits slow their scope, they do not pause it)."""
        scope = NOTHING
        for hold in self.active_holds(now):
            if hold.pauses:
                scope = scope | hold.scope
        return scope

    def limits(self, now: float) -> tuple[Hold, ...]:
        """The active holds that limit their scope at ``now``."""
        return tuple(hold for hold in self.active_holds(now) if not hold.pauses)

    def next_expiry(self, now: float) -> float | None:
        """Store time of the next auto-resume, if any hold has one."""
        times = [h.resume_at for h in self.live_holds(now) if h.resume_at is not None]
        return min(times, default=None)

    def next_change(self, now: float) -> float | None:
        """Store time of the next start or auto-resume of a hold, if any."""
        times = [h.start_at for h in self.scheduled_holds(now)]
        expiry = self.next_expiry(now)
        return min([t for t in times if t is not None] + ([expiry] if expiry else []), default=None)

    def live_ramps(self, now: float) -> tuple[Hold, ...]:
        """The ramped resumes still in force at ``now``."""
        return tuple(hold for hold in self.live_holds(now) if hold.ramp)

    def with_ramps(self, ramps: Iterable[Hold], now: float) -> PauseState:
        """The same generation with the holds ``ramps`` added, replacing the holds over by
        ``now`` and the ramps whose scope one of them contains (call it on a state that is
        already the next one)."""
        ramps = tuple(ramps)
        kept = (
            h
            for h in self.live_holds(now)
            if not (h.ramp and any(r.scope.rule.contains(h.scope.rule) for r in ramps))
        )
        return replace(self, holds=(*kept, *ramps))

    def without_ramps(self, source: str) -> PauseState:
        """The same generation without the ramps ``source`` started."""
        return replace(
            self, holds=tuple(h for h in self.holds if not (h.ramp and h.source == source))
        )

    def skipped_until(self, window: str) -> float | None:
        """Until when the occurrences of ``window`` are skipped, if an operator skipped one."""
        return dict(self.skips).get(window)

    def with_holds(self, holds: Iterable[Hold]) -> PauseState:
        """The next generation, holding ``holds``."""
        return self.following(holds=tuple(holds))

    def with_skip(self, window: str, until: float, now: float) -> PauseState:
        """The next generation, skipping ``window``'s occurrences that start before ``until``
        (markers that ran out by ``now`` are dropped)."""
        skips = {name: t for name, t in self.skips if t > now}
        skips[window] = max(until, skips.get(window, until))
        return self.following(skips=tuple(sorted(skips.items())))

    def encode(self) -> bytes:
        doc: dict[str, Any] = {
            "schema": SCHEMA,
            "generation": self.generation,
            "holds": [hold.to_json() for hold in self.holds],
        }
        if self.epoch:
            doc["epoch"] = self.epoch
        if self.restored is not None:
            doc["restored"] = self.restored.to_json()
        if self.skips:
            doc["skips"] = dict(self.skips)
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes | str | None) -> PauseState:
        """Decode stored state; unreadable state decodes as paused, never as running."""
        if raw is None:
            return cls()
        try:
            doc = json.loads(raw)
            if not isinstance(doc, dict):
                raise ValueError(f"expected an object, got {type(doc).__name__}")
            schema = doc.get("schema")
            if type(schema) is not int or schema != SCHEMA:
                raise ValueError(f"unknown schema {schema!r}")
            generation = doc["generation"]
            if type(generation) is not int or generation < 0:
                raise ValueError(f"generation is {generation!r}")
            holds = _list(doc["holds"], "holds")
            skips = _skips(doc.get("skips", {}))
            ramps = [h for ramp in _list(doc.get("ramps", []), "ramps") for h in _ramp(ramp)]
            epoch = require_str(doc.get("epoch", ""))
            restored = doc.get("restored")
            restored = None if restored is None else Restored.from_json(restored)
        except (
            ValueError,
            KeyError,
            TypeError,
            AttributeError,
            RecursionError,
            OverflowError,
        ) as exc:
            detail = f"unreadable pause state: {exc}"[:200]
            return cls(generation=0, holds=(unreadable_hold(detail),))
        return cls(
            generation=generation,
            holds=(*(Hold.from_json(h) for h in holds), *ramps),
            skips=skips,
            epoch=epoch,
            restored=restored,
        )


def _skips(value: Any) -> tuple[tuple[str, float], ...]:
    """The windows' skip markers: an object of window name to store time."""
    if not isinstance(value, dict):
        raise TypeError(f"skips is {type(value).__name__}")
    return tuple(sorted((require_str(name), number(until)) for name, until in value.items()))


def _ramp(data: Any) -> list[Hold]:
    """A ramped resume as earlier releases stored it (``ramps``, beside the holds): a hold
    of a rising rate for each rule of its scope; ``ValueError`` or ``TypeError`` if it is
    not one."""
    rules = data["scope"]
    if not isinstance(rules, list) or not rules:
        raise ValueError(f"ramp scope is {rules!r}"[:80])
    start, duration = number(data["start"]), number(data["duration"])
    limit = Limit(rate=min(number(data["peak"]), MAX_RATE), rise=(start, duration))
    ramp_id = require_str(data["id"])
    return [
        Hold(
            scope=Scope(frozenset({rule_from_json(rule)})),
            source=require_str(data["source"]),
            paused_by=optional_str(data.get("by")),
            paused_at=start,
            resume_at=start + duration,
            id=ramp_id if i == 0 else f"{ramp_id}-{i}",
            limit=limit,
        )
        for i, rule in enumerate(rules)
    ]


def _list(value: Any, name: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{name} is {type(value).__name__}")
    return value
