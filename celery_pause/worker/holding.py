"""What the gate holds, and where it goes when the gate holds too many or too long.

A held request widens the prefetch window by one (:meth:`Holding._hold`). Past
``pause_max_held`` requests held by a pause, or waiting for a limit, the newest are parked on
the broker (:mod:`.parking`): a pause's in its parking queue until the pause is lifted, a
limit's in its turns queue until the worker that feeds it brings them back as the workers can
start them (:mod:`.feeding`). One held or waiting ``max_hold`` seconds is parked too, else
given back to the broker.
"""

from __future__ import annotations

import threading
import time
from bisect import insort
from collections.abc import Callable
from operator import itemgetter
from typing import Any

from celery.worker.request import Request

from ..limits.pacing import Pacing
from .broker import give_back
from .figures import GateCounters
from .parking import Held, Parking
from .reading import TargetReader

PARK_RETRY = 5.0
"""Seconds the gate waits after a park failed before it parks again."""


class Holding:
    """The gate's held requests (a base of :class:`~.gate.Gate`, which sets the state)."""

    parking: Parking | None
    max_held: int
    pacing: Pacing
    target: TargetReader
    counters: GateCounters
    _held: list[Held]
    _lock: threading.Lock
    _qos: Callable[[], Any]
    _park_after: float

    def _hold(self, request: Request, since: float | None = None) -> None:
        """Hold ``request`` (under the lock) in arrival order; ``since`` when held before."""
        if since is None:
            since = time.monotonic()
            self.counters.held += 1
        insort(self._held, (request, since), key=itemgetter(1))
        qos = self._qos()
        if qos is not None:
            qos.increment_eventually()

    def _unhold(self, count: int) -> None:
        """``count`` held requests left the gate: narrow the prefetch window again."""
        qos = self._qos()
        if qos is not None and count:
            qos.decrement_eventually(count)

    def _park_overflow(self) -> None:
        """Park the newest held requests past ``max_held``, and the newest waiting for a limit
        past it (on the consumer loop)."""
        parking = self.parking
        if parking is None or time.monotonic() < self._park_after:
            return
        with self._lock:
            held = parking.overflow(self._held, self.max_held, self.target)
            taken = {id(request) for request, _ in held}
            self._held = [entry for entry in self._held if id(entry[0]) not in taken]
            self._unhold(len(held))
            waited: list[Held] = []
            if len(self.pacing.waiting) > self.max_held:
                waiting = self.pacing.take_waiting()
                waited = parking.waiting_overflow(waiting, self.max_held, self.target)
                taken = {id(request) for request, _ in waited}
                self.pacing.keep([entry for entry in waiting if id(entry[0]) not in taken])
        held = parking.park_all(held, self.target)
        waited = parking.park_waiting(waited, self.target)
        if held or waited:  # the broker or store failed: keep them, try again later
            self._park_after = time.monotonic() + PARK_RETRY
            with self._lock:
                for request, since in held:
                    self._hold(request, since)
                self.pacing.keep(waited)

    def held_requests(self) -> list[Request]:
        """The held requests, in arrival order (a copy)."""
        return [req for req, _ in list(self._held)]

    def return_expired(self, max_hold: float) -> int:
        """Park (else return to the broker) every request held or waiting over ``max_hold``
        seconds."""
        deadline = time.monotonic() - max_hold
        with self._lock:
            expired = [entry for entry in self._held if entry[1] <= deadline]
            if expired:
                self._held = [(req, since) for req, since in self._held if since > deadline]
                self._unhold(len(expired))
            waiting = self.pacing.take_waiting()
            waited = [(req, since) for req, since in waiting if since <= deadline]
        self.pacing.keep([(req, since) for req, since in waiting if since > deadline])
        moved = len(expired) + len(waited)
        if self.parking is not None:
            expired = self.parking.park_all(expired, self.target)
            waited = self.parking.park_waiting(waited, self.target)
        self._return([request for request, _ in expired + waited])
        return moved

    def return_all(self) -> int:
        """Return every held request to the broker (warm shutdown)."""
        with self._lock:
            requests = [req for req, _ in self._held]
            self._held = []
            self._unhold(len(requests))
            requests += [req for req, _ in self.pacing.take_waiting()]
        self._return(requests)
        return len(requests)

    def _return(self, requests: list[Request]) -> None:
        self.counters.returned += give_back(requests)
