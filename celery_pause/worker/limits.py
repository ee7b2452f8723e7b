"""A worker's side of the limits and ramps: permits the gate spends, and the store work that
earns them.

The gate (:mod:`.gate`) lets a request of a limited scope start only with a permit of every
limit and ramp that covers it (:class:`Permits`): a start time of the limit's rate (or along
the ramp's curve) that has come, and a free slot of its concurrency. The store thread earns
permits (:class:`LimitKeeper`): while requests wait it books runs of start times and takes
slots in the store, gives back the slots of tasks that ended (or keeps them for the next
waiting task, with no store round trip), and renews the slots it holds with its heartbeat. A
request no limit covers never waits for any of this; a store that cannot be reached earns no
permit, so a limit is never lifted by a failure (the scope waits until the store answers).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable

from celery.worker import state as worker_state
from celery.worker.request import Request

from ..errors import StoreError
from ..logs import ThrottledLog
from ..model.limit import (
    HORIZON,
    Limit,
    give_back,
    rate_key,
    renew_slots,
    reserve,
    run_length,
    slots_key,
    take_slots,
)
from ..model.ramp import Ramp, book, ramp_key
from ..model.scope import Scope, Target
from ..model.state import Hold
from ..stores import Store

logger = logging.getLogger(__name__)

ENDED_CHECK = 0.01
"""Seconds between two looks for ended tasks while this worker holds slots in use."""
SLOT_CHECK = (0.05, 0.1)
"""Seconds between two asks for a slot while tasks wait for one and this worker has none:
from the first, doubled at each ask that got none, up to the second."""
TICK = 0.005
"""Fewest seconds between two looks, while the consumer loop starts what is due."""
RETRY = 0.5
"""Seconds before the store is asked again after it failed."""


class Permits:
    """This worker's permits of one limit or ramp: start times booked, slots taken.

    The gate spends them on the consumer loop, the store thread adds them: both under
    one lock. A ramp paces starts along its curve, and from its end on lets every task start.
    """

    def __init__(
        self, *, id: str, scope: Scope, limit: Limit | None = None, ramp: Ramp | None = None
    ) -> None:
        self.id = id
        self.scope = scope
        self.limit = limit
        self.ramp = ramp
        self.concurrency = None if limit is None else limit.concurrency
        self.paced = ramp is not None or (limit is not None and limit.rate is not None)
        """Whether a start needs a start time (a rate or a ramp)."""
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
        self.renewed = time.monotonic()
        """``time.monotonic()`` at the start of the last renewal of its slots that worked."""
        self._slot_misses = 0
        self._next_slot_ask = 0.0
        """``time.monotonic()`` before which asking for a slot again is not worth it."""

    @classmethod
    def of_hold(cls, hold: Hold) -> Permits:
        return cls(id=hold.id, scope=hold.scope, limit=hold.limit)

    @classmethod
    def of_ramp(cls, ramp: Ramp) -> Permits:
        return cls(id=ramp.id, scope=ramp.scope, ramp=ramp)

    def covers(self, target: Target) -> bool:
        return self.scope.covers(target)

    # -- the gate, on the consumer loop --------------------------------------------------
    def ready(self, now: float) -> bool:
        """Whether one task may start at store time ``now`` (start times whose turn passed
        over :data:`~celery_pause.model.limit.HORIZON` ago are dropped, not caught up on)."""
        with self._lock:
            while self._starts and self._starts[0] < now - HORIZON:
                self._starts.popleft()
            if self.ramp is not None and not self.ramp.live(now):
                return True
            if self.paced and not (self._starts and self._starts[0] <= now):
                return False
            return self.concurrency is None or bool(self._free)

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
            spare = max(0, len(self._free) - self.waiting)
            surplus = [self._free.pop() for _ in range(spare)]
            return keep > 0 and bool(done), done[keep:] + surplus

    def slots_wanted(self, pool_size: int) -> int:
        """How many slots to ask for now: one per waiting request, within the limit and
        what the worker's pool can run beside the slots in use (a slot taken for a task
        that then waits for a pool process would sit idle)."""
        with self._lock:
            if self.concurrency is None or time.monotonic() < self._next_slot_ask:
                return 0
            room = min(self.waiting, self.concurrency, pool_size - len(self._busy))
            return max(0, room - len(self._free))

    def add_slots(self, slots: list[str]) -> None:
        """The slots an ask got; after one that got none, the next waits longer."""
        with self._lock:
            self._free.extend(slots)
            self._slot_misses = 0 if slots else self._slot_misses + 1
            first, most = SLOT_CHECK
            self._next_slot_ask = time.monotonic() + min(first * 2**self._slot_misses, most)

    def starts_wanted(self, now: float) -> int:
        """How many start times to book now (0 if enough are, or it is not worth asking)."""
        with self._lock:
            if not self.paced or now < self.retry_at:
                return 0
            if self.ramp is not None and not self.ramp.live(now):
                return 0
            short = self.waiting - len(self._starts)
            rate = self.limit.rate if self.limit and self.limit.rate else self._ramp_rate(now)
            return run_length(rate, short) if short > 0 else 0

    def _ramp_rate(self, now: float) -> float:
        return 1.0 if self.ramp is None else max(1.0, self.ramp.rate(now))

    def add_starts(self, times: Iterable[float], retry_at: float) -> None:
        with self._lock:
            self._starts.extend(times)
            self.retry_at = retry_at

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


class LimitKeeper:
    """The store side of one worker's limits, run by its store thread."""

    def __init__(
        self,
        *,
        store: Store,
        hostname: str,
        clock: Callable[[], float],
        ttl: float,
        pump: Callable[[], None],
        pool_size: int = 1,
    ) -> None:
        """Nothing kept yet.

        Parameters:
            store: The pause store, where the limits' records live.
            hostname: The worker's name (in the ids of its slots).
            clock: The store's clock, as this worker estimates it.
            ttl: Seconds a slot stays taken unless renewed (``pause_worker_ttl``).
            pump: Has the gate start what its permits allow now (on the consumer loop).
            pool_size: Tasks the worker's pool runs at once (``-c``).
        """
        self.store = store
        self.hostname = hostname
        self.clock = clock
        self.ttl = ttl
        self._pump = pump
        self.pool_size = max(1, pool_size)
        self._errors = ThrottledLog(logger)

    def pace(self, permits: tuple[Permits, ...], retired: Iterable[Permits]) -> float | None:
        """Earn and give back what ``permits`` need now, and give back every slot of the
        ``retired`` ones (limits lifted); seconds until it is worth calling again."""
        failed = False
        earned = False
        try:
            for gone in retired:
                self._give_back(gone, gone.held_slots())
            for p in permits:
                earned = self._serve(p) or earned
        except StoreError as exc:
            self._errors.error("celery-pause: limits: %s; the limited tasks wait", exc)
            failed = True
        now = self.clock()
        if earned or any(p.waiting and p.ready(now) for p in permits):
            self._pump()  # what was earned before, and start times that came
        wakes = [t for p in permits if (t := p.wake_at(now)) is not None]
        wake = None if not wakes else max(TICK, min(wakes) - now)
        return min(wake or RETRY, RETRY) if failed else wake

    def give_back_all(self, permits: Iterable[Permits]) -> None:
        """At shutdown: free every slot this worker holds (never raises)."""
        try:
            for p in permits:
                self._give_back(p, p.held_slots())
        except StoreError as exc:
            logger.warning("celery-pause: could not give back limit slots: %s", exc)

    def _serve(self, permits: Permits) -> bool:
        """One limit's store work; whether it earned a permit someone waits for."""
        # A slot not renewed for a while may have expired in the store (and been taken
        # by another worker): it is not used again before a renewal confirms it.
        fresh = time.monotonic() - permits.renewed < self.ttl * 2 / 3
        earned, freed = permits.ended(_running, reuse=fresh)
        self._give_back(permits, freed)
        permits.drop_unused_starts()
        wanted = permits.slots_wanted(self.pool_size)
        if wanted:
            ids = [f"{self.hostname}/{uuid.uuid4().hex[:10]}" for _ in range(wanted)]
            limit = permits.concurrency or 0
            taken = self.store.update_record(
                slots_key(permits.id),
                lambda record, now: take_slots(record, now, limit=limit, ids=ids, ttl=self.ttl),
            ).result
            permits.add_slots(taken)
            earned = earned or bool(taken)
        want = permits.starts_wanted(self.clock())
        if want:
            starts, retry_at = self._book(permits, want)
            permits.add_starts(starts, retry_at)
            earned = earned or bool(starts)
        if time.monotonic() - permits.renewed >= self.ttl / 3:
            self._renew(permits)
        return earned

    def _book(self, permits: Permits, want: int) -> tuple[tuple[float, ...], float]:
        """Book ``want`` start times of the rate or ramp of ``permits`` in the store."""
        ramp, limit = permits.ramp, permits.limit
        if ramp is not None:
            booked = self.store.update_record(
                ramp_key(permits.id), lambda record, now: book(record, now, ramp=ramp, want=want)
            ).result
            return booked.starts, booked.retry_at
        interval = limit.interval if limit is not None else 0.0
        reserved = self.store.update_record(
            rate_key(permits.id),
            lambda record, now: reserve(record, now, interval=interval, want=want),
        ).result
        return tuple(reserved.times()), reserved.retry_at

    def _renew(self, permits: Permits) -> None:
        held = permits.held_slots()
        started = time.monotonic()
        if held:
            kept = self.store.update_record(
                slots_key(permits.id),
                lambda record, now: renew_slots(record, now, ids=held, ttl=self.ttl),
            ).result
            permits.keep_only(kept)
        permits.renewed = started

    def _give_back(self, permits: Permits, slots: list[str]) -> None:
        if slots:
            self.store.update_record(
                slots_key(permits.id),
                lambda record, now: give_back(record, now, ids=slots),
            )


def _running(request: Request) -> bool:
    """Whether a request that started has not ended yet (Celery drops it when it ends)."""
    return request in worker_state.reserved_requests
