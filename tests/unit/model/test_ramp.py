"""A ramped resume is a limit whose rate rises, on a hold that ends with it: placed by a
resume, replaced by the next, lifted by a plain resume; earlier releases' ``ramps`` read."""

from __future__ import annotations

import json

import pytest

from celery_pause.errors import InvalidInput
from celery_pause.model.lifting import Lifting, lift
from celery_pause.model.limit import MAX_RATE, Limit
from celery_pause.model.placing import Placing, place
from celery_pause.model.ramp import describe_ramp, ramp_json
from celery_pause.model.scope import EVERYTHING, Scope
from celery_pause.model.state import UNREADABLE, Hold, PauseState

NOW = 1_800_000_000.0


def paused(*queues: str) -> PauseState:
    holds = [Hold(scope=Scope.of([q]), paused_at=NOW - 60) for q in queues]
    return PauseState().with_holds(holds)


def ramped(state: PauseState, scope: Scope, at: float = NOW, seconds: float = 600) -> PauseState:
    done = lift(state, at, Lifting(scope=scope, ramp=seconds, peak=50.0, by="ops"))
    assert done.value is not None
    return done.value


def test_a_ramped_resume_lifts_the_pause_and_places_a_rising_limit_until_its_end() -> None:
    # When queue a, paused, is resumed over ten minutes
    state = ramped(paused("a", "b"), Scope.of(["a"]))

    # Then a is no longer paused but limited by one hold rising to 50/s, ending with it
    assert state.paused(NOW) == Scope.of(["b"])
    (ramp,) = state.live_ramps(NOW)
    assert ramp.limit is not None and (ramp.limit.rate, ramp.limit.rise) == (50.0, (NOW, 600))
    assert (ramp.scope, ramp.resume_at, ramp.paused_by) == (Scope.of(["a"]), NOW + 600, "ops")
    assert state.limits(NOW + 300) == (ramp,) and not state.live_ramps(NOW + 600)
    # ... shown by how far it came
    assert describe_ramp(ramp, NOW + 300).startswith(
        "queue a: 50% through a ramp of 10 minutes, at 25.0 of 50 tasks/s, until "
    )
    shown = ramp_json(ramp, NOW + 300)
    assert (shown["progress"], shown["rate"], shown["end"]) == (0.5, 25.0, NOW + 600)
    # ... and stored as a hold of its own, read back the same
    assert PauseState.decode(state.encode()) == state
    assert "ramps" not in json.loads(state.encode())


def test_a_second_ramp_replaces_the_first_and_a_plain_resume_lifts_it() -> None:
    state = ramped(paused("a"), Scope.of(["a"]))
    (first,) = state.live_ramps(NOW)

    # When a is paused again and resumed over a minute
    state = state.with_holds([*state.holds, Hold(scope=Scope.of(["a"]), paused_at=NOW + 1)])
    state = ramped(state, Scope.of(["a"]), at=NOW + 2, seconds=60)

    # Then the new ramp replaced the old one
    (second,) = state.live_ramps(NOW + 2)
    assert second.id != first.id and second.resume_at == NOW + 62

    # And a ramp over a queue that only ramps is refused: nothing of it is paused
    with pytest.raises(InvalidInput, match="nothing to ramp: queue a is not paused"):
        lift(state, NOW + 3, Lifting(scope=Scope.of(["a"]), ramp=60, peak=50.0))
    # ... while a plain resume lifts the ramp: the queue flows at once
    done = lift(state, NOW + 3, Lifting(scope=Scope.of(["a"])))
    assert done.value is not None and not done.value.live_ramps(NOW + 3)
    assert done.result.removed == (second,)


def test_a_resume_of_several_holds_ramps_what_it_resumed_rule_by_rule() -> None:
    # Given queues a and b paused, and the task proj.x
    state = paused("a", "b")
    state = state.with_holds([*state.holds, Hold(scope=Scope.of(tasks=["proj.x"]))])

    # When everything is resumed over a minute
    state = ramped(state, EVERYTHING, seconds=60)

    # Then the queues ramp as one rule, the task as another: each rises to the peak
    ramps = state.live_ramps(NOW)
    assert sorted(r.scope.describe() for r in ramps) == ["queues a, b", "task proj.x"]
    assert not state.paused(NOW)


