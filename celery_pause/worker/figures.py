"""What the gate holds and did: its counters, its figures at one moment, and the requests
that may be running."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from celery.worker import state as worker_state

from ..model.adaptive import Cut
from ..model.content import text_of
from ..model.limit import Limit
from ..model.scope import Scope, Target


@dataclass
class GateCounters:
    """What the gate did, for metrics."""

    held: int = 0
    released: int = 0
    returned: int = 0
    parked: int = 0
    """Moved out to a parking queue (:mod:`.parking`)."""
    brought_back: int = 0
    """Moved by this worker from a parking queue back to where they came from."""
    dropped: int = 0
    """Copies that found another copy of their task id started."""
    fed: int = 0
    """Moved by this worker from a fair limit's value queue back for their turn."""


@dataclass(frozen=True)
class InFlight:
    """A reserved request the gate does not hold: it may be running."""

    id: str
    name: str
    target: Target | None
    """Where it stands; ``None`` when the reserved requests could not be read (then it
    stands for every request, in every scope)."""

    def within(self, scope: Scope) -> bool:
        """Whether it is in ``scope`` (not empty)."""
        return bool(scope) and (self.target is None or scope.covers(self.target))


@dataclass(frozen=True)
class GateFigures:
    """What the gate holds and did, at one moment."""

    scope: Scope
    """What the gate holds to."""
    held: int
    waiting: int
    """Requests waiting for their ramp or limit."""
    oldest: float | None
    """``time.monotonic()`` since which the oldest request the gate keeps (held, or waiting
    for its ramp or limit) is kept: ``pause_max_hold`` returns it to the broker."""
    held_by_task: dict[str, int]
    counters: GateCounters
    adapted: dict[str, tuple[Limit, Cut | None]] = field(default_factory=dict)
    """Each adaptive limit the worker paced (by hold id): as it stands now, and its last
    cut, as last read."""


def in_flight(
    held: Iterable[Any], target: Callable[[Any], Target], started: Collection[Any] | None
) -> tuple[InFlight, ...]:
    """The reserved requests but those ``held`` (and, given ``started``, but those not in
    it), by id; one ``<unknown>`` when the reserved requests cannot be read."""
    kept = {id(req) for req in held}
    for _ in range(5):
        try:
            reserved = tuple(worker_state.reserved_requests)
            break
        except RuntimeError:  # the loop thread changed the set while we copied it
            continue
    else:
        return (InFlight("<unknown>", "<unknown>", None),)
    tasks = [
        InFlight(text_of(req.id), text_of(req.name), target(req))
        for req in reserved
        if id(req) not in kept and (started is None or req in started)
    ]
    return tuple(sorted(tasks, key=lambda task: (task.id, task.name)))
