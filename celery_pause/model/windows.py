"""Recurring maintenance windows: ``app.conf.pause_windows``.

A window is a hold that recurs on a Celery schedule::

    app.conf.pause_windows = [
        {"name": "nightly-backup", "schedule": crontab(hour=2, minute=0), "duration": 3600,
         "queues": ["reports"], "reason": "backup", "beat": "skip"},
        {"name": "business-hours", "schedule": crontab(hour=9, minute=0), "duration": "8h",
         "tasks": ["proj.exports.*"], "rate": "2/s"},      # a limit instead of a pause
    ]

No process writes its occurrences: every process of the app (worker, beat, CLI) computes
them from its own configuration (:mod:`.recurrence`) and adds them to the state it reads
(:func:`with_windows`) as holds with source ``window:<name>``. The only thing stored is
the operator's choice to skip an occurrence or end one early: a per-window "skipped
until" marker in the state (:meth:`.PauseState.with_skip`).
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from celery import Celery

from ..errors import InvalidInput, InvalidWindow
from .coercion import parse_duration
from .formatting import format_time
from .limit import Limit
from .recurrence import as_schedule, next_start, starts
from .scope import NAMES, Scope
from .state import BEAT_POLICIES, BEAT_QUEUE, WINDOW_PREFIX, Hold, PauseState
from .validation import check_limit, check_reason, check_scope

NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}\Z")
KEYS = frozenset(
    {"name", "schedule", "duration", *NAMES, "reason", "beat", "rate", "concurrency", "per"}
)
SAMPLE = 50
"""Occurrences of each window checked for a too-long duration and for clashes."""
CONFIGURED_BY = "pause_windows"
"""``paused_by`` of a window's occurrences."""


@dataclass(frozen=True, eq=False)
class Window:
    """One recurring maintenance window."""

    name: str
    schedule: Any
    duration: float
    scope: Scope
    reason: str | None = None
    beat: str = BEAT_QUEUE
    limit: Limit | None = None
    """``None``: its occurrences pause their scope; else they limit it."""

    @property
    def source(self) -> str:
        return WINDOW_PREFIX + self.name

    def occurrence(self, start: float) -> Hold:
        """The hold of the occurrence starting at ``start``."""
        return Hold(
            scope=self.scope,
            source=self.source,
            paused_by=CONFIGURED_BY,
            reason=self.reason,
            paused_at=start,
            start_at=start,
            resume_at=start + self.duration,
            beat=self.beat,
            id=f"{self.source}:{int(start)}",
            limit=self.limit,
        )

    def current_and_next(
        self, skipped_until: float | None, now: float
    ) -> tuple[Hold | None, Hold | None]:
        """The occurrence in force at ``now`` (or ``None``) and the next one (or ``None``),
        leaving out those that start before ``skipped_until``."""
        first = next_start(self.schedule, now - self.duration)
        current = self.occurrence(first) if first is not None and first <= now else None
        upcoming = next_start(self.schedule, current.began) if current is not None else first
        if skipped_until is not None:
            if current is not None and current.began < skipped_until:
                current = None
            for _ in range(SAMPLE):
                if upcoming is None or upcoming >= skipped_until:
                    break
                upcoming = next_start(self.schedule, upcoming)
        return current, None if upcoming is None else self.occurrence(upcoming)

    def describe(self) -> str:
        text = f"window {self.name}: {self.scope.describe()} for {self.duration:g}s"
        return f"{text} on {self.schedule!r}"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "schedule": repr(self.schedule),
            "duration": self.duration,
            **self.scope.rule.to_json(),
            "reason": self.reason,
            "beat": self.beat,
            **({} if self.limit is None else self.limit.to_json()),
        }


def occurrences(
    windows: Sequence[Window], state: PauseState, now: float
) -> tuple[tuple[Hold, ...], tuple[Hold, ...]]:
    """The windows' occurrences in force at ``now``, and each window's next one."""
    current: list[Hold] = []
    upcoming: list[Hold] = []
    for window in windows:
        now_on, following = window.current_and_next(state.skipped_until(window.name), now)
        current.extend([now_on] if now_on else [])
        upcoming.extend([following] if following else [])
    return tuple(current), tuple(upcoming)


def with_windows(state: PauseState, windows: Sequence[Window], now: float) -> PauseState:
    """``state`` as it pauses at ``now``: its holds and the windows' current and next
    occurrences (same generation). For reading only: never write it back."""
    if not windows:
        return state
    current, upcoming = occurrences(windows, state, now)
    return replace(state, holds=(*state.holds, *current, *upcoming))


def window_named(windows: Sequence[Window], name: str) -> Window:
    for window in windows:
        if window.name == name:
            return window
    known = ", ".join(w.name for w in windows) or "none configured"
    raise InvalidInput(f"no maintenance window named {name!r} (windows: {known})")