def test_an_earlier_releases_ramps_are_read_as_rising_limits() -> None:
    # Given a state written by an earlier release: a ramp over queues a and b beside a hold
    doc = json.loads(paused("c").encode())
    doc["ramps"] = [
        {
            "id": "r1",
            "scope": [{"queues": ["a"]}, {"queues": ["b"]}],
            "start": NOW,
            "duration": 60.0,
            "peak": 10.0,
            "source": "manual",
            "by": "ops",
            "sharers": 2,
        }
    ]

    # When it is read
    state = PauseState.decode(json.dumps(doc))

    # Then each rule of the ramp is a hold of its own rising to its peak until its end
    ramps = sorted(state.live_ramps(NOW), key=lambda r: r.id)
    assert [(r.id, r.scope.describe(), r.resume_at) for r in ramps] == [
        ("r1", "queue a", NOW + 60),
        ("r1-1", "queue b", NOW + 60),
    ]
    assert all(r.limit is not None and r.limit.rise == (NOW, 60.0) for r in ramps)
    assert state.paused(NOW) == Scope.of(["c"])
    # ... written back without the old list
    assert "ramps" not in json.loads(state.encode())

    # And a damaged one makes the state unreadable: paused, never running
    doc["ramps"][0]["duration"] = 0
    assert [h.id for h in PauseState.decode(json.dumps(doc)).holds] == [UNREADABLE]


def test_a_ramp_over_everything_stays_whole_when_part_of_it_is_paused_and_resumed() -> None:
    # Given every queue ramping back, and then queue a paused again
    state = ramped(
        PauseState().with_holds([Hold(scope=EVERYTHING, paused_at=NOW - 60)]), EVERYTHING
    )
    (ramp,) = state.live_ramps(NOW)
    state = state.with_holds([*state.holds, Hold(scope=Scope.of(["a"]), paused_at=NOW + 1)])

    # When queue a is resumed
    done = lift(state, NOW + 2, Lifting(scope=Scope.of(["a"])))

    # Then its pause is lifted and the ramp, which no list of names could split, stays whole
    assert done.value is not None and not done.value.paused(NOW + 2)
    assert done.value.live_ramps(NOW + 2) == (ramp,)


def test_a_ramped_resume_leaves_the_ramps_it_does_not_contain() -> None:
    # Given queue a ramping back, and queue b paused
    state = ramped(paused("a"), Scope.of(["a"]))
    (ramp_a,) = state.live_ramps(NOW)
    state = state.with_holds([*state.holds, Hold(scope=Scope.of(["b"]), paused_at=NOW + 1)])

    # When everything is resumed over a minute
    state = ramped(state, EVERYTHING, at=NOW + 2, seconds=60)

    # Then b ramps over the minute, and a's ramp goes on as it was
    ramps = {r.scope.describe(): r for r in state.live_ramps(NOW + 2)}
    assert ramps["queue a"] == ramp_a and ramps["queue b"].resume_at == NOW + 62


def test_a_throttle_on_a_ramping_scope_leaves_the_ramp() -> None:
    # Given queue a ramping back
    state = ramped(paused("a"), Scope.of(["a"]))
    (ramp,) = state.live_ramps(NOW)

    # When it is throttled to 5/s
    placing = Placing(
        scope=Scope.of(["a"]), by="ops", reason=None, resume_at=lambda t: None,
        limit=Limit(rate=5.0),
    )  # fmt: skip
    done = place(state, NOW + 1, placing)

    # Then both apply: the ramp is not replaced
    assert done.result.replaced == () and done.value is not None
    assert done.value.live_ramps(NOW + 1) == (ramp,)
    assert len(done.value.limits(NOW + 1)) == 2


def test_an_earlier_releases_ramp_above_the_highest_rate_reads_at_the_highest_rate() -> None:
    doc = json.loads(paused("c").encode())
    ramp = {"id": "r", "scope": [{"queues": ["a"]}], "start": NOW, "duration": 60.0}
    doc["ramps"] = [{**ramp, "peak": 1e9, "source": "manual"}]
    (read,) = PauseState.decode(json.dumps(doc)).live_ramps(NOW)
    assert read.limit is not None and read.limit.rate == MAX_RATE
