"""The pause state: holds, the scope they pause, and their JSON encoding.

The state is a set of *holds*. A task is paused while at least one live hold
covers it (:mod:`.scope`); a hold with a ``resume_at`` in the past no longer counts, judged by
the store's clock. Every change to the state increases its generation.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from .formatting import clip, format_time
from .scope import EVERYTHING, NOTHING, Scope, rule_from_json

SCHEMA = 1
MANUAL = "manual"
BREAKER_PREFIX = "breaker:"
UNREADABLE = "unreadable"


@dataclass(frozen=True)
class Hold:
    """One reason for queues to be paused."""

    scope: Scope
    source: str = MANUAL
    paused_by: str | None = None
    reason: str | None = None
    paused_at: float = 0.0
    resume_at: float | None = None
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    def live(self, now: float) -> bool:
        """Whether the hold still counts at store time ``now``."""
        return self.resume_at is None or now < self.resume_at

    @property
    def manual(self) -> bool:
        return self.source == MANUAL

    def describe(self) -> str:
        parts = [f"{self.source} hold on {self.scope.describe()}"]
        if self.paused_by:
            parts.append(f"by {clip(self.paused_by)}")
        if self.paused_at:
            parts.append(f"at {format_time(self.paused_at)}")
        if self.reason:
            parts.append(f"({clip(self.reason)!r})")
        return " ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            **self.scope.rule.to_json(),
            "source": self.source,
            "paused_by": self.paused_by,
            "reason": self.reason,
            "paused_at": self.paused_at,
            "resume_at": self.resume_at,
        }

    @classmethod
    def from_json(cls, data: Any) -> Hold:
        """Decode one hold; anything unexpected becomes an unreadable hold."""
        try:
            rule = rule_from_json(data)
            resume_at = data.get("resume_at")
            return cls(
                id=require_str(data["id"]),
                scope=Scope(frozenset({rule})),
                source=require_str(data["source"]),
                paused_by=optional_str(data.get("paused_by")),
                reason=optional_str(data.get("reason")),
                paused_at=_number(data["paused_at"]),
                resume_at=None if resume_at is None else _number(resume_at),
            )
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            return unreadable_hold(f"unreadable hold: {exc!r}"[:200])


def unreadable_hold(detail: str) -> Hold:
    """A hold on every queue standing for state that could not be decoded."""
    return Hold(scope=EVERYTHING, source=UNREADABLE, reason=detail, id=UNREADABLE)


@dataclass(frozen=True)
class PauseState:
    """Every hold in the cluster, and the generation of this version."""

    generation: int = 0
    holds: tuple[Hold, ...] = ()

    def live_holds(self, now: float) -> tuple[Hold, ...]:
        return tuple(hold for hold in self.holds if hold.live(now))

    def paused(self, now: float) -> Scope:
        """What is paused at store time ``now``: the union of the live holds' scopes."""
        scope = NOTHING
        for hold in self.live_holds(now):
            scope = scope | hold.scope
        return scope

    def next_expiry(self, now: float) -> float | None:
        """Store time of the next auto-resume, if any hold has one."""
        times = [h.resume_at for h in self.live_holds(now) if h.resume_at is not None]
        return min(times, default=None)

    def with_holds(self, holds: Iterable[Hold]) -> PauseState:
        """The next generation, holding ``holds``."""
        return replace(self, generation=self.generation + 1, holds=tuple(holds))

    def encode(self) -> bytes:
        doc = {
            "schema": SCHEMA,
            "generation": self.generation,
            "holds": [hold.to_json() for hold in self.holds],
        }
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
            holds = doc["holds"]
            if not isinstance(holds, list):
                raise ValueError(f"holds is {type(holds).__name__}")
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            detail = f"unreadable pause state: {exc}"[:200]
            return cls(generation=0, holds=(unreadable_hold(detail),))
        return cls(generation=generation, holds=tuple(Hold.from_json(h) for h in holds))


def require_str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def optional_str(value: Any) -> str | None:
    return None if value is None else require_str(value)


def _number(value: Any) -> float:
    """A finite JSON number; strings, booleans, NaN and infinities are not times."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"expected a number, got {type(value).__name__}")
    number = float(value)  # OverflowError for an int too large for a float
    if not math.isfinite(number):
        raise ValueError(f"expected a finite number, got {number!r}")
    return number
