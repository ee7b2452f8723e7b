"""Epochs and the restore of a state the store forgot: pure logic, no store."""

from __future__ import annotations

import json
from dataclasses import replace

from celery_pause.model.lifting import Lifting, lift
from celery_pause.model.restoring import NO_STATE, forgotten, restore
from celery_pause.model.scope import EVERYTHING, Scope
from celery_pause.model.state import Hold, PauseState, Restored, unreadable_hold

NOW = 1_800_000_000.0


def known_state() -> PauseState:
    """Generation 3 of one epoch: a manual hold with an auto-resume, one run out, one skip."""
    state = PauseState().with_holds(())
    state = state.with_holds(
        (
            Hold(scope=Scope.of(["emails"]), paused_by="alice@ops", reason="smtp down",
                 paused_at=NOW - 60, resume_at=NOW + 600, id="a1"),
            Hold(scope=EVERYTHING, paused_by="bob@ops", paused_at=NOW - 60, resume_at=NOW - 1,
                 id="gone"),
        )
    )  # fmt: skip
    return state.with_skip("nightly", NOW + 3600, NOW)


def test_a_state_written_from_nothing_gets_an_epoch_its_generations_keep() -> None:
    # Given the state read when nothing is stored
    empty = PauseState()
    assert empty.nothing and empty.epoch == ""

    # When written, and changed again
    first = empty.with_holds([Hold(scope=EVERYTHING)])
    second = first.with_skip("w", NOW, NOW - 1)

    # Then the first write starts an epoch and later generations keep it
    assert len(first.epoch) == 12 and second.epoch == first.epoch
    assert PauseState().with_holds(()).epoch != first.epoch
    # And an unreadable state, once replaced (a repair), starts a new epoch
    damaged = PauseState.decode(b"{not json")
    assert damaged.epoch == "" and not damaged.nothing
    assert damaged.with_holds(()).epoch not in ("", first.epoch)


def test_epoch_and_restored_round_trip_and_old_documents_still_read() -> None:
    restored = Restored(by="w1@host", at=NOW, lost=NO_STATE, generation=3)
    state = PauseState(generation=4, epoch="e1", restored=restored)
    assert PauseState.decode(state.encode()) == state
    old = json.dumps({"schema": 1, "generation": 5, "holds": []})
    assert PauseState.decode(old) == PauseState(generation=5)
    assert "epoch" not in json.loads(PauseState(generation=5).encode())
    # A malformed restored field reads as unreadable, as any malformed field does
    bad = json.dumps({"schema": 1, "generation": 5, "holds": [], "restored": {"by": 1}})
    assert PauseState.decode(bad).holds[0].source == "unreadable"


def test_no_state_stored_is_restored_with_the_holds_as_known() -> None:
    # Given a worker that read generation 3, and a store that now holds nothing
    known = known_state()
    assert forgotten(known, PauseState()) == NO_STATE

    # When it restores
    outcome = restore(PauseState(), NOW, known=known, by="w1@host")

    # Then the live hold is back exactly as known, the one run out is not; same epoch
    state = outcome.value
    assert state is not None
    assert state.holds == (known.holds[0],)
    assert state.skips == known.skips
    assert (state.generation, state.epoch) == (4, known.epoch)
    assert outcome.result == Restored(by="w1@host", at=NOW, lost=NO_STATE, generation=3)
    assert state.restored == outcome.result
    assert PauseState.decode(state.encode()) == state


def test_an_older_generation_of_the_epoch_is_restored_above_both() -> None:
    # Given a failover that lost the last write: generation 2 of the same epoch is stored
    known = known_state()
    older = replace_generation(known, 2)

    # When a worker that read generation 3 restores
    outcome = restore(older, NOW, known=known, by="w1@host")

    # Then generation 3's holds come back as generation 4
    assert outcome.value is not None and outcome.value.generation == 4
    assert outcome.result is not None
    assert outcome.result.lost == "the store held an older generation 2"


def test_a_second_worker_racing_to_restore_changes_nothing() -> None:
    # Given a state the first worker restored
    known = known_state()
    first = restore(PauseState(), NOW, known=known, by="w1@host").value
    assert first is not None

    # When a second worker that knew the same generation (or an older one) tries
    again = restore(first, NOW + 1, known=known, by="w2@host")
    lagging = restore(first, NOW + 1, known=replace_generation(known, 2), by="w2@host")

    # Then neither writes, nor the first when it reads its restore back
    assert again.value is None and again.result is None
    assert lagging.value is None
    assert restore(first, NOW + 1, known=first, by="w1@host").value is None


def test_a_restore_from_an_older_generation_is_restored_again_by_one_that_knew_more() -> None:
    known = known_state()
    stale = restore(PauseState(), NOW, known=replace_generation(known, 2), by="w2@host").value
    assert stale is not None and stale.generation == 3
    outcome = restore(stale, NOW, known=known, by="w1@host")
    assert outcome.value is not None and outcome.value.generation == 4
    assert outcome.result is not None and outcome.result.generation == 3
    # And neither worker restores again once it read the other's restore
    assert outcome.value is not None
    assert forgotten(stale, outcome.value) is None
    assert forgotten(outcome.value, outcome.value) is None


def test_another_epoch_or_an_unreadable_state_is_accepted_as_it_is() -> None:
    known = known_state()
    # A repair (or a pause placed on an emptied store first) starts another epoch
    repaired = PauseState().with_holds(())
    assert forgotten(known, repaired) is None
    assert restore(repaired, NOW, known=known, by="w1@host").value is None
    # Damage is not forgetting: the unreadable hold pauses everything until repaired
    damaged = PauseState(holds=(unreadable_hold("bad"),))
    assert forgotten(known, damaged) is None
    # A worker that never read a written state has nothing to restore
    assert forgotten(PauseState(), PauseState()) is None
    # A newer generation of the epoch is ordinary progress
    assert forgotten(known, known.with_holds(())) is None


def test_an_operator_change_clears_restored_and_a_resume_lifts_restored_holds() -> None:
    known = known_state()
    restored = restore(PauseState(), NOW, known=known, by="w1@host").value
    assert restored is not None
    lifted = lift(restored, NOW + 1, Lifting(scope=EVERYTHING)).value
    assert lifted is not None
    assert lifted.restored is None and not lifted.active_holds(NOW + 1)
    assert lifted.epoch == known.epoch


def replace_generation(state: PauseState, generation: int) -> PauseState:
    return replace(state, generation=generation)
