"""Hostile message content on the gate's path: whatever a message holds, the gate never raises.

Real Celery requests, built from kombu messages as a worker's strategy builds them, carry
generated headers, keyword arguments, label values and task ids of any type and size through
a gate with a pause of one label value, a limit per label value and a rate limit in force.
(The same, through a real worker and its broker: tests/integration/worker/test_hostile_input.py.)
"""

from __future__ import annotations

from typing import Any

from celery.worker.request import Request
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from celery_pause.model.content import MAX_VALUE, UNREADABLE, label_value, shown, text_of
from celery_pause.model.limit import Limit
from celery_pause.model.scope import Scope
from celery_pause.model.state import Hold
from celery_pause.worker.gate import Gate
from support.hostile import values
from support.requests import request_of

LABELS = {"tenant": "tenant_id"}
hostile = values


def hostile_gate(passed: list[Request]) -> Gate:
    """A gate pausing tenant A, limiting each tenant to one at once, and every task to 100/s."""
    gate = Gate(passed.append, lambda req: "default", hostname="w1@host", labels=LABELS)
    per_tenant = Hold(id="per", scope=Scope.of(), limit=Limit(concurrency=1, per="tenant"))
    rate = Hold(id="rate", scope=Scope.of(tasks=["proj.*"]), limit=Limit(rate=100.0))
    gate.hold_to(Scope.of(labels=["tenant=A"]), limits=[per_tenant, rate])
    return gate


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(label=hostile, header=st.booleans(), shadow=hostile, task_id=hostile)
@example(label="\ud800", header=False, shadow=None, task_id="t")  # the poison of issue #35
@example(label="\ud800", header=True, shadow=None, task_id="t")
@example(label="A\x00", header=False, shadow=["a"], task_id=["unhashable"])
def test_no_message_content_raises_out_of_the_gate(
    label: Any, header: bool, shadow: Any, task_id: Any
) -> None:
    # Given a gate with a pause of one label value, a limit per label and a rate in force
    passed: list[Request] = []
    gate = hostile_gate(passed)
    request = request_of(label, header=header, shadow=shadow)
    request.id = task_id  # as a message whose "id" header is of any type would make it

    # When the request arrives, and the gate is pumped, released and read
    gate(request)
    gate.pump()
    gate.release()
    in_flight = gate.in_flight()
    figures = gate.figures()

    # Then nothing raised, and the request is held only if its label reads as A
    held = gate.held_requests()
    assert (request in held) == (label_value(label) == "A" and shadow is None)
    assert figures.held == len(held)
    assert all(len(task.id) <= MAX_VALUE + 1 and task.id.isprintable() for task in in_flight)


def test_unreadable_values_share_one_partition_of_a_limit_per_label() -> None:
    # Given a gate limiting each tenant to one task at once, and three tasks whose tenant
    # is unreadable, each differently
    passed: list[Request] = []
    gate = hostile_gate(passed)
    for value in ("\ud800", b"bytes", "x" * (MAX_VALUE + 1)):
        gate(request_of(value))

    # Then they are one value of the limit: the same partition, none of them held by the pause
    (per_tenant,) = gate.pacing.partitions
    assert [member.value for member in per_tenant.members()] == [UNREADABLE]
    assert gate.held_requests() == []


def test_a_keyword_table_or_headers_of_another_type_read_as_no_label() -> None:
    passed: list[Request] = []
    gate = hostile_gate(passed)
    for kwargs in (["tenant_id", "A"], "tenant_id=A", None):
        request = request_of(None, kwargs=kwargs if kwargs is not None else {})
        assert gate.target(request).label == ()
    request = request_of("A")
    request.message.headers["tenant"] = None  # no header: the keyword argument counts
    assert gate.target(request).label == ("tenant=A",)


@given(value=hostile)
def test_a_label_value_reads_as_printable_bounded_text_or_unreadable(value: Any) -> None:
    text = label_value(value)
    if value is None:
        assert text is None
        return
    assert text is not None
    assert text == UNREADABLE or (len(text) <= MAX_VALUE and text.isprintable())
    text.encode()  # valid Unicode: a store key, a JSON document and a log line take it
    if type(value) is str and text != UNREADABLE:
        assert text == value


@given(value=hostile)
@example(value="00\x1f\x1f\x1f\x1f\x08\x08" + "\U00010000" * 4)  # escapes outgrow the cut
def test_a_task_id_reads_as_bounded_text_and_shows_as_ascii(value: Any) -> None:
    assert len(text_of(value)) <= MAX_VALUE + 1
    text_of(value).encode()
    assert shown(value).isprintable() and len(shown(value)) <= 65


@settings(max_examples=100, deadline=None)
@given(shadow=hostile)
def test_a_held_request_of_any_shadow_name_is_counted_by_its_bounded_name(shadow: Any) -> None:
    # Given a gate holding every queue, When a request with that shadow name arrives
    passed: list[Request] = []
    gate = Gate(passed.append, lambda req: "default", hostname="w1@host", labels=LABELS)
    gate.hold_to(Scope.of(["default"]))
    gate(request_of("B", shadow=shadow))

    # Then it is held, and the figures count it under a name a report and a metric can hold
    figures = gate.figures()
    assert figures.held == 1 and passed == []
    assert all(type(name) is str and len(name) <= MAX_VALUE + 1 for name in figures.held_by_task)
