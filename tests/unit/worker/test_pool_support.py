"""Which pools the gate holds exactly, the Celery internals it checks at worker start,
and the start check on in-process pools (pure logic, with fakes for the pool side)."""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from celery.concurrency import base, thread
from celery.worker import state as worker_state
from celery.worker.request import Request

from celery_pause.errors import ConfigurationError
from celery_pause.model.state import Scope
from celery_pause.worker.gate import Gate
from celery_pause.worker.pools import (
    EndNotice,
    StartCheck,
    missing_internals,
    pool_name,
    support_for,
)


class FakeRequest(Request):  # type: ignore[misc]
    """A Celery request with only what the gate and the start check read."""

    def __init__(self, task_id: str, queue: str) -> None:
        self.id = task_id
        self.queue = queue
        self.name = "fake"
        self.accepted = False

    def on_accepted(self, pid: Any, time_accepted: float) -> None:
        self.accepted = True


class QueuedPool:
    """Queues what it is handed, as the threads pool's executor does; ``run`` starts the
    oldest through Celery's own ``apply_target``."""

    def __init__(self) -> None:
        self.queue: list[tuple[Any, ...]] = []

    def on_apply(
        self,
        target: Callable[..., Any],
        args: Any = None,
        kwargs: Any = None,
        callback: Any = None,
        accept_callback: Any = None,
        **_: Any,
    ) -> None:
        self.queue.append((target, args, kwargs, callback, accept_callback))

    def run(self) -> None:
        base.apply_target(*self.queue.pop(0))


class NoAcceptPool:
    def on_apply(
        self, target: Any, args: Any = None, kwargs: Any = None, callback: Any = None, **_: Any
    ) -> None:
        """A pool whose ``on_apply`` lost its ``accept_callback`` argument."""


def running(gate: Gate) -> list[str]:
    """Ids of the requests in the gate's scope that it lets run."""
    return [task.id for task in gate.in_flight() if task.within(gate.scope)]


def apply_target_body_first(
    target: Any, args: Any = (), kwargs: Any = None, callback: Any = None,
    accept_callback: Any = None, getpid: Any = None, **_: Any,
) -> None:  # fmt: skip
    """An ``apply_target`` that runs the task before telling the request it started."""
    callback(target(*args, **(kwargs or {})))
    accept_callback(0, 0.0)


@pytest.fixture
def reserved() -> Iterator[list[FakeRequest]]:
    """Requests listed as reserved in the worker state, as Celery lists received tasks."""
    requests: list[FakeRequest] = []
    yield requests
    for request in requests:
        worker_state.reserved_requests.discard(request)


def reserve(reserved: list[FakeRequest], task_id: str, queue: str = "payments") -> FakeRequest:
    request = FakeRequest(task_id, queue)
    worker_state.reserved_requests.add(request)
    reserved.append(request)
    return request


def hand_over(pool: QueuedPool, request: FakeRequest) -> list[str]:
    """Hand ``request`` to ``pool`` as Celery does; what runs is listed, in order."""
    ran: list[str] = []
    pool.on_apply(
        lambda: ran.append("body"),
        (),
        {},
        callback=lambda _result: ran.append("callback"),
        accept_callback=request.on_accepted,
    )
    return ran


def test_missing_or_changed_internals_are_named() -> None:
    # Given a pool without accept_callback, an apply_target running the body first,
    # and a request class without on_accepted
    module = types.ModuleType("newcelery.concurrency.thread")
    module.apply_target = apply_target_body_first  # type: ignore[attr-defined]

    class OldRequest:
        def execute_using_pool(self) -> None: ...

    # When checked
    missing = missing_internals(NoAcceptPool(), module, OldRequest)

    # Then each is named, with where it was looked for
    assert any("NoAcceptPool.on_apply takes no accept_callback argument" in m for m in missing)
    assert any(
        "newcelery.concurrency.thread.apply_target no longer calls accept_callback, then the "
        "task, then callback (it called: target, callback, accept)" in m
        for m in missing
    )
    assert any("OldRequest.on_accepted is gone" in m for m in missing)
    assert len(missing) == 3


class FakeConsumer:
    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.controller = types.SimpleNamespace(semaphore=None, pool_putlocks=True)


def test_a_known_pool_whose_internals_moved_refuses_to_start(monkeypatch: Any) -> None:
    # Given Celery's threads pool, in a Celery whose apply_target was renamed
    monkeypatch.delattr(thread, "apply_target")

    # When a worker starts on it, Then it refuses, naming what is missing
    with pytest.raises(ConfigurationError) as refused:
        support_for(FakeConsumer(thread.TaskPool(limit=1)))  # type: ignore[arg-type]
    assert "threads pool" in str(refused.value)
    assert "celery.concurrency.thread.apply_target is gone" in str(refused.value)


def test_a_third_party_pool_runs_unguaranteed_and_says_so() -> None:
    # Given a pool from outside Celery
    class TaskPool(thread.TaskPool):  # type: ignore[misc]
        pass

    # When a worker starts on it
    support = support_for(FakeConsumer(TaskPool(limit=1)))  # type: ignore[arg-type]

    # Then it is not refused, not checked at start, and the problem names the pool
    assert support.name == pool_name(TaskPool(limit=1))
    assert support.name.endswith(
        ":test_a_third_party_pool_runs_unguaranteed_and_says_so.<locals>.TaskPool"
    )
    assert not support.start_check
    assert "cannot be guaranteed on the third-party pool" in support.problem


