"""A worker's store work for its limits (ramps too), on its store thread: earning permits.

While requests wait, :class:`LimitKeeper` books runs of start times and takes slots in the
store, gives back the slots of tasks that ended (or keeps them for the next waiting task, with
no store round trip), and renews the slots it holds with its heartbeat. A request no limit
covers never waits for any of this; a store that cannot be reached earns no permit, so a limit
is never lifted by a failure (the scope waits until the store answers). A booking that finds
its record missing asks the store since when it kept its records
(:func:`~celery_pause.model.limit.kept_since`), so a record the store lost is booked again
past every start time still held, not from now.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable

from celery.worker import state as worker_state
from celery.worker.request import Request

from ..errors import StoreError
from ..logs import ThrottledLog
from ..model.adaptive import adapt_key, at_level, cut_of, forget_level, level_of
from ..model.limit import KEPT_KEY, Record, forget_rate, kept_since, reserve
from ..model.limit_keys import rate_key, slots_key, tagged
from ..model.slots import give_back, has_free_slot, renew_slots, take_slots
from ..stores import Store
from .permits import Permits

logger = logging.getLogger(__name__)

TICK = 0.005
"""Fewest seconds between two looks, while the consumer loop starts what is due."""
RETRY = 0.5
"""Seconds before the store is asked again after it failed."""
ADAPT_READ = 1.0
"""Seconds an adaptive limit's level (its metrics) may be old while nothing waits for it: a
worker about to book start times or take slots reads it first."""


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
        """Earn and give back what ``permits`` need now, and give up the slots and records
        of the ``retired`` ones (limits lifted, partitions forgotten); seconds until it is
        worth calling again."""
        failed = False
        earned = False
        try:
            for gone in retired:
                self._retire(gone)
            # a partition of a limit per label with requests waiting and no slot: the other
            # partitions set their ended tasks' slots aside, the longest without a slot asks
            # first, and they give back the room it took, so one tenant's backlog never keeps
            # the pool's room from the rest (and a slot is not given back only to be taken
            # again when the store refuses them all)
            short = {p.family for p in permits if p.value is not None and p.short_of_slots()}
            held = Counter[str]()
            for p in permits:
                earned = self._finish(p, share=p.family in short) or earned
                held[p.family] += p.slots_held() - p.spares  # the room set aside is free
            self._look_again(permits, held)
            for p in sorted(permits, key=lambda p: p.granted):
                earned = self._earn(p, held) or earned
            earned = self._settle_spares(permits, held) or earned
        except StoreError as exc:
            self._errors.error("celery-pause: limits: %s; the limited tasks wait", exc)
            failed = True
        now = self.clock()
        if earned or any(p.due(now) for p in permits):
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

    def _finish(self, permits: Permits, *, share: bool) -> bool:
        """Give back the slots of one limit's ended tasks, or keep them for its next waiting
        ones (set aside if it must ``share`` the room: :meth:`_settle_spares`); whether one
        was kept for a waiting task."""
        # A slot not renewed for a while may have expired in the store (and been taken
        # by another worker): it is not used again before a renewal confirms it.
        # Nor is one of an adaptive limit: the level may have been cut since it was taken.
        reuse = self._fresh(permits) and not permits.limit.adaptive
        kept, freed = permits.ended(_running, reuse=reuse, share=share)
        self._give_back(permits, freed)
        return kept

    def _settle_spares(self, permits: Iterable[Permits], held: Counter[str]) -> bool:
        """After the other partitions asked: give back the slots set aside that the room
        they took needs, the partition served last first, and keep the rest for the
        requests waiting (:meth:`Permits.settle_spares`); whether one was kept."""
        kept_any = False
        for p in sorted(permits, key=lambda p: p.granted, reverse=True):
            spares = p.spares
            if not spares:
                continue
            over = held[p.family] + spares - self.pool_size
            kept, back = p.settle_spares(max(0, over))
            self._give_back(p, back)
            held[p.family] += spares - len(back)
            kept_any = kept_any or kept
        return kept_any

    def _fresh(self, permits: Permits) -> bool:
        """Whether the slots of ``permits`` were renewed recently enough to be live in the
        store (not expired there, and so not taken by another worker)."""
        return time.monotonic() - permits.renewed < self.ttl * 2 / 3

    def _look_again(self, permits: Iterable[Permits], held: Counter[str]) -> None:
        """The limits about to ask again for a slot after an ask that got none: their slots
        records, all read in one round trip. One still full counts as refused again without
        a write, so that asking while other workers hold the slots costs a share of a read
        (they ask at the same times: :meth:`Permits.add_slots`), not a write and a read."""
        again = [
            p
            for p in permits
            if p.refused and not p.limit.adaptive and p.slots_wanted(self._room(p, held))
        ]
        if not again:
            return
        records = self.store.read_each([slots_key(p.id) for p in again])
        now = self.clock()
        for p in again:
            if _full(records[slots_key(p.id)], now, p.concurrency or 0):
                p.add_slots([])

    def _earn(self, permits: Permits, held: Counter[str]) -> bool:
        """Take the slots and book the start times one limit's waiting requests need, and
        renew its slots when due; whether it earned a permit. ``held``: the slots this worker
        holds of each limit (its partitions together), kept up to date."""
        earned = False
        room = self._room(permits, held)
        if permits.limit.adaptive and (
            permits.slots_wanted(room)
            or permits.starts_wanted(self.clock())
            or time.monotonic() - permits.adapted >= ADAPT_READ
        ):
            self._adapt(permits)  # about to ask the store: at the level it has now
        slots = permits.slots_wanted(room)
        if slots:
            taken = self._take(permits, slots)
            permits.add_slots(taken)
            held[permits.family] += len(taken)
            # a partition refused waits for its own limit now: the gate widens the window
            earned = earned or bool(taken) or permits.value is not None
        unbooked = permits.starts_wanted(self.clock())
        if unbooked:
            starts, retry_at, known = self._book(permits, [cost for _, cost in unbooked])
            permits.add_starts(unbooked, starts, retry_at, known)
            earned = earned or bool(starts)
        if time.monotonic() - permits.renewed >= self.ttl / 3:
            self._renew(permits)
        return earned

    def _room(self, permits: Permits, held: Counter[str]) -> int:
        """The pool's room for the slots of ``permits``: what the slots this worker holds of
        the other partitions of its limit leave."""
        return self.pool_size - (held[permits.family] - permits.slots_held())

    def _take(self, permits: Permits, slots: int) -> list[str]:
        """Take up to ``slots`` slots of the concurrency of ``permits``; the ids taken."""
        ids = [f"{self.hostname}/{uuid.uuid4().hex[:10]}" for _ in range(slots)]
        limit = permits.concurrency or 0
        return self.store.update_record(
            slots_key(permits.id),
            lambda record, now: tagged(
                take_slots(record, now, limit=limit, ids=ids, ttl=self.ttl), permits.value
            ),
        ).result

    def _adapt(self, permits: Permits) -> None:
        """Read an adaptive limit's level and last cut."""
        record = self.store.read_record(adapt_key(permits.id))
        permits.adapt(at_level(permits.limit, level_of(record, self.clock())), cut_of(record))

    def _book(self, permits: Permits, costs: list[float]) -> tuple[tuple[float, ...], float, float]:
        """Book start times of the rate of ``permits`` for tasks of ``costs`` in the store: the
        times, when to ask again, and the record as left (:attr:`Permits.known`). If the
        record is missing, ask since when the store kept its records, and book by that."""
        starts, retry_at, known, unknown = self._ask(permits, costs, None)
        if unknown:
            kept = self._kept()
            starts, retry_at, known, _ = self._ask(permits, costs, kept)
        return starts, retry_at, known

    def _kept(self) -> float:
        """Since when the store kept its records: a plain read, a write only where the
        marker is missing (a fresh store, or one that forgot everything)."""
        record = self.store.read_record(KEPT_KEY)
        if record is not None and "since" in record:
            return kept_since(record, 0.0).result
        return self.store.update_record(KEPT_KEY, kept_since).result

    def _ask(
        self, permits: Permits, costs: list[float], kept: float | None
    ) -> tuple[tuple[float, ...], float, float, bool]:
        limit, known = permits.current, permits.known
        reserved = self.store.update_record(
            rate_key(permits.id),
            lambda record, now: tagged(
                reserve(record, now, limit=limit, costs=costs, known=known, kept=kept),
                permits.value,
            ),
        ).result
        return reserved.starts, reserved.retry_at, reserved.tat, reserved.unknown

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

    def _retire(self, permits: Permits) -> None:
        """Give back the slots of a limit lifted, or a partition forgotten, and delete its
        rate's record once its start times all passed."""
        self._give_back(permits, permits.held_slots())
        if permits.limit.rate is not None:
            self.store.update_record(rate_key(permits.id), forget_rate)
        if permits.limit.adaptive:
            self.store.update_record(adapt_key(permits.id), forget_level)

    def _give_back(self, permits: Permits, slots: list[str]) -> None:
        if not slots:
            return
        if permits.concurrency == 1 and not permits.limit.adaptive and self._fresh(permits):
            # the record holds one slot at most, and this one is live: it holds this alone
            self.store.delete_record(slots_key(permits.id))
            return
        self.store.update_record(
            slots_key(permits.id), lambda record, now: give_back(record, now, ids=slots)
        )


def _full(record: Record | StoreError | None, now: float, limit: int) -> bool:
    """Whether a slots record as read has no slot free at ``now`` (one missing or unreadable
    is not full: the ask itself tells)."""
    if not isinstance(record, dict):
        return False
    try:
        return not has_free_slot(record, now, limit=limit)
    except (TypeError, ValueError):
        return False


def _running(request: Request) -> bool:
    """Whether a request that started has not ended yet (Celery drops it when it ends)."""
    return request in worker_state.reserved_requests
