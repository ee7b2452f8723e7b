"""The gate's admission policy (``admit_with``), the one way past a paused queue (a
breaker's trial tasks)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from celery_pause.model.scope import Scope
from celery_pause.worker.gate import Gate


@dataclass
class FakeRequest:
    """Pure logic: the gate only reads the id, the task name and, through ``queue_of``,
    the queue."""

    id: str
    queue: str
    name: str = "proj.task"


def gate_with(passed: list[str], admitted: set[str]) -> Gate:
    gate = Gate(lambda req: passed.append(req.id), lambda req: req.queue)
    gate.hold_to(Scope.of(["payments"]))
    gate.admit_with(lambda req: req.id in admitted)
    return gate


def test_only_admitted_requests_pass_a_paused_queue() -> None:
    # Given a gate pausing "payments" that admits t1
    passed: list[str] = []
    admitted = {"t1"}
    gate = gate_with(passed, admitted)
    requests: list[Any] = [FakeRequest("t1", "payments"), FakeRequest("t2", "payments")]

    # When both arrive, and a request of another queue
    for request in [*requests, FakeRequest("o1", "emails")]:
        gate(request)

    # Then the admitted one and the other queue's pass; t2 is held
    assert passed == ["t1", "o1"]
    assert [req.id for req in gate.held_requests()] == ["t2"]


def test_a_held_request_passes_once_admitted_and_only_then() -> None:
    # Given a held request
    passed: list[str] = []
    admitted: set[str] = set()
    gate = gate_with(passed, admitted)
    request: Any = FakeRequest("t2", "payments")
    gate(request)
    assert gate.release() == 0 and passed == []

    # When it is admitted, a release lets it through
    admitted.add("t2")
    assert gate.release() == 1
    assert passed == ["t2"] and gate.held_requests() == []


def test_without_the_hook_the_gate_holds_everything_paused() -> None:
    passed: list[str] = []
    gate = Gate(lambda req: passed.append(req.id), lambda req: req.queue)
    gate.hold_to(Scope.of(["payments"]))
    request: Any = FakeRequest("t1", "payments")

    gate(request)

    assert passed == [] and len(gate.held_requests()) == 1