# -- configuration ----------------------------------------------------------------------------
def parse_windows(
    value: Any, app: Celery, beat_default: str, setting: str = "pause_windows"
) -> tuple[Window, ...]:
    """The windows of ``pause_windows`` (spelled ``setting`` in the app's configuration);
    :class:`InvalidWindow` for anything amiss."""
    if value is None:
        return ()
    if isinstance(value, (str, bytes, dict)) or not isinstance(value, Iterable):
        raise InvalidWindow(f"{setting} must be a list of window dicts")
    windows = [parse_window(item, app, beat_default, setting) for item in value]
    names = [w.name for w in windows]
    for name in names:
        if names.count(name) > 1:
            raise InvalidWindow(f"{setting}: two windows are named {name!r}")
    now = time.time()
    samples = {w.name: check_recurrence(w, now) for w in windows}
    for i, one in enumerate(windows):
        for other in windows[i + 1 :]:
            if one.beat != other.beat and one.scope.overlaps(other.scope):
                clash = first_overlap(one, samples[one.name], other, samples[other.name])
                if clash is not None:
                    raise InvalidWindow(
                        f"{setting}: windows {one.name!r} (beat {one.beat}) and "
                        f"{other.name!r} (beat {other.beat}) overlap in scope and time (both "
                        f"from {format_time(clash)}) but disagree on beat; give them one policy"
                    )
    return tuple(windows)


def parse_window(
    item: Any, app: Celery, beat_default: str, setting: str = "pause_windows"
) -> Window:
    if not isinstance(item, dict):
        raise InvalidWindow(f"{setting}: each window is a dict, got {item!r:.60}")
    name = item.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise InvalidWindow(
            f"{setting}: a window needs a name of 1-64 letters, digits, '_', '.' or '-', "
            f"got {name!r:.60}"
        )
    unknown = sorted(set(item) - KEYS)
    if unknown:
        raise InvalidWindow(
            f"window {name!r}: unknown key(s) {', '.join(map(str, unknown))}; "
            f"use {', '.join(sorted(KEYS))}"
        )
    for key in ("schedule", "duration"):
        if key not in item:
            raise InvalidWindow(f"window {name!r}: {key} is missing")
    beat = item.get("beat", beat_default)
    if beat not in BEAT_POLICIES:
        raise InvalidWindow(f"window {name!r}: beat must be 'queue' or 'skip', got {beat!r}")
    try:
        scope = check_scope(item)
        reason = check_reason(item.get("reason"))
        duration = window_duration(item["duration"])
        rate, concurrency = item.get("rate"), item.get("concurrency")
        limited = rate is not None or concurrency is not None
        limit = check_limit(rate, concurrency, item.get("per")) if limited else None
        if limit is None and item.get("per") is not None:
            raise InvalidInput("per goes with a rate or a concurrency")
        if limit is not None and item.get("beat") == "skip":
            raise InvalidInput("beat 'skip' goes with a pause; a window that limits queues")
    except InvalidInput as exc:
        raise InvalidWindow(f"window {name!r}: {exc}") from None
    recurrence = as_schedule(item["schedule"], app, name)
    return Window(name, recurrence, duration, scope, reason, beat, limit)


def window_duration(value: Any) -> float:
    if isinstance(value, str):
        return parse_duration(value).total_seconds()
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 1:
        raise InvalidInput(f"duration must be at least 1 second (or e.g. '1h'), got {value!r}")
    return float(value)


def check_recurrence(window: Window, now: float) -> list[float]:
    """The window's next :data:`SAMPLE` starts; refuses a schedule that never fires and a
    duration longer than the shortest gap between two starts."""
    try:
        sample = starts(window.schedule, now, SAMPLE)
    except Exception as exc:
        raise InvalidWindow(
            f"window {window.name!r}: cannot compute when {window.schedule!r} fires: {exc!r}"
        ) from None
    if not sample:
        raise InvalidWindow(
            f"window {window.name!r}: {window.schedule!r} never fires (no run within 5 years)"
        )
    gaps = [b - a for a, b in itertools.pairwise(sample)]
    if gaps and window.duration > min(gaps):
        raise InvalidWindow(
            f"window {window.name!r}: duration {window.duration:g}s is longer than its period "
            f"({min(gaps):g}s between two starts): it would never end"
        )
    return sample


def first_overlap(
    one: Window, one_starts: list[float], other: Window, other_starts: list[float]
) -> float | None:
    """The first moment both windows are in force, among their sampled occurrences."""
    for a in one_starts:
        for b in other_starts:
            start, end = max(a, b), min(a + one.duration, b + other.duration)
            if start < end:
                return start
    return None
