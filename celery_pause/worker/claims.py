"""Handing a task id's claim from a parked copy to the copy that replaces it.

A copy that may have a twin claims its task id (a store lease, ``lease:claim:<id>``, owner =
the copy id) just before it starts (:meth:`~.parking.Parking.claims`). A copy that claimed and
was then parked again, or moved back, hands the claim on to its next copy, so that copy is not
taken for a twin.
"""

from __future__ import annotations

from ..errors import InvalidInput
from ..model.outcome import Outcome
from ..model.parking import claim_key
from ..stores import Store
from ..stores.primitives import Record, RecordChange, lease_holder, lease_key


def handed(old: str, new: str, life: float) -> RecordChange[bool | None]:
    """Hand a task id's claim (its lease record) from copy ``old`` to copy ``new``, which
    replaces it: ``True`` if handed, ``False`` if nobody holds it, ``None`` if another copy
    does (``old`` is a twin). A copy that claimed, then was held again (or lost the store's
    answer to its claim), keeps the claim as it moves: else its next copy would find the
    claim taken, and be dropped."""

    def change(current: Record | None, now: float) -> Outcome[Record, bool | None]:
        holder = lease_holder(current, now)
        if holder is None:
            return Outcome(None, False)
        if holder == new:  # handed before, by a move cut short
            return Outcome(None, True)
        if holder != old:
            return Outcome(None, None)
        return Outcome({"owner": new, "expires": now + life}, True)

    return change


def hand_claim(store: Store, task_id: str, old: str, new: str, life: float) -> bool | None:
    """:func:`handed` applied to ``task_id``'s claim in ``store`` (``False`` for an id too
    long to be a key: it never claims)."""
    try:
        key = lease_key(claim_key(task_id))
    except InvalidInput:
        return False
    return store.update_record(key, handed(old, new, life)).result
