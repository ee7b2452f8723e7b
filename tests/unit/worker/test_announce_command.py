"""The ``pause_announce`` remote command reads any arguments a broadcast can carry: a sound
announcement reaches the worker's handler, anything else is refused with a reason and never
raises (a stand-in for the worker's consumer; the handler is the apply step's)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from celery_pause.control import ANNOUNCED_FOR, pause_announce
from celery_pause.model.scope import Scope

RULE = {"queues": ["q"], "tasks": None, "workers": None, "labels": None}


def worker() -> tuple[Any, list[tuple[str, Scope, float]]]:
    calls: list[tuple[str, Scope, float]] = []
    consumer = SimpleNamespace(pause_announced=lambda *args: calls.append(args))
    return SimpleNamespace(consumer=consumer), calls


def test_a_sound_announcement_reaches_the_handler_with_its_time_bounded() -> None:
    state, calls = worker()

    assert pause_announce(state, hold="h1", rule=RULE, seconds=1e9) == {"ok": "holding"}
    assert pause_announce(state, hold="h1", rule=RULE, seconds=0) == {"ok": "withdrawn"}

    assert calls == [("h1", Scope.of(["q"]), ANNOUNCED_FOR), ("h1", Scope.of(["q"]), 0.0)]


@pytest.mark.parametrize(
    "arguments",
    [
        {"hold": "", "rule": RULE, "seconds": 5},
        {"hold": "x" * 65, "rule": RULE, "seconds": 5},
        {"hold": ["h"], "rule": RULE, "seconds": 5},
        {"hold": "h", "rule": None, "seconds": 5},
        {"hold": "h", "rule": {"queues": 5}, "seconds": 5},
        {"hold": "h", "rule": {"queues": ["q\x1b[2J"]}, "seconds": 5},
        {"hold": "h", "rule": {"queues": ["q" * 100_000]}, "seconds": 5},
        {"hold": "h", "rule": RULE, "seconds": "soon"},
        {"hold": "h", "rule": RULE, "seconds": 10**400},
        {"hold": "h", "rule": RULE, "seconds": float("nan")},
    ],
)
def test_an_unreadable_announcement_is_refused_with_a_reason(arguments: dict[str, Any]) -> None:
    state, calls = worker()

    answer = pause_announce(state, **arguments)

    assert set(answer) == {"error"} and "unreadable announcement" in answer["error"]
    assert calls == []


@given(
    hold=st.one_of(st.none(), st.text(), st.binary(), st.integers()),
    rule=st.one_of(
        st.just(RULE), st.none(), st.dictionaries(st.text(), st.text() | st.lists(st.text()))
    ),
    seconds=st.one_of(st.none(), st.floats(allow_nan=True), st.text(), st.integers()),
)
def test_no_argument_raises(hold: Any, rule: Any, seconds: Any) -> None:
    state, calls = worker()

    answer = pause_announce(state, hold=hold, rule=rule, seconds=seconds)

    assert set(answer) <= {"ok", "error"}
    assert all(0.0 <= seconds <= ANNOUNCED_FOR for _, _, seconds in calls)