@pytest.mark.parametrize("greenlets", [False, True], ids=["threads", "greenlets"])
def test_the_start_check_holds_what_reached_the_pool_once_paused(
    reserved: list[FakeRequest], greenlets: bool
) -> None:
    # Given an in-process pool behind a gate, and two requests handed to it
    passed: list[str] = []
    gate = Gate(
        lambda req: passed.append(req.id),
        lambda req: req.queue,
        start_check=True,
        greenlets=greenlets,
    )
    pool = QueuedPool()
    StartCheck(pool, gate)  # type: ignore[arg-type]
    early, late = reserve(reserved, "t1"), reserve(reserved, "t2")
    ran_early, ran_late = hand_over(pool, early), hand_over(pool, late)

    # When t1 starts while nothing is paused
    pool.run()
    assert ran_early == ["body", "callback"] and early.accepted

    # Then it counts as running while it is reserved, once a pause closed the gate
    gate.hold_to(Scope.of(["payments"]))
    assert running(gate) == ["t1"]

    # When t2's turn to start comes after the pause
    pool.run()

    # Then it was neither run nor accepted (acknowledged); it is held, and not running
    assert ran_late == [] and not late.accepted
    assert [req.id for req in gate.held_requests()] == ["t2"]
    assert running(gate) == ["t1"]

    # When resumed, the held request goes back to the handler
    gate.hold_to(Scope.of([]))
    assert gate.release() == 1 and passed == ["t2"]


def test_handed_over_but_not_started_is_not_running(reserved: list[FakeRequest]) -> None:
    # Given a gate with the start check and a reserved request no pool started yet
    gate = Gate(lambda req: None, lambda req: req.queue, start_check=True)
    reserve(reserved, "queued")
    gate.hold_to(Scope.of(["payments"]))

    # Then it does not count as running (it will ask the gate before it starts) ...
    assert running(gate) == []

    # ... while without the start check (prefork) it does
    prefork = Gate(lambda req: None, lambda req: req.queue)
    prefork.hold_to(Scope.of(["payments"]))
    assert running(prefork) == ["queued"]


def test_a_request_from_a_lost_connection_neither_starts_nor_is_held(
    reserved: list[FakeRequest],
) -> None:
    # Given a request handed to the pool (of an open queue)
    gate = Gate(lambda req: None, lambda req: req.queue, start_check=True)
    pool = QueuedPool()
    StartCheck(pool, gate)  # type: ignore[arg-type]
    request = reserve(reserved, "stale", queue="emails")
    ran = hand_over(pool, request)

    # When the worker drops it before it starts, as Celery does when the connection is lost
    worker_state.reserved_requests.discard(request)
    pool.run()

    # Then it did not run and the gate does not hold it: the broker delivers it again
    assert ran == [] and not request.accepted and gate.held_requests() == []


def test_a_release_off_the_loop_leaves_requests_the_worker_dropped_meanwhile(
    reserved: list[FakeRequest],
) -> None:
    # Given two held requests of a paused queue
    passed: list[str] = []
    gate = Gate(lambda req: passed.append(req.id), lambda req: req.queue, start_check=True)
    gate.hold_to(Scope.of(["payments"]))
    kept, dropped = reserve(reserved, "kept"), reserve(reserved, "dropped")
    gate(kept)
    gate(dropped)

    # When the worker drops one (its broker connection was lost), and a green pool's
    # store greenlet releases them after the resume
    worker_state.reserved_requests.discard(dropped)
    gate.hold_to(Scope.of([]))
    released = gate.release(off_loop=True)

    # Then only the other goes on: the broker delivers the dropped one again
    assert released == 1 and passed == ["kept"] and gate.held_requests() == []


class Ending(FakeRequest):
    """A request whose result callbacks record what they were given, or raise."""

    def __init__(self, calls: list[str]) -> None:
        super().__init__("t1", "celery")
        self.calls = calls

    def on_success(self, ret: Any, **kwargs: Any) -> None:
        self.calls.append(f"done {ret}")

    def on_failure(self, ret: Any, **kwargs: Any) -> None:
        raise ValueError(ret)


def test_a_task_end_is_told_after_celerys_own_callback_even_if_that_raises() -> None:
    # Given Celery's solo pool, its apply_async wrapped to tell of each request's end
    from celery.concurrency.solo import TaskPool

    pool = TaskPool()
    pool.start()
    calls: list[str] = []
    limited = [True]
    EndNotice(pool, lambda request: calls.append(f"ended {request.id}"), lambda: limited[0])
    request = Ending(calls)

    # When a task runs and the request's success callback runs (Celery's: the request leaves
    # the reserved ones), Then its end is told after it
    pool.apply_async(lambda: 5, (), {}, callback=request.on_success)
    assert calls == ["done 5", "ended t1"]

    # When the callback raises, Then the end is told all the same, and the error goes on
    with pytest.raises(ValueError):
        pool.apply_async(lambda: 6, (), {}, callback=request.on_failure)
    assert calls == ["done 5", "ended t1", "ended t1"]

    # When a callback is not a request's, Then it runs as it was, and no end is told
    pool.apply_async(lambda: 7, (), {}, callback=lambda ret: calls.append(f"other {ret}"))
    assert calls == ["done 5", "ended t1", "ended t1", "other 7"]

    # When no limit is in force as a task starts, Then its end is not told
    limited[0] = False
    pool.apply_async(lambda: 8, (), {}, callback=request.on_success)
    assert calls == ["done 5", "ended t1", "ended t1", "other 7", "done 8"]
