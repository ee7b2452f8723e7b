"""Holds and scopes: pure logic, no broker."""

from __future__ import annotations

import json

from celery_pause.model.scope import EVERYTHING, NOTHING, Scope, Target
from celery_pause.model.state import Hold, PauseState


def test_scope_union_and_overlap() -> None:
    a, b = Scope.of(["a"]), Scope.of(["b"])
    assert (a | b) == Scope.of(["a", "b"])
    assert (a | EVERYTHING) == EVERYTHING
    assert not a.overlaps(b) and a.overlaps(Scope.of(["a", "c"])) and a.overlaps(EVERYTHING)
    assert not NOTHING.overlaps(EVERYTHING)
    assert EVERYTHING.covers(Target(queue="anything")) and not a.covers(Target(queue="b"))


def test_expired_holds_stop_counting() -> None:
    state = PauseState(
        holds=(
            Hold(scope=Scope.of(["a"]), paused_at=0, resume_at=100),
            Hold(scope=Scope.of(["b"]), paused_at=0),
        )
    )
    assert state.paused(99) == Scope.of(["a", "b"])
    assert state.paused(100) == Scope.of(["b"])
    assert state.next_expiry(50) == 100 and state.next_expiry(150) is None


def test_encode_decode_round_trip() -> None:
    state = PauseState(
        generation=7,
        holds=(
            Hold(
                scope=EVERYTHING, source="breaker:api", paused_by="x", reason="why", paused_at=1.5
            ),
            Hold(scope=Scope.of(["q"]), paused_at=2.0, resume_at=9.0),
        ),
    )
    assert PauseState.decode(state.encode()) == state
    assert json.loads(state.encode())["schema"] == 1


def test_undecodable_documents_pause_everything() -> None:
    for raw in [
        b"",
        b"{",
        b"[]",
        b'"x"',
        b'{"schema": 2, "generation": 1, "holds": []}',
        b'{"schema": 1, "generation": "1", "holds": []}',
        b"\xff\xfe",
    ]:
        state = PauseState.decode(raw)
        assert state.paused(0) == EVERYTHING, raw
        assert state.holds[0].source == "unreadable"


def test_one_bad_hold_pauses_everything_and_keeps_the_others() -> None:
    raw = json.dumps(
        {
            "schema": 1,
            "generation": 3,
            "holds": [
                {"id": "x", "queues": ["a"], "source": "manual", "paused_at": 1},
                {"id": "y", "queues": "not-a-list", "source": "manual", "paused_at": 1},
            ],
        }
    )
    state = PauseState.decode(raw)
    assert state.generation == 3
    assert [h.source for h in state.holds] == ["manual", "unreadable"]
    assert state.paused(0) == EVERYTHING
