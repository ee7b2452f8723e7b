"""Requests that start at a pace: those a ramped resume or a limit covers wait here.

The gate (:mod:`celery_pause.worker.gate`) asks :meth:`Pacing.waits` for every request it lets
through while a ramp or a limit is in force: both are paced by permits the store thread earns
(:mod:`.permits`). A request none covers passes at once, whatever waits; one that is covered
starts at once only if every ramp and limit covering it allows a start now and none of them has
requests waiting already (so each keeps arrival order), otherwise it waits, in arrival order,
until :meth:`Pacing.due` lets it start.

A request waiting for a limit widens the channel's prefetch window by one, as a held one
does, so it never stops the rest of its queue or the worker's other queues; one of a limit per
label value does so only while its own value's limit keeps it (not while it waits for the
pool's room, as any prefetched task does), so a worker fetches no more than its window of
tenants that could run. Where a limit
covers a whole queue, the worker stops consuming that queue while ``backlog`` requests of it
wait (:attr:`Pacing.backed_up`), and consumes it again once half of them started: the rest of
its backlog stays in the broker. One waiting for a ramp does not widen the window (the worker
fetches no more than its window while the ramp holds it back).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from celery.worker.request import Request

from ..model.scope import Target
from ..model.state import Hold
from .partitions import Partitions
from .permits import Permits

Waiting = tuple[Request, float]
"""A waiting request and the ``time.monotonic()`` it was first held or waited since."""


class Pacing:
    """The permits of the ramps and limits in force on one worker, and the requests they keep."""

    def __init__(
        self,
        *,
        clock: Callable[[], float],
        qos: Callable[[], Any],
        on_wait: Callable[[], None],
        target: Callable[[Request], Target],
        backlog: int = 16,
        on_backlog: Callable[[], None] = lambda: None,
        cost: Callable[[Request, str], float] = lambda request, name: 1.0,
    ) -> None:
        """Nothing in force.

        Parameters:
            clock: The store's clock, as this worker estimates it.
            qos: The consumer's current prefetch controller, or ``None``.
            on_wait: Wakes the store thread: called when a request starts waiting where
                none waited before (for its limit, or at all), and when one takes a slot.
            target: Where a request stands in every dimension of a scope.
            backlog: Requests of a queue a limit covers whole that may wait before the
                worker stops consuming it.
            on_backlog: Called when :attr:`backed_up` changes (the consumers to match).
            cost: What a request says it costs, by the name a cost-weighted limit reads
                (:meth:`~celery_pause.worker.reading.TargetReader.cost`).
        """
        self.clock = clock
        self._qos = qos
        self._on_wait = on_wait
        self._target = target
        self._cost = cost
        self.permits: tuple[Permits, ...] = ()
        """This worker's permits of the ramps and limits in force, but those per label."""
        self.partitions: tuple[Partitions, ...] = ()
        """The partitions of the limits per label value in force."""
        self.retired: list[Permits] = []
        """Permits of limits lifted, whose slots the store thread gives back."""
        self.waiting: list[Waiting] = []
        """Requests waiting for their pace, in arrival order."""
        self._widened: set[int] = set()
        """Waiting requests (by ``id``) that widened the prefetch window."""
        self._backlog = backlog
        self._on_backlog = on_backlog
        self._whole: Counter[str] = Counter()
        """Waiting requests per queue, of those a limit covers with their whole queue."""
        self.backed_up: frozenset[str] = frozenset()
        """Queues the worker stops consuming: a limit covering all of them keeps enough of
        their requests waiting here."""
        self.active = False
        """Whether a ramp or a limit is in force (an attribute: the gate reads it per task)."""
        self._book_on = False
        """Whether a start spent the last start time that came of a limit (its booking
        goes on: the store thread is woken once the waiting requests are back)."""

    def pace(self, limits: Iterable[Hold]) -> None:
        """Pace the starts of ``limits`` (ramps too) from now on; their permits are kept
        across calls, so a re-read does not restart them."""
        limits = tuple(limits)
        kept = {permits.id: permits for permits in self.permits}
        self.permits = tuple(
            kept.pop(h.id) if h.id in kept else Permits.of_hold(h)
            for h in limits
            if h.limit is None or h.limit.per is None
        )
        self.retired.extend(kept.values())
        families = {family.id: family for family in self.partitions}
        self.partitions = tuple(
            families.pop(h.id) if h.id in families else Partitions(h)
            for h in limits
            if h.limit is not None and h.limit.per is not None
        )
        for family in families.values():
            self.retired.extend(family.members())
        self.active = bool(self.permits or self.partitions)
        self._note_backlog()

    def all_permits(self) -> tuple[Permits, ...]:
        """The permits of every ramp and limit in force, and of the partitions in use."""
        members = [member for family in self.partitions for member in family.active()]
        return (*self.permits, *members)

    def ended(self, request: Request) -> None:
        """``request``'s task ended: if it held a slot of a limit, the store thread is woken
        to pass the slot on now."""
        if any(p.runs(request) for p in self.all_permits() if p.concurrency is not None):
            self._on_wait()

    def take_retired(self) -> list[Permits]:
        """The permits whose slots and records to give up: of limits lifted, and of
        partitions idle long enough to be forgotten."""
        retired, self.retired = self.retired, []
        return retired + [gone for family in self.partitions for gone in family.prune()]

    def covering(self, target: Target) -> list[Permits]:
        """The permits of every ramp, limit and partition that covers ``target``."""
        permits = [p for p in self.permits if p.covers(target)]
        for family in self.partitions:
            member = family.of(target)
            if member is not None:
                permits.append(member)
        return permits

    def waits(self, request: Request, target: Target, since: float) -> bool:
        """Whether ``request`` must wait for its pace (it then waits here)."""
        permits = self.covering(target)
        if not permits:
            return False
        if not any(p.waiting for p in permits) and self._start(permits, request):
            self._wake_to_book()
            return False
        first = not self.waiting or any(not p.waiting for p in permits)
        self._wait(request, since, permits, target)
        if first:  # the store thread earns permits and times starts: wake it
            self._on_wait()
        self._note_backlog()
        return True

    def due(self, blocked: Callable[[Request], bool]) -> tuple[list[Request], list[Waiting]]:
        """The waiting requests that may start now, in arrival order, and those that
        ``blocked`` says a pause holds now (taken out of the wait; the rest waits on)."""
        now = self.clock()
        for p in self.all_permits():
            p.look(now)
        waiting = self.take_waiting()
        starting, blocking = [], []
        for request, since in waiting:
            if blocked(request):
                blocking.append((request, since))
                continue
            target = self._target(request)
            permits = self.covering(target)
            if not any(p.waiting for p in permits) and self._start(permits, request):
                starting.append(request)
            else:
                self._wait(request, since, permits, target)
        self._settle()
        return starting, blocking

    def take_waiting(self) -> list[Waiting]:
        """Every waiting request, out of the wait (the prefetch window narrowed again)."""
        waiting, self.waiting = self.waiting, []
        qos = self._qos()
        if qos is not None and self._widened:
            qos.decrement_eventually(len(self._widened))
        self._widened.clear()
        for permits in self.all_permits():
            permits.clear_waiting()
        self._whole.clear()
        return waiting

    def keep(self, waiting: Iterable[Waiting]) -> None:
        """Have ``waiting`` (taken out by :meth:`take_waiting`) wait again, in that order."""
        for request, since in waiting:
            target = self._target(request)
            self._wait(request, since, self.covering(target), target)
        self._settle()

    def _start(self, permits: list[Permits], request: Request) -> bool:
        """Whether every ramp and limit covering ``request`` lets it start now (spent if so)."""
        now = self.clock()
        if not all([p.ready(now, request, self._cost_of(p, request)) for p in permits]):
            return False
        resumed = [p.spend(request) for p in permits]
        self._book_on = self._book_on or any(resumed)
        if any(p.concurrency is not None for p in permits):
            self._on_wait()  # the store thread watches for its end, to pass its slot on
        return True

    def _wait(self, request: Request, since: float, permits: list[Permits], target: Target) -> None:
        self.waiting.append((request, since))
        for p in permits:
            p.wait(request, self._cost_of(p, request))
        limits = [p for p in permits if p.limit.rise is None]  # a ramp waits within its window
        if all(p.value is not None and not p.holds_back() for p in limits):
            return  # only the pool's room keeps it (or nothing): it waits within the window
        if any(p.limit.fair is not None for p in limits):
            return  # fed for its turn: it waits within the window, and the feeder waits too
        qos = self._qos()
        if qos is not None:
            qos.increment_eventually()
            self._widened.add(id(request))
        # a limit per label never stops its queue: one tenant's backlog must not stop the rest
        whole = Target(queue=target.queue, worker=target.worker)
        if target.queue and any(p.value is None and p.scope.covers(whole) for p in limits):
            self._whole[target.queue] += 1

    def _cost_of(self, permits: Permits, request: Request) -> float:
        """The units of ``permits``'s rate ``request`` spends (1 unless the limit weighs
        cost; at most :attr:`~celery_pause.model.limit.Limit.most_cost`)."""
        name = permits.limit.cost
        return 1.0 if name is None else min(self._cost(request, name), permits.limit.most_cost)

    def _settle(self) -> None:
        """After the waiting requests were taken out and back: the permits forget the start
        times of those that left, and the queues a backlog stops are noted."""
        for p in self.all_permits():
            p.settle()
        self._note_backlog()
        self._wake_to_book()

    def _wake_to_book(self) -> None:
        """Wake the store thread if a start spent the last time that came of a limit: it
        books for the requests behind it (once every request waits again, not before)."""
        if self._book_on:
            self._book_on = False
            self._on_wait()

    def _note_backlog(self) -> None:
        """Keep :attr:`backed_up`: a queue stops at ``backlog`` waiting, resumes at half."""
        backed = frozenset(
            queue
            for queue, count in self._whole.items()
            if count >= self._backlog or (queue in self.backed_up and 2 * count >= self._backlog)
        )
        if backed != self.backed_up:
            self.backed_up = backed
            self._on_backlog()
