"""What a resume lifts: pure changes of the pause state for :func:`celery_pause.resume`.

A resume by scope lifts the active holds it covers (see :func:`lifted_scope`); holds
scheduled to start later stay. A resume by hold id lifts exactly that hold: a stored
hold is removed, active or scheduled; an occurrence of a maintenance window is ended
early or, before it starts, skipped, by a "skipped until" marker in the state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ..errors import InvalidInput
from .scope import DIMENSIONS, NOTHING, Dimension, Names, Rule, Scope
from .state import WINDOW_PREFIX, Hold, PauseState
from .windows import Window, occurrences, window_named


@dataclass
class Lifted:
    """What one attempt of a change lifted (cleared when the change runs again)."""

    removed: list[Hold] = field(default_factory=list)
    """Active holds lifted, wholly or in part."""
    cancelled: list[Hold] = field(default_factory=list)
    """Holds (or window occurrences) cancelled before they started."""

    def clear(self) -> None:
        self.removed.clear()
        self.cancelled.clear()


def lift_scope(
    state: PauseState,
    now: float,
    scope: Scope,
    *,
    force: bool,
    windows: Sequence[Window],
    lifted: Lifted,
) -> PauseState | None:
    """The state with the active holds within ``scope`` lifted (breakers' and windows' only
    with ``force``), or ``None`` if nothing changes."""
    lifted.clear()
    kept: list[Hold] = []
    for hold in state.live_holds(now):
        rest = hold.scope
        if hold.started(now) and (hold.manual or force):
            try:
                rest = lifted_scope(hold, scope)
            except InvalidInput:
                if hold.manual:
                    raise  # a foreign hold it cannot split stays whole
        if rest != hold.scope:
            lifted.removed.append(hold)
        if rest:
            kept.append(replace(hold, scope=rest))
    following = None
    if len(kept) != len(state.holds) or lifted.removed:
        following = state.with_holds(kept)
    if force:
        current, _ = occurrences(windows, state, now)
        for occurrence in current:
            if occurrence.window and scope.rule.contains(occurrence.scope.rule):
                ends = occurrence.resume_at or now
                following = (following or state).with_skip(occurrence.window, ends, now)
                lifted.removed.append(occurrence)
    return following


def lift_hold(
    state: PauseState,
    now: float,
    hold_id: str,
    *,
    force: bool,
    windows: Sequence[Window],
    lifted: Lifted,
) -> PauseState:
    """The state without hold ``hold_id``: a stored hold, or a window's current or next
    occurrence (``window:<name>:<start>``, or ``window:<name>`` for whichever comes first)."""
    lifted.clear()
    live = state.live_holds(now)
    for hold in live:
        if hold.id == hold_id:
            if not (hold.manual or force):
                raise InvalidInput(
                    f"hold {hold_id} belongs to {hold.source}, not to an operator: "
                    "lift it with force (--force)"
                )
            (lifted.removed if hold.started(now) else lifted.cancelled).append(hold)
            return state.with_holds(h for h in live if h.id != hold_id)
    if hold_id.startswith(WINDOW_PREFIX):
        name = hold_id[len(WINDOW_PREFIX) :].partition(":")[0]
        window = window_named(windows, name)
        for occurrence in window.current_and_next(state.skipped_until(name), now):
            if occurrence is not None and hold_id in (occurrence.id, window.source):
                (lifted.removed if occurrence.started(now) else lifted.cancelled).append(occurrence)
                return state.with_skip(name, occurrence.resume_at or now, now)
        raise InvalidInput(
            f"{hold_id} is neither the current nor the next occurrence of window {name}; "
            f"`pause status` shows them (or give window:{name})"
        )
    raise InvalidInput(f"no hold {hold_id[:60]!r} in place; `pause status` lists the holds")


def lifted_scope(hold: Hold, lifted: Scope) -> Scope:
    """What remains of ``hold``'s scope once ``lifted`` is resumed (see :func:`resume`)."""
    rule, resumed = hold.scope.rule, lifted.rule
    if not rule.overlaps(resumed):
        return hold.scope
    if resumed.contains(rule):
        return NOTHING
    outside = [d for d in DIMENSIONS if not _only(d, resumed.names(d)).contains(rule)]
    if len(outside) == 1:
        (dimension,) = outside
        held, freed = rule.names(dimension), resumed.names(dimension)
        rest = frozenset(held) - freed if held is not None and freed is not None else None
        if rest is not None and not _only(dimension, rest).overlaps(_only(dimension, freed)):
            return Scope(frozenset({replace(rule, **{dimension.name: rest})}))
    raise InvalidInput(
        f"cannot resume {lifted.describe()} out of the {hold.describe()}: what would remain is "
        f"no list of names. Resume its whole scope ({hold.scope.describe()}), or resume "
        "without filters, then pause what should stay paused"
    )


def _only(dimension: Dimension, names: Names) -> Rule:
    """The rule listing ``names`` in ``dimension`` and every value in the others."""
    return Rule(**{dimension.name: names})
