"""What a resume lifts: the pure rule of :func:`celery_pause.resume`.

:func:`lift` takes the state, the store's time and the resume asked for (a
:class:`Lifting`) and returns the next state with what it lifted (:class:`Lifted`).

A resume by scope lifts the active holds it covers (see :func:`lifted_scope`); holds
scheduled to start later stay. A resume by hold id lifts exactly that hold: a stored
hold is removed, active or scheduled; an occurrence of a maintenance window is ended
early or, before it starts, skipped, by a "skipped until" marker in the state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..errors import InvalidInput
from .outcome import Outcome
from .ramp import ramp_holds
from .scope import DIMENSIONS, NOTHING, Dimension, Names, Rule, Scope
from .state import WINDOW_PREFIX, Hold, PauseState
from .windows import Window, occurrences, window_named


@dataclass(frozen=True)
class Lifted:
    """What a resume lifted."""

    removed: tuple[Hold, ...] = ()
    """Active holds lifted, wholly or in part."""
    cancelled: tuple[Hold, ...] = ()
    """Holds (or window occurrences) cancelled before they started."""
    ramps: tuple[Hold, ...] = ()
    """The holds of the ramped resume recorded, when one was asked for."""


@dataclass(frozen=True)
class Lifting:
    """A resume as asked for: by ``scope``, or of exactly the hold ``hold_id``.

    With ``ramp`` (seconds), what it lifts resumes through a ramp rising to ``peak``.
    """

    scope: Scope
    hold_id: str | None = None
    force: bool = False
    windows: tuple[Window, ...] = ()
    ramp: float | None = None
    peak: float = 0.0
    by: str | None = None


def lift(state: PauseState, now: float, lifting: Lifting) -> Outcome[PauseState, Lifted]:
    """The state with what ``lifting`` resumes lifted (through a ramp when it asks for
    one), and what was lifted; :class:`InvalidInput` for a ramp over nothing paused."""
    if lifting.hold_id is not None:
        outcome: Outcome[PauseState, Lifted] = lift_hold(
            state, now, lifting.hold_id, force=lifting.force, windows=lifting.windows
        )
    else:
        outcome = lift_scope(
            state,
            now,
            lifting.scope,
            force=lifting.force,
            windows=lifting.windows,
            ramps=lifting.ramp is None,
        )
    if lifting.ramp is None:
        return outcome
    lifted = outcome.result
    paused = [hold for hold in lifted.removed if not hold.ramp]
    resumed = ramped_scope(paused, NOTHING if lifting.hold_id else lifting.scope)
    if outcome.value is None or not resumed:
        verb = "is" if lifting.scope.singular else "are"
        raise InvalidInput(f"nothing to ramp: {lifting.scope.describe()} {verb} not paused")
    ramps = ramp_holds(resumed, start=now, duration=lifting.ramp, peak=lifting.peak, by=lifting.by)
    return Outcome(outcome.value.with_ramps(ramps, now), replace(lifted, ramps=ramps))


def ramped_scope(removed: Sequence[Hold], scope: Scope) -> Scope:
    """What lifting ``removed`` by a resume of ``scope`` resumes (all of each hold when
    ``scope`` is empty: a resume by hold id)."""
    resumed = NOTHING
    for hold in removed:
        resumed = resumed | (hold.scope & scope if scope else hold.scope)
    return resumed


def lift_scope(
    state: PauseState,
    now: float,
    scope: Scope,
    *,
    force: bool,
    windows: Sequence[Window],
    ramps: bool = True,
) -> Outcome[PauseState, Lifted]:
    """The state with the active holds within ``scope`` lifted (breakers' and windows' only
    with ``force``; ``None`` if nothing changes), and the holds lifted. A ramp it cannot
    split stays whole; with ``ramps=False`` (a ramped resume, whose ramp replaces those it
    contains) ramps stay."""
    kept: list[Hold] = []
    removed: list[Hold] = []
    for hold in state.live_holds(now):
        rest = hold.scope
        if hold.started(now) and (hold.manual or force) and (ramps or not hold.ramp):
            try:
                rest = lifted_scope(hold, scope)
            except InvalidInput:
                if hold.manual and not hold.ramp:
                    raise  # a foreign hold or a ramp it cannot split stays whole
        if rest != hold.scope:
            removed.append(hold)
        if rest:
            kept.append(replace(hold, scope=rest))
    following = None
    if len(kept) != len(state.holds) or removed:
        following = state.with_holds(kept)
    if force:
        current, _ = occurrences(windows, state, now)
        for occurrence in current:
            if occurrence.window and scope.rule.contains(occurrence.scope.rule):
                ends = occurrence.resume_at or now
                following = (following or state).with_skip(occurrence.window, ends, now)
                removed.append(occurrence)
    return Outcome(following, Lifted(removed=tuple(removed)))


def lift_hold(
    state: PauseState, now: float, hold_id: str, *, force: bool, windows: Sequence[Window]
) -> Outcome[PauseState, Lifted]:
    """The state without hold ``hold_id``, and that hold: a stored hold, or a window's current
    or next occurrence (``window:<name>:<start>``, or ``window:<name>`` for whichever comes
    first)."""
    live = state.live_holds(now)
    for hold in live:
        if hold.id == hold_id:
            if not (hold.manual or force):
                raise InvalidInput(
                    f"hold {hold_id} belongs to {hold.source}, not to an operator: "
                    "lift it with force (--force)"
                )
            following = state.with_holds(h for h in live if h.id != hold_id)
            return Outcome(following, _lifted(hold, now))
    if hold_id.startswith(WINDOW_PREFIX):
        name = hold_id[len(WINDOW_PREFIX) :].partition(":")[0]
        window = window_named(windows, name)
        for occurrence in window.current_and_next(state.skipped_until(name), now):
            if occurrence is not None and hold_id in (occurrence.id, window.source):
                following = state.with_skip(name, occurrence.resume_at or now, now)
                return Outcome(following, _lifted(occurrence, now))
        raise InvalidInput(
            f"{hold_id} is neither the current nor the next occurrence of window {name}; "
            f"`pause status` shows them (or give window:{name})"
        )
    raise InvalidInput(f"no hold {hold_id[:60]!r} in place; `pause status` lists the holds")


def _lifted(hold: Hold, now: float) -> Lifted:
    """``hold`` removed if it has started, else cancelled."""
    return Lifted(removed=(hold,)) if hold.started(now) else Lifted(cancelled=(hold,))


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
