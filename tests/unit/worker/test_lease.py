"""The lease: a gate whose lease ran out holds every request, and a worker that fenced
applies the next state it reads, even one it had applied before."""

from __future__ import annotations

import time
from typing import Any

from celery_pause.model.scope import EVERYTHING, NOTHING, Scope
from celery_pause.model.state import Hold, PauseState
from celery_pause.worker.gate import Gate
from celery_pause.worker.pools import PREFORK, PoolSupport
from celery_pause.worker.snapshot import UNREAD
from celery_pause.worker.state import StoreClock, WorkerState

from .test_gate_admit import FakeRequest


def test_a_gate_past_its_lease_holds_everything_and_says_so_once() -> None:
    # Given a gate pausing nothing whose lease has just run out
    passed: list[str] = []
    lapses: list[float] = []
    gate = Gate(
        lambda req: passed.append(req.id),
        lambda req: req.queue,
        on_lapse=lambda: lapses.append(time.monotonic()),
    )
    gate.renew(time.monotonic() + 60)
    request: Any = FakeRequest("t1", "emails")
    gate(request)
    gate.renew(time.monotonic() - 0.001)

    # When two more requests arrive
    gate(FakeRequest("t2", "emails"))
    gate(FakeRequest("t3", "other"))

    # Then only the one before passed, the worker was told once, and both are held
    assert passed == ["t1"] and len(lapses) == 1
    assert gate.scope == EVERYTHING
    assert [req.id for req in gate.held_requests()] == ["t2", "t3"]

    # When the worker reads again and applies what it read (nothing paused), they go on
    gate.renew(time.monotonic() + 60)
    gate.hold_to(NOTHING)
    assert gate.release() == 2 and passed == ["t1", "t2", "t3"]


def test_a_fenced_worker_applies_the_next_read_even_if_it_applied_that_state_before() -> None:
    # Given a worker that applied generation 3 (emails paused)
    gate = Gate(lambda req: None, lambda req: req.queue, hostname="w1@h")
    state = WorkerState(hostname="w1@h", pool=PoolSupport(PREFORK), gate=gate, clock=StoreClock())
    stored = PauseState(generation=3, holds=(Hold(scope=Scope.of(["emails"])),))
    delivered = state.deliver(stored, now=time.time())
    assert delivered is not None
    state.mark_applied(delivered.applied)
    assert state.deliver(stored, now=time.time()) is None  # the same state: nothing to do

    # When it fences (twice: the second time there is nothing more to hold)
    fenced = state.fence()
    assert fenced is not None and fenced.applied == UNREAD
    assert state.fence() is None

    # Then the same state read again is delivered, to be applied over the fence
    again = state.deliver(stored, now=time.time())
    assert again is not None and again.applied == delivered.applied
