"""The worker state: what a read changes, what the loop applies, and the three answers of
one snapshot (pure logic: a real gate, no consumer)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from celery_pause.model.scope import NOTHING, Scope
from celery_pause.model.state import Hold, PauseState
from celery_pause.monitor.view import WorkerView
from celery_pause.worker.gate import Gate
from celery_pause.worker.pools import PoolSupport
from celery_pause.worker.snapshot import Applied
from celery_pause.worker.state import StoreClock, WorkerState

NOW = 1_000_000.0
HOST = "w1@host"


@dataclass
class FakeRequest:
    """The gate reads only the id, the task name and, through ``queue_of``, the queue."""

    id: str
    queue: str
    name: str = "proj.task"


def worker(*, greenlets: bool = False) -> tuple[WorkerState, Gate]:
    clock = StoreClock()
    gate = Gate(lambda req: None, lambda req: req.queue, hostname=HOST, clock=clock.now)
    pool = PoolSupport("gevent" if greenlets else "prefork", greenlets=greenlets)
    return WorkerState(hostname=HOST, pool=pool, gate=gate, clock=clock), gate


def paused(*queues: str) -> PauseState:
    return PauseState().with_holds([Hold(scope=Scope.of(list(queues)), paused_at=NOW - 1)])


def test_a_read_that_changes_nothing_applied_only_moves_as_of() -> None:
    # Given a worker that applied generation 1 (queue a paused)
    state, _ = worker()
    first = paused("a")
    state.mark_applied(state.starts_with(first, NOW), as_of=NOW)

    # When the same state is read again later
    delivered = state.deliver(first, NOW + 5)

    # Then nothing is to apply, and the report says as of the later read
    assert delivered is None and state.unapplied() is None
    assert state.snapshot().as_of == NOW + 5


def test_the_loop_applies_only_the_newest_state_delivered() -> None:
    # Given two reads delivered before the loop got to either
    state, _ = worker()
    state.mark_applied(state.starts_with(PauseState(), NOW), as_of=NOW)
    state.deliver(paused("a"), NOW + 1)
    newest = paused("b").with_holds([Hold(scope=Scope.of(["b"]), paused_at=NOW)])
    state.deliver(newest, NOW + 2)

    # When the loop asks what to apply
    delivered = state.unapplied()

    # Then it is the later read, and once applied nothing is left
    assert delivered is not None
    assert (delivered.applied, delivered.as_of) == (Applied(2, Scope.of(["b"])), NOW + 2)
    state.mark_applied(delivered.applied, as_of=delivered.as_of)
    assert state.unapplied() is None


def test_on_green_pools_the_report_follows_the_newest_read_at_once() -> None:
    # Given a green-pool worker and a prefork worker that applied nothing paused
    green, _ = worker(greenlets=True)
    prefork, _ = worker()
    for state in (green, prefork):
        state.mark_applied(state.starts_with(PauseState(), NOW), as_of=NOW)

    # When both read a pause the loop has not applied yet
    for state in (green, prefork):
        state.deliver(paused("a"), NOW + 1)

    # Then the green worker reports the new generation, the prefork one the applied one
    assert green.snapshot().report(seen=NOW).generation == 1
    assert prefork.snapshot().report(seen=NOW).generation == 0
    assert green.snapshot().describe()["generation"] == 0  # the loop applied 0 so far


def test_inspect_the_report_and_the_view_derive_from_one_snapshot() -> None:
    # Given a worker pausing queue a, holding one request of it
    state, gate = worker()
    state.consumes(["a", "b"])
    applied = state.starts_with(paused("a"), NOW)
    gate.hold_to(applied.scope)
    state.mark_applied(applied, as_of=NOW)
    gate(FakeRequest("t1", "a"))

    # When one snapshot is taken
    snapshot = state.snapshot()
    answer = snapshot.describe()
    report = snapshot.report(seen=NOW)
    view = WorkerView.of(
        snapshot,
        now=NOW,
        connected=True,
        transitions={"pause": 1, "resume": 0},
        breakers_seen=set(),
        paused_at=None,
        loop_idle=0.0,
        busy=False,
    )

    # Then all three say the same generation, scope and held request
    assert (answer["generation"], report.generation, view.generation) == (1, 1, 1)
    assert answer["held"] == view.snapshot.gate.held_by_task == {"proj.task": 1}
    assert report.held == view.snapshot.gate.held == 1
    assert report.paused == ("a",) and view.paused_queues == ("a",)
    assert snapshot.report(seen=NOW, starting=True).generation == -1


def test_before_the_first_apply_nothing_is_reported_applied() -> None:
    state, _ = worker()

    snapshot = state.snapshot()

    assert snapshot.applied is None and snapshot.enforced is None
    assert snapshot.describe()["generation"] == -1
    assert snapshot.describe()["scope"] == NOTHING.to_json()


def test_an_announced_pause_holds_until_a_read_shows_its_hold() -> None:
    # Given a worker that applied a state with nothing paused
    state, _ = worker()
    state.mark_applied(state.starts_with(PauseState(), NOW), as_of=NOW)

    # When a pause of queue a is announced as hold h1, and a read that does not show it
    # yet comes in (the write has not landed)
    announced = state.announce("h1", Scope.of(["a"]), 10.0)
    assert announced is not None and announced.applied.holding == Scope.of(["a"])
    state.mark_applied(announced.applied)
    assert state.deliver(PauseState(), NOW + 1) is None

    # Then queue a stays held; once a read shows the hold, it is the hold that pauses a
    written = PauseState().with_holds([Hold(scope=Scope.of(["a"]), paused_at=NOW, id="h1")])
    delivered = state.deliver(written, NOW + 2)
    assert delivered is not None
    assert (delivered.applied.scope, delivered.applied.announced) == (Scope.of(["a"]), NOTHING)


def test_an_announcement_withdrawn_or_lapsed_holds_nothing() -> None:
    # Given a worker holding two announced pauses
    state, _ = worker()
    state.mark_applied(state.starts_with(PauseState(), NOW), as_of=NOW)
    state.announce("h1", Scope.of(["a"]), 10.0)
    held = state.announce("h2", Scope.of(["b"]), 0.001)
    assert held is not None and held.applied.holding == Scope.of(["a"]) | Scope.of(["b"])

    # When the first is withdrawn (its write failed) and the second's time passes
    withdrawn = state.announce("h1", Scope.of(["a"]), 0.0)
    assert withdrawn is not None and withdrawn.applied.holding == Scope.of(["b"])
    state.mark_applied(withdrawn.applied)
    deadline = time.monotonic() + 0.002
    while time.monotonic() < deadline:
        pass

    # Then the next read holds nothing
    delivered = state.deliver(PauseState(), NOW + 1)
    assert delivered is not None and delivered.applied.holding == NOTHING


def test_an_announcement_never_opens_a_fenced_worker() -> None:
    # Given a worker whose lease ran out (every task held)
    state, _ = worker()
    state.mark_applied(state.starts_with(PauseState(), NOW), as_of=NOW)
    state.fence()

    # When a pause is announced, it changes nothing: every task stays held
    assert state.announce("h1", Scope.of(["a"]), 10.0) is None
    unapplied = state.unapplied()
    assert unapplied is not None and unapplied.applied.scope.everything
