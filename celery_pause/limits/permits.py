"""A worker's permits of the limits: what the gate spends, and the store thread
adds (:mod:`.keeper`).

The gate (:mod:`celery_pause.worker.gate`) lets a request of a limited scope start only with a
permit of every limit that covers it (:class:`Permits`): a start time of the limit's
rate (along its curve, for a ramp) that has come, and a free slot of its concurrency.

A start time is booked for one waiting request, paid for with what that request costs. One
that comes while the gate looks is the request's until it starts, however long another limit
or the requests ahead of it keep it (the times of two limits rarely fall due together);
while one is unspent, a limit books only for the requests ahead of it, so a worker holds no
more of them than it had booked ahead (a horizon's worth of the rate at most). A time that
passed while the gate did not look (the worker stalled) is dropped once later than
:func:`~celery_pause.model.limit.lateness`, not caught up on: the worker books new ones."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from celery.worker.request import Request

from ..model.adaptive import Cut
from ..model.limit import HORIZON, Limit, lateness, run_length
from ..model.scope import Scope, Target
from ..model.state import Hold
from .asking import ENDED_CHECK, booking_delay, next_slot_ask


@dataclass(slots=True)
class Booked:
    """A start time (store time) booked for a request."""

    at: float
    paid: float
    """The units of the rate it paid for (at least what the request costs)."""
    came: bool = False
    """Whether it came while the gate looked: it waits for its request, however late."""


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
        on_wait: Callable[[], None] = lambda: None,
    ) -> None:
        self.id = id
        self.scope = scope
        self.limit = limit
        self.value = value
        """The label value of a limit's partition (``throttle --per``), else ``None``."""
        self._on_wait = on_wait
        """Called once a request waits here (a partition is then in use)."""
        self.family = id.partition(":")[0] if value is not None else id
        """The limit's hold id: the partitions of a limit per label share the pool's room."""
        self.touched = time.monotonic()
        """``time.monotonic()`` a request of a partition last came."""
        self.current = limit
        """The limit as it stands now: an adaptive one at its current level (:meth:`adapt`)."""
        self.adapted = float("-inf")
        """``time.monotonic()`` the level of an adaptive limit was last read."""
        self.cut: Cut | None = None
        """An adaptive limit's last cut, as last read."""
        self.concurrency = limit.concurrency
        self.paced = limit.rate is not None
        """Whether a start needs a start time (of a rate)."""
        self._lock = threading.Lock()
        self._waiting: list[tuple[Request, float]] = []
        """Requests waiting for this limit, in arrival order, with the units of the rate each
        spends (1, or its cost under a cost-weighted limit). Kept by the gate."""
        self._starts: dict[Request, Booked] = {}
        """The start time booked for each waiting request that has one."""
        self._free: list[str] = []
        """Slots of the concurrency taken and not in use."""
        self._busy: dict[str, Request] = {}
        """Slots in use, and the request each one runs."""
        self._spare: list[str] = []
        """Slots of ended tasks set aside while another partition asks for the pool's room
        (:meth:`ended`), not spendable until :meth:`settle_spares`."""
        self.retry_at = float("-inf")
        """Store time before which booking start times is not worth asking for."""
        self._booking_misses = 0
        """Asks in a row that booked nothing (other workers had taken the room)."""
        self.known = float("-inf")
        """The rate's next start time as this worker last saw it in the store (a record
        found behind it was lost by the store)."""
        self.renewed = time.monotonic()
        """``time.monotonic()`` at the start of the last renewal of its slots that worked."""
        self._slot_misses = 0
        self._next_slot_ask = 0.0
        """``time.monotonic()`` before which asking for a slot again is not worth it."""
        self.granted = 0.0
        """``time.monotonic()`` a slot was last taken or kept for a waiting request (the
        partitions of a limit per label ask in that order, the longest without first)."""

    @classmethod
    def of_hold(cls, hold: Hold) -> Permits:
        if hold.limit is None:
            raise ValueError(f"hold {hold.id} pauses: it has no permits")
        return cls(id=hold.id, scope=hold.scope, limit=hold.limit)

    def adapt(self, current: Limit, cut: Cut | None) -> None:
        """An adaptive limit as last read: its rate and concurrency now, and its last cut."""
        with self._lock:
            self.current = current
            self.cut = cut
            self.concurrency = current.concurrency
            self.adapted = time.monotonic()

    def covers(self, target: Target) -> bool:
        return self.scope.covers(target)

    def idle(self) -> bool:
        """Whether nothing waits and no start time or slot is held."""
        with self._lock:
            return not (self._waiting or self._starts or self._free or self._busy or self._spare)

    @property
    def waiting(self) -> int:
        """How many requests wait for this limit."""
        return len(self._waiting)

    # -- the gate, on the consumer loop --------------------------------------------------
    def wait(self, request: Request, cost: float = 1.0) -> None:
        """``request``, costing ``cost`` units of the rate, waits for this limit."""
        self._waiting.append((request, cost))
        self._on_wait()

    def clear_waiting(self) -> None:
        """No request waits any more (the gate takes them all out, to wait again or start)."""
        self._waiting.clear()

    def look(self, now: float) -> None:
        """The gate looks at store time ``now``: start times later than their lateness that
        it did not see come are dropped, those that came now are kept for their requests
        (unless this limit's own concurrency has no slot free: then they stay spendable
        within their lateness only, as the rate alone would have them)."""
        with self._lock:
            self._drop_late(now)
            if self.concurrency is not None and not self._free:
                return  # its own slots hold the requests back: a time kept would bunch starts
            for booked in self._starts.values():
                booked.came = booked.came or booked.at <= now

    def settle(self) -> None:
        """Forget the start times of requests that no longer wait (after the gate took them
        all out and back: one left for a pause, or to be fetched again)."""
        waiting = {request for request, _ in self._waiting}
        with self._lock:
            self._starts = {r: b for r, b in self._starts.items() if r in waiting}

    def ready(self, now: float, request: Request, cost: float = 1.0) -> bool:
        """Whether ``request``, the first to wait here and costing ``cost``, may start at
        store time ``now``: a start time has come for it and a slot is free. It may take
        another request's time that came, paid for as much or more (that one books anew)."""
        with self._lock:
            self._drop_late(now)
            if self._risen(now):
                return True
            if self.paced and not self._claim(now, request, cost):
                return False
            return self.concurrency is None or bool(self._free)

    def _claim(self, now: float, request: Request, cost: float) -> bool:
        """Whether ``request`` holds a start time that came, taken over from another
        waiting request if need be (under the lock)."""
        own = self._starts.get(request)
        if own is not None and own.at <= now:
            return True
        due = [(b.at, r) for r, b in self._starts.items() if b.at <= now and b.paid >= cost]
        if not due:
            return False
        donor = min(due, key=lambda found: found[0])[1]
        taken = self._starts.pop(donor)
        self._starts[request] = taken
        if own is not None and own.paid >= taken.paid:
            self._starts[donor] = own  # paid for as much: it serves the donor in turn
        return True

    def due(self, now: float) -> bool:
        """Whether the gate is worth waking: a start time came that it has not seen, a
        slot is free for a waiting request, or a ramp is over."""
        with self._lock:
            if not self._waiting:
                return False
            if self._risen(now):
                return True
            if self.paced:
                return any(not b.came and b.at <= now for b in self._starts.values())
            return self.concurrency is None or bool(self._free)

    def _drop_late(self, now: float) -> None:
        """Drop the start times that passed unseen longer ago than their lateness (under
        the lock)."""
        late = now - lateness(self.current.rate_at(now))
        if any(not b.came and b.at < late for b in self._starts.values()):
            self._starts = {r: b for r, b in self._starts.items() if b.came or b.at >= late}

    def spend(self, request: Request) -> bool:
        """``request`` starts: spend its start time and bind a slot to it (after
        :meth:`ready`); whether that was the last time that came (booking goes on for the
        requests behind it)."""
        with self._lock:
            resumed = False
            if self.paced:
                spent = self._starts.pop(request, None)
                resumed = spent is not None and spent.came and not self._holding()
            if self.concurrency is not None:
                self._busy[self._free.pop()] = request
            return resumed

    def _holding(self) -> bool:
        """Whether a start time that came is unspent (under the lock)."""
        return any(b.came for b in self._starts.values())

    def _unbooked(self) -> list[tuple[Request, float]]:
        """The waiting requests to book a start time for, in turn (under the lock): those
        without one, but, while a time that came is unspent, only those ahead of the last
        such time's request (they keep it from starting)."""
        waiting = self._waiting
        if self._holding():
            came = [
                i for i, (r, _) in enumerate(waiting) if r in self._starts and self._starts[r].came
            ]
            waiting = waiting[: came[-1]] if came else []
        return [(r, cost) for r, cost in waiting if r not in self._starts]

    def next_start(self) -> float | None:
        """Store time of the next start time reserved, if any."""
        with self._lock:
            return min((b.at for b in self._starts.values()), default=None)

    # -- the store thread --------------------------------------------------------------------
    def ended(
        self, running: Callable[[Request], bool], *, reuse: bool = True, share: bool = False
    ) -> tuple[bool, list[str]]:
        """Slots whose task ended are kept for the requests waiting here (if ``reuse``), or,
        if they must ``share`` the pool's room, set aside for them until the other
        partitions have asked (:meth:`settle_spares`): whether one was kept, and the slots
        to give back (the rest, and free ones nothing waits for)."""
        with self._lock:
            done = [slot for slot, request in self._busy.items() if not running(request)]
            for slot in done:
                del self._busy[slot]
            keep = max(0, self.waiting - len(self._free) - len(self._spare)) if reuse else 0
            (self._spare if share else self._free).extend(done[:keep])
            kept = keep > 0 and bool(done) and not share
            if kept:
                self.granted = time.monotonic()
            spare = max(0, len(self._free) - self.waiting)
            surplus = [self._free.pop() for _ in range(spare)]
            return kept, done[keep:] + surplus

    @property
    def spares(self) -> int:
        return len(self._spare)

    def settle_spares(self, needed: int) -> tuple[bool, list[str]]:
        """The other partitions have asked: give back up to ``needed`` of the slots set
        aside (the room they took), and keep the rest for the requests waiting here; whether
        one was kept, and the slots to give back."""
        with self._lock:
            back = self._spare[:needed]
            kept = self._spare[needed:]
            self._spare = []
            self._free.extend(kept)
            if kept:
                self.granted = time.monotonic()
            return bool(kept), back

    def slots_wanted(self, room: int) -> int:
        """How many slots to ask for now: one per waiting request, within the limit and
        ``room``, what the worker's pool can run beside the slots held of this limit by
        other partitions (a slot taken for a task that then waits for a pool process would
        sit idle)."""
        with self._lock:
            if self.concurrency is None or time.monotonic() < self._next_slot_ask:
                return 0
            room = min(self.waiting, self.concurrency, room - len(self._busy))
            return max(0, room - len(self._free) - len(self._spare))

    def runs(self, request: Request) -> bool:
        """Whether ``request`` started under a slot of this limit (and holds it still)."""
        with self._lock:
            return request in self._busy.values()

    @property
    def refused(self) -> bool:
        """Whether the last ask for a slot got none (other workers held them all)."""
        with self._lock:
            return self._slot_misses > 0

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
        return len(self._free) + len(self._busy) + len(self._spare)

    def add_slots(self, slots: list[str]) -> None:
        """The slots an ask got; after one that got none, the next waits longer."""
        with self._lock:
            if slots:
                self.granted = time.monotonic()
            self._free.extend(slots)
            self._slot_misses = 0 if slots else self._slot_misses + 1
            self._next_slot_ask = next_slot_ask(self._slot_misses, holding=self.slots_in_hand() > 0)

    def starts_wanted(self, now: float) -> list[tuple[Request, float]]:
        """The waiting requests that have no start time yet, and what each costs, of those
        to book one for now, in turn (none if it is not worth asking)."""
        with self._lock:
            if not self.paced or now < self.retry_at or self._risen(now):
                return []
            self._drop_late(now)
            wanted = self._unbooked()
            rate = max(1.0, self.current.rate_at(now))
            return wanted[: run_length(rate, [cost for _, cost in wanted])]

    def _risen(self, now: float) -> bool:
        """Whether a ramp is over at ``now``: its scope is unlimited from then on."""
        rise = self.limit.rise
        return rise is not None and now >= rise[0] + rise[1]

    def add_starts(
        self,
        booked: Sequence[tuple[Request, float]],
        times: Sequence[float],
        retry_at: float,
        known: float,
    ) -> None:
        """The start times a booking got for the requests ``booked`` (with what each costs;
        all or none), when to ask again, and the record it left."""
        with self._lock:
            if times:
                for (request, cost), at in zip(booked, times, strict=True):
                    self._starts[request] = Booked(at, cost)
                # no run fits before the record's next start time is within the horizon
                self._booking_misses, retry_at = 0, max(retry_at, known - HORIZON)
            else:
                self._booking_misses += 1
            self.retry_at = retry_at + booking_delay(self._booking_misses)
            self.known = known

    def held_slots(self) -> list[str]:
        with self._lock:
            return [*self._free, *self._busy, *self._spare]

    def keep_only(self, slots: Iterable[str]) -> None:
        """After a renewal: forget the slots the store no longer has (they had expired)."""
        kept = set(slots)
        with self._lock:
            self._free = [slot for slot in self._free if slot in kept]
            self._spare = [slot for slot in self._spare if slot in kept]
            self._busy = {slot: req for slot, req in self._busy.items() if slot in kept}

    def wake_at(self, now: float) -> float | None:
        """Store time the store thread should look at this limit again: the next start time
        the gate has not seen come, a booking due, a slot to look for."""
        with self._lock:
            times = [b.at for b in self._starts.values() if not b.came]
            if self._busy:
                times.append(now + ENDED_CHECK)
            if self._waiting:
                if self.paced and self._unbooked():
                    times.append(max(self.retry_at, now))
                if self.concurrency is not None and not self._free:
                    # another worker may give one back
                    times.append(now + max(0.0, self._next_slot_ask - time.monotonic()))
            return min(times, default=None)
