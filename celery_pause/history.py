"""The pause history: every pause and resume, kept as a bounded log in the store.

Each entry says what happened (``pause``, ``throttle``, ``resume``, ``cancel`` of a scheduled
hold or window occurrence, ``skip`` of periodic tasks by ``celery beat``), when
(store time), to which queues, who did it, why, and the source of the hold
(``manual``, ``breaker:<name>`` or ``window:<name>``). Scheduled holds that start
and holds that run out (``resume_at`` passed) are not written by anyone:
:func:`history` adds a ``start`` and an ``expire`` entry for them when it reads.
A ``skip`` entry counts, per beat entry, the runs beat did not send while the hold
was active (``skipped``). A ``restore`` entry says a worker (``by``) wrote back the
holds it knew after the store forgot them (``reason``: what the store held instead).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from celery import Celery

from .errors import InvalidInput, StoreError
from .model.formatting import format_duration, format_time
from .model.limit import Limit
from .model.scope import EVERYTHING, Scope, rule_from_json
from .model.state import Hold, PauseState, Restored
from .settings import PauseConfig
from .stores import Store, store_for

logger = logging.getLogger(__name__)

HISTORY_LOG = "history"
PAUSE = "pause"
THROTTLE = "throttle"
RESUME = "resume"
CANCEL = "cancel"
EXPIRE = "expire"
START = "start"
SKIP = "skip"
RESTORE = "restore"


@dataclass(frozen=True)
class HistoryEntry:
    """One change of the pause state, as recorded in the store."""

    action: str
    at: float
    scope: Scope = EVERYTHING
    """What the change covered (one rule): every dimension of the hold or the resume."""
    source: str = "manual"
    by: str | None = None
    reason: str | None = None
    generation: int | None = None
    resume_at: float | None = None
    holds: tuple[str, ...] = ()
    ended: tuple[str, ...] = field(default=())
    forced: bool = False
    start_at: float | None = None
    skipped: dict[str, int] | None = None
    """Beat entry name to the number of runs not sent (``skip`` entries)."""
    ramp: float | None = None
    """Seconds over which a resume ramped the start rate up (``resume`` entries)."""
    limit: Limit | None = None
    """The limit a ``throttle`` entry placed."""

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "at": self.at,
            **self.scope.rule.to_json(),
            "source": self.source,
            "by": self.by,
            "reason": self.reason,
            "generation": self.generation,
            "resume_at": self.resume_at,
            "holds": list(self.holds),
            "ended": list(self.ended),
            "forced": self.forced,
            "start_at": self.start_at,
            "skipped": self.skipped,
            "ramp": self.ramp,
            **({"rate": None, "concurrency": None} if self.limit is None else self.limit.to_json()),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HistoryEntry:
        """Decode an entry; one that cannot be read says so in its reason."""
        try:
            return cls(
                action=str(data["action"]),
                at=float(data["at"]),
                scope=Scope(frozenset({rule_from_json(data)})),
                source=str(data.get("source") or "manual"),
                by=_opt_str(data.get("by")),
                reason=_opt_str(data.get("reason")),
                generation=None if data.get("generation") is None else int(data["generation"]),
                resume_at=None if data.get("resume_at") is None else float(data["resume_at"]),
                holds=tuple(str(h) for h in data.get("holds") or ()),
                ended=tuple(str(h) for h in data.get("ended") or ()),
                forced=bool(data.get("forced", False)),
                start_at=None if data.get("start_at") is None else float(data["start_at"]),
                skipped=_counts(data.get("skipped")),
                ramp=None if data.get("ramp") is None else float(data["ramp"]),
                limit=Limit.from_json(data),
            )
        except (KeyError, TypeError, ValueError) as exc:
            detail = data.get("unreadable") or repr(exc)
            return cls(action="unreadable", at=0.0, reason=f"unreadable entry: {detail}"[:200])

    def describe(self) -> str:
        """One line for a terminal."""
        when = format_time(self.at) if self.at else "?"
        parts = [f"{when}  {self.action:<7} {self.source:<10} {self.scope.describe()}"]
        if self.by:
            parts.append(f"by {self.by}")
        if self.limit is not None:
            parts.append(f"limit {self.limit.describe()}")
        if self.reason:
            parts.append(f"{self.reason!r}")
        if self.forced:
            parts.append("(forced)")
        if self.start_at is not None and self.action in (PAUSE, THROTTLE):
            parts.append(f"starts {format_time(self.start_at)}")
        if self.resume_at is not None and self.action in (PAUSE, THROTTLE):
            parts.append(f"auto-resume {format_time(self.resume_at)}")
        if self.ramp is not None:
            parts.append(f"ramp {format_duration(self.ramp)}")
        if self.skipped:
            runs = ", ".join(f"{name} x{count}" for name, count in sorted(self.skipped.items()))
            parts.append(f"beat skipped {runs}")
        if self.generation is not None:
            parts.append(f"gen {self.generation}")
        return "  ".join(parts)


def pause_entry(hold: Hold, generation: int, replaced: Iterable[Hold]) -> HistoryEntry:
    """The entry for ``hold`` placed at ``generation``, replacing ``replaced`` (a pause with
    ``force``; a throttle turning the dial of the limit it replaced)."""
    ended = tuple(h.id for h in replaced)
    return HistoryEntry(
        action=PAUSE if hold.pauses else THROTTLE,
        at=hold.paused_at,
        scope=hold.scope,
        source=hold.source,
        by=hold.paused_by,
        reason=hold.reason,
        generation=generation,
        resume_at=hold.resume_at,
        holds=(hold.id,),
        ended=ended,
        forced=bool(ended) and hold.pauses,
        start_at=hold.start_at,
        limit=hold.limit,
    )


def resume_entry(
    *,
    at: float,
    scope: Scope,
    by: str | None,
    generation: int,
    removed: Iterable[Hold],
    kept: Iterable[Hold],
    forced: bool,
    action: str = RESUME,
    ramp: float | None = None,
) -> HistoryEntry:
    """The entry for a resume of ``scope`` that lifted ``removed`` (wholly or in part);
    ``kept`` are the holds still in the state afterwards. ``action`` is ``cancel`` for
    holds lifted before they started."""
    removed = tuple(removed)
    still = {h.id for h in kept}
    sources = sorted({h.source for h in removed}) or ["manual"]
    return HistoryEntry(
        action=action,
        at=at,
        scope=scope,
        source=",".join(sources),
        by=by,
        generation=generation,
        holds=tuple(h.id for h in removed),
        ended=tuple(h.id for h in removed if h.id not in still),
        forced=forced,
        ramp=ramp,
    )


def skip_entry(hold: Hold, at: float, skipped: dict[str, int]) -> HistoryEntry:
    """The entry for the runs of periodic tasks that beat skipped while ``hold`` was active."""
    total = sum(skipped.values())
    return HistoryEntry(
        action=SKIP,
        at=at,
        scope=hold.scope,
        source=hold.source,
        by="celery beat",
        reason=f"{total} run{'s' if total != 1 else ''} not sent while paused",
        holds=(hold.id,),
        skipped=dict(skipped),
    )


def restore_entry(state: PauseState, restored: Restored) -> HistoryEntry:
    """The entry for ``state``, which a worker wrote back as ``restored`` says."""
    scopes = {h.scope for h in state.holds}
    return HistoryEntry(
        action=RESTORE,
        at=restored.at,
        scope=scopes.pop() if len(scopes) == 1 else EVERYTHING,
        source=",".join(sorted({h.source for h in state.holds})) or "manual",
        by=restored.by,
        reason=restored.lost,
        generation=state.generation,
        holds=tuple(h.id for h in state.holds),
    )


def record(store: Store, config: PauseConfig, entry: HistoryEntry) -> bool:
    """Append ``entry`` to the history in ``store`` (``config.history_size`` entries kept);
    log and carry on if that fails.

    The change it describes has already happened, so a failure here must not
    turn it into an error for the caller.
    """
    try:
        store.append_log(HISTORY_LOG, entry.to_json(), keep=config.history_size)
    except (StoreError, InvalidInput, NotImplementedError) as exc:
        logger.warning("celery-pause: could not record %s in the history: %s", entry.action, exc)
        return False
    return True


def history(app: Celery, limit: int | None = None) -> list[HistoryEntry]:
    """The newest ``limit`` changes (all kept ones by default), newest first.

    Includes a ``start`` entry for each scheduled hold whose start came, and an
    ``expire`` entry for each hold whose ``resume_at`` passed, while it was still in place.

    Parameters:
        app: The Celery app whose history to read.
        limit: How many entries at most (every kept one, ``pause_history_size``, by default).

    Returns:
        The entries, newest first.

    Raises:
        StoreError: The store cannot be reached.
    """
    store = store_for(app)
    entries = [HistoryEntry.from_json(raw) for raw in store.read_log(HISTORY_LOG)]
    now = store.now()
    entries = sorted(entries + starts(entries, now) + expiries(entries, now), key=lambda e: -e.at)
    return entries if limit is None else entries[:limit]


def starts(entries: Sequence[HistoryEntry], now: float) -> list[HistoryEntry]:
    """``start`` entries for scheduled pauses whose start came before anyone cancelled them."""
    cancelled = {hold: entry.at for entry in entries for hold in entry.ended}
    return [
        _derived(entry, START, entry.start_at, resume_at=entry.resume_at)
        for entry in entries
        if entry.action in (PAUSE, THROTTLE)
        and entry.start_at is not None
        and entry.start_at <= now
        and all(cancelled.get(hold, float("inf")) > entry.start_at for hold in entry.holds)
    ]


def expiries(entries: Sequence[HistoryEntry], now: float) -> list[HistoryEntry]:
    """``expire`` entries for pauses that ran out before any resume ended them."""
    ended = {hold for entry in entries for hold in entry.ended}
    return [
        _derived(entry, EXPIRE, entry.resume_at, ended=entry.holds)
        for entry in entries
        if entry.action in (PAUSE, THROTTLE)
        and entry.resume_at is not None
        and entry.resume_at <= now
        and not ended.intersection(entry.holds)
    ]


def _derived(entry: HistoryEntry, action: str, at: float | None, **fields: Any) -> HistoryEntry:
    """An entry nobody wrote, told by the pause ``entry``: its whole scope, source and reason."""
    return HistoryEntry(
        action=action,
        at=at or 0.0,
        scope=entry.scope,
        source=entry.source,
        reason=entry.reason,
        holds=entry.holds,
        limit=entry.limit,
        **fields,
    )


def format_history(entries: Sequence[HistoryEntry]) -> str:
    """The history as lines for a terminal, newest first (``pause status --history``).

    Parameters:
        entries: The entries, as :func:`history` returns them.

    Returns:
        One line a change under a heading, or a line saying nothing is recorded yet.
    """
    if not entries:
        return "History: nothing recorded yet"
    return "\n".join(["History (newest first):", *("  " + e.describe() for e in entries)])


def _counts(value: Any) -> dict[str, int] | None:
    if value is None:
        return None
    return {str(name): int(count) for name, count in dict(value).items()}


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)
