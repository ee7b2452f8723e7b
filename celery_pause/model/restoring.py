"""Restoring a state the store forgot: the pure rule a worker's store thread applies.

A worker that read a state of epoch ``E`` and generation ``G`` knows the store forgot
it when it then reads no state at all (a restart without persistence, a flush, a
deleted key, an eviction), a generation of ``E`` below ``G`` (a failover that lost the
last writes), or a restore of ``E`` made from a generation below ``G`` (a worker that
lagged restored first). A state of another epoch is a deliberate replacement (a
repair, or a pause placed on an emptied store before any worker read it): accepted.
"""

from __future__ import annotations

from dataclasses import replace

from .outcome import Outcome
from .state import PauseState, Restored

NO_STATE = "the store held no state"


def forgotten(known: PauseState, stored: PauseState) -> str | None:
    """What shows the store forgot ``known`` when it holds ``stored``, or ``None``.

    Parameters:
        known: The state the worker last read.
        stored: The state the store holds now (as read, without the windows).
    """
    if known.generation == 0:
        return None  # nothing was ever written: nothing to forget
    if stored.nothing:
        return NO_STATE
    if not known.epoch or stored.epoch != known.epoch:
        return None
    if stored.generation < known.generation:
        return f"the store held an older generation {stored.generation}"
    # A restore counts as the generation it restored, so a worker's own restore is not
    # taken for one of an older generation when it reads it back.
    origin = known.generation if known.restored is None else known.restored.generation
    if stored.restored is not None and stored.restored.generation < origin:
        return f"the store held a restore of the older generation {stored.restored.generation}"
    return None


def restore(
    stored: PauseState, now: float, *, known: PauseState, by: str
) -> Outcome[PauseState, Restored | None]:
    """``known`` written back over ``stored`` at store time ``now`` if the store still
    forgot it (else no change, so racing workers restore once), and how it was restored.

    The holds (ramps too) and skips are those known, less those over by ``now``; the
    generation is above both, the epoch the one known (a fresh one for a document that
    predates epochs).

    Parameters:
        stored: The state the store holds now.
        now: Store time.
        known: The state the worker last read.
        by: The worker's hostname.
    """
    lost = forgotten(known, stored)
    if lost is None:
        return Outcome(None, None)
    restored = Restored(by=by, at=now, lost=lost, generation=known.generation)
    following = replace(
        known.following(
            holds=known.live_holds(now),
            skips=tuple((name, until) for name, until in known.skips if until > now),
        ),
        generation=max(known.generation, stored.generation) + 1,
        restored=restored,
    )
    return Outcome(following, restored)
