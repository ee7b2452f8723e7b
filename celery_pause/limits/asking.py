"""How often a worker looks again for its limits' permits: for ended tasks, and after an ask the
store refused (a slot) or that booked no start time."""

from __future__ import annotations

import random
import time

from ..model.limit import HORIZON

ENDED_CHECK = 0.01
"""Seconds between two looks for ended tasks while this worker holds slots in use."""
BOOKING_SPREAD = 4
"""After ``n`` asks in a row that booked nothing, the next waits a random part of up to
``min(n, BOOKING_SPREAD)`` quarters of the horizon more."""
SLOT_CHECK = (0.05, 0.1)
"""Seconds between two asks for a slot while tasks wait for one and this worker has none:
from the first, doubled at each ask that got none, up to the second."""
SLOT_CHECK_HOLDING = 0.5
"""The most seconds between two such asks while this worker holds slots of the limit."""
ASK_GRID = SLOT_CHECK[1]
"""Seconds apart of the times a refused ask for a slot is made again: a worker's limits refused
ask together (one read), each worker at its own offset (:data:`_ASK_PHASE`)."""
_ASK_PHASE = random.uniform(0.0, ASK_GRID)


def next_slot_ask(misses: int, *, holding: bool) -> float:
    """``time.monotonic()`` to ask for a slot again after ``misses`` asks in a row that got
    none (0: the last got one), while this worker is ``holding`` slots of the limit or not."""
    first, most = SLOT_CHECK
    if holding:
        most = SLOT_CHECK_HOLDING  # its own ended tasks' slots serve its requests
    after = time.monotonic() + min(first * 2.0**misses, most)
    if misses:  # refused: at the nearest time of this process's grid
        after = round((after - _ASK_PHASE) / ASK_GRID) * ASK_GRID + _ASK_PHASE
    return after


def booking_delay(misses: int) -> float:
    """Seconds more to wait before booking start times again after ``misses`` bookings in a
    row that got none: other workers took the room, so ask a little later than they will,
    and the one that booked last asks first (they do not all ask at every opening)."""
    return random.uniform(0.0, min(misses, BOOKING_SPREAD) * HORIZON / 4)
