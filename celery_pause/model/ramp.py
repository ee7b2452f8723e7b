"""Ramped resumes: a resumed scope's start rate rises from a trickle to ``pause_ramp_peak``.

A ramp is a limit whose rate rises (:class:`~.limit.Limit` with ``rise``) on a hold of its
own that ends with the ramp: over its ``duration`` the rate at which the cluster starts tasks
of its scope rises linearly from zero to ``peak`` tasks per second; from its end on the scope
is unlimited, so nothing waits longer than the ramp. It is booked as any rate is (one record,
the next start time, :func:`~.limit.reserve`), so the cluster follows the curve whichever
workers hold the backlog. A hold pausing the scope wins over a ramp at once; a later resume
of the scope lifts it, as it lifts any limit.
"""

from __future__ import annotations

from typing import Any

from .formatting import format_duration, format_time
from .limit import Limit
from .scope import Scope
from .state import MANUAL, Hold, fresh_id


def ramp_holds(
    scope: Scope,
    *,
    start: float,
    duration: float,
    peak: float,
    source: str = MANUAL,
    by: str | None = None,
) -> tuple[Hold, ...]:
    """The holds of a ramped resume of ``scope`` from store time ``start``: one for each of
    its rules, rising to ``peak`` tasks per second over ``duration`` seconds."""
    limit = Limit(rate=peak, rise=(start, duration))
    return tuple(
        Hold(
            scope=Scope(frozenset({rule})),
            source=source,
            paused_by=by,
            paused_at=start,
            resume_at=start + duration,
            id=fresh_id(),
            limit=limit,
        )
        for rule in sorted(scope.rules, key=lambda rule: rule.describe())
    )


def describe_ramp(hold: Hold, now: float) -> str:
    """``queue a: 35% through a ramp of 10 minutes, at 35.0 of 100 tasks/s, until …``."""
    limit, _, duration = _rise(hold)
    by = f", by {hold.paused_by}" if hold.paused_by else ""
    source = "" if hold.manual else f", {hold.source}"
    return (
        f"{hold.scope.describe()}: {limit.progress(now):.0%} through a ramp of "
        f"{format_duration(duration)}, at {limit.rate_at(now):.1f} of {limit.rate:g} "
        f"tasks/s, until {format_time(hold.resume_at or now)}{by}{source}"
    )


def ramp_json(hold: Hold, now: float) -> dict[str, Any]:
    """A ramp and how far it has come at ``now`` (``pause status --json``)."""
    limit, start, duration = _rise(hold)
    live = hold.live(now)
    return {
        "id": hold.id,
        "scope": hold.scope.to_json(),
        "start": start,
        "duration": duration,
        "peak": limit.rate,
        "source": hold.source,
        "by": hold.paused_by,
        "end": start + duration,
        "progress": limit.progress(now),
        "rate": limit.rate_at(now) if live else None,
    }


def _rise(hold: Hold) -> tuple[Limit, float, float]:
    """The ramp's limit, and when its rate starts rising and for how long."""
    if hold.limit is None or hold.limit.rise is None:
        raise ValueError(f"hold {hold.id} is not a ramp")
    return (hold.limit, *hold.limit.rise)
