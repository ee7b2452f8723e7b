"""A worker's permits of the limits: what the gate spends, and the store thread
adds (:mod:`.keeper`).

The gate (:mod:`celery_pause.worker.gate`) lets a request of a limited scope start only with a
permit of every limit that covers it (:class:`Permits`): a start time of the limit's
rate (along its curve, for a ramp) that has come, and a free slot of its concurrency. A start
time is spent within :func:`~celery_pause.model.limit.lateness` of its turn or dropped (a
worker that was stalled spends none of the times that passed meanwhile: it books new ones)."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable

from celery.worker.request import Request

from ..model.limit import Limit, lateness, run_length
from ..model.scope import Scope, Target
from ..model.state import Hold

ENDED_CHECK = 0.01
"""Seconds between two looks for ended tasks while this worker holds slots in use."""
SLOT_CHECK = (0.05, 0.1)
"""Seconds between two asks for a slot while tasks wait for one and this worker has none:
from the first, doubled at each ask that got none, up to the second."""


class Permits:
    """This worker's permits of one limit: start times booked, slots taken.

    The gate spends them on the consumer loop, the store thread adds them: both under
    one lock. A rising rate (a ramp) paces starts along its curve, and from its end on lets
    every task start.
    """

    def __init__(
        self,
        *,
        id: str,
        scope: Scope,
        limit: Limit,
        value: str | None = None,
    ) -> None:
        self.id = id
        self.scope = scope
        self.limit = limit
        self.value = value
        """The label value of a limit's partition (``throttle --per``), else ``None``."""
        self.family = id.partition(":")[0] if value is not None else id
        """The limit's hold id: the partitions of a limit per label share the pool's room."""
        self.touched = time.monotonic()
        """``time.monotonic()`` a request of a partition last came."""
        self.concurrency = limit.concurrency
        self.paced = limit.rate is not None
        """Whether a start needs a start time (of a rate)."""
        self._lock = threading.Lock()
        self._starts: deque[float] = deque()
        """Start times booked for this worker (store times), soonest first."""
        self._free: list[str] = []
        """Slots of the concurrency taken and not in use."""
        self._busy: dict[str, Request] = {}
        """Slots in use, and the request each one runs."""
        self.waiting = 0
        """Requests waiting in the gate for this limit (kept by the gate)."""
        self.retry_at = float("-inf")
        """Store time before which booking start times is not worth asking for."""
        self.known = float("-inf")
        """The rate's next start time as this worker last saw it in the store (a record
        found behind it was lost by the store)."""
        self.renewed = time.monotonic()
        """``time.monotonic()`` at the start of the last renewal of its slots that worked."""
        self._slot_misses = 0
        self._next_slot_ask = 0.0
        self.granted = 0.0
        """``time.monotonic()`` a slot was last taken or kept for a waiting request (the
        partitions of a limit per label ask in that order, the longest without first)."""
        """``time.monotonic()`` before which asking for a slot again is not worth it."""

    @classmethod
    def of_hold(cls, hold: Hold) -> Permits:
        if hold.limit is None:
            raise ValueError(f"hold {hold.id} pauses: it has no permits")
        return cls(id=hold.id, scope=hold.scope, limit=hold.limit)

    def covers(self, target: Target) -> bool:
        return self.scope.covers(target)

    def idle(self) -> bool:
        """Whether nothing waits and no start time or slot is held."""
        with self._lock:
            return not (self.waiting or self._starts or self._free or self._busy)

    # -- the gate, on the consumer loop --------------------------------------------------
    def ready(self, now: float) -> bool:
        """Whether one task may start at store time ``now`` (start times whose turn passed
        longer ago than their lateness allows are dropped, not caught up on)."""
        with self._lock:
            self._drop_late(now)
            if self._risen(now):
                return True
            if self.paced and not (self._starts and self._starts[0] <= now):
                return False
            return self.concurrency is None or bool(self._free)

    def _drop_late(self, now: float) -> None:
        """Drop the start times too late to spend at ``now`` (under the lock)."""
        if not self._starts:
            return
        late = lateness(self.limit.rate_at(now))
        while self._starts and self._starts[0] < now - late:
            self._starts.popleft()

    def spend(self, request: Request) -> None:
        """``request`` starts: spend a start time and bind a slot to it (after :meth:`ready`)."""
        with self._lock:
            if self.paced and self._starts:
                self._starts.popleft()
            if self.concurrency is not None:
                self._busy[self._free.pop()] = request

    def next_start(self) -> float | None:
        """Store time of the next start time reserved, if any."""
        with self._lock:
            return self._starts[0] if self._starts else None

    # -- the store thread --------------------------------------------------------------------
    def ended(
        self, running: Callable[[Request], bool], *, reuse: bool = True
    ) -> tuple[bool, list[str]]:
        """Slots whose task ended are kept for the requests waiting here (if ``reuse``):
        whether one was, and the slots to give back (the rest, and free ones nothing
        waits for)."""
        with self._lock:
            done = [slot for slot, request in self._busy.items() if not running(request)]
            for slot in done:
                del self._busy[slot]
            keep = max(0, self.waiting - len(self._free)) if reuse else 0
            self._free.extend(done[:keep])
            if keep and done:
                self.granted = time.monotonic()
            spare = max(0, len(self._free) - self.waiting)
            surplus = [self._free.pop() for _ in range(spare)]
            return keep > 0 and bool(done), done[keep:] + surplus

    def slots_wanted(self, room: int) -> int:
        """How many slots to ask for now: one per waiting request, within the limit and
        ``room``, what the worker's pool can run beside the slots held of this limit by
        other partitions (a slot taken for a task that then waits for a pool process would
        sit idle)."""
        with self._lock:
            if self.concurrency is None or time.monotonic() < self._next_slot_ask:
                return 0
            room = min(self.waiting, self.concurrency, room - len(self._busy))
            return max(0, room - len(self._free))

    def slots_held(self) -> int:
        with self._lock:
            return self.slots_in_hand()

    def holds_back(self) -> bool:
        """Whether the limit itself keeps a request waiting, rather than the pool's room:
        a rate, every slot of the concurrency held here, or the store refused the last ask
        (other workers hold them)."""
        with self._lock:
            if self.paced:
                return True
            if self.concurrency is None:
                return False
            return self.slots_in_hand() >= self.concurrency or self._slot_misses > 0

    def short_of_slots(self) -> bool:
        """Whether requests wait here for a slot of the concurrency and none is held."""
        with self._lock:
            return bool(self.waiting) and self.concurrency is not None and not self.slots_in_hand()

    def slots_in_hand(self) -> int:
        return len(self._free) + len(self._busy)

    def add_slots(self, slots: list[str]) -> None:
        """The slots an ask got; after one that got none, the next waits longer."""
        with self._lock:
            if slots:
                self.granted = time.monotonic()
            self._free.extend(slots)
            self._slot_misses = 0 if slots else self._slot_misses + 1
            first, most = SLOT_CHECK
            self._next_slot_ask = time.monotonic() + min(first * 2**self._slot_misses, most)

    def starts_wanted(self, now: float) -> int:
        """How many start times to book now (0 if enough are, or it is not worth asking)."""
        with self._lock:
            if not self.paced or now < self.retry_at:
                return 0
            if self._risen(now):
                return 0
            self._drop_late(now)
            short = self.waiting - len(self._starts)
            return run_length(max(1.0, self.limit.rate_at(now)), short) if short > 0 else 0

    def _risen(self, now: float) -> bool:
        """Whether a ramp is over at ``now``: its scope is unlimited from then on."""
        rise = self.limit.rise
        return rise is not None and now >= rise[0] + rise[1]

    def add_starts(self, times: Iterable[float], retry_at: float, known: float) -> None:
        """The start times a booking got, when to ask again, and the record it left."""
        with self._lock:
            self._starts.extend(times)
            self.retry_at = retry_at
            self.known = known

    def drop_unused_starts(self) -> None:
        """Forget start times that nothing waits for any more (their turn is lost)."""
        with self._lock:
            if not self.waiting:
                self._starts.clear()

    def held_slots(self) -> list[str]:
        with self._lock:
            return [*self._free, *self._busy]

    def keep_only(self, slots: Iterable[str]) -> None:
        """After a renewal: forget the slots the store no longer has (they had expired)."""
        kept = set(slots)
        with self._lock:
            self._free = [slot for slot in self._free if slot in kept]
            self._busy = {slot: req for slot, req in self._busy.items() if slot in kept}

    def wake_at(self, now: float) -> float | None:
        """Store time the store thread should look at this limit again."""
        with self._lock:
            times = []
            if self._busy:
                times.append(now + ENDED_CHECK)
            if self.waiting:
                if self._starts:
                    times.append(self._starts[0])
                elif self.paced:
                    times.append(max(self.retry_at, now))
                if self.concurrency is not None and not self._free:
                    # another worker may give one back
                    times.append(now + max(0.0, self._next_slot_ask - time.monotonic()))
            return min(times, default=None)
