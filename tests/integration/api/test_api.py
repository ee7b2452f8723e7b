"""pause / resume / status semantics against real stores (no workers needed)."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import pytest
from celery import Celery

import celery_pause
from celery_pause import AlreadyPaused, ConfigurationError, InvalidInput, Scope
from support.harness import Cluster, wait_for
from support.holds import add_breaker_hold


def race_to_pause(app: Celery, queue: str) -> list[object]:
    """Two operators pause ``queue`` at the same moment; what each of them got."""
    barrier = threading.Barrier(2)
    outcomes: list[object] = []

    def operator(name: str) -> None:
        barrier.wait()
        try:
            outcomes.append(celery_pause.pause(app, by=name, queues=[queue]))
        except AlreadyPaused as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=operator, args=(n,)) for n in ("alice", "bob")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def test_two_clients_pausing_at_once_one_wins(store_cluster: Cluster) -> None:
    app = store_cluster.app
    for round_ in range(10):
        # Given two operators pausing the same queue at the same moment
        queue = f"q{round_}"
        outcomes = race_to_pause(app, queue)

        # Then exactly one hold is recorded, and the loser is told who holds it
        losers = [o for o in outcomes if isinstance(o, AlreadyPaused)]
        winners = [o for o in outcomes if isinstance(o, celery_pause.PauseResult)]
        assert len(losers) == 1 and len(winners) == 1
        assert losers[0].holds[0].paused_by == winners[0].hold.paused_by
        holds = [h for h in celery_pause.status(app).holds if h.scope == Scope.of([queue])]
        assert len(holds) == 1


def test_already_paused_names_who_when_why_and_force_replaces(store_cluster: Cluster) -> None:
    app = store_cluster.app
    celery_pause.pause(app, by="alice@ops", reason="Deploying v2.0")

    with pytest.raises(AlreadyPaused) as refused:
        celery_pause.pause(app, by="bob@ops", queues=["emails"])
    message = str(refused.value)
    assert "alice@ops" in message and "Deploying v2.0" in message and "force" in message

    result = celery_pause.pause(app, by="bob@ops", reason="mine now", force=True)
    assert [h.paused_by for h in result.replaced] == ["alice@ops"]
    assert [h.paused_by for h in celery_pause.status(app).holds] == ["bob@ops"]


def test_pauses_of_separate_queues_coexist(store_cluster: Cluster) -> None:
    app = store_cluster.app
    celery_pause.pause(app, queues=["a"])
    celery_pause.pause(app, queues=["b", "c"])
    assert celery_pause.status(app).paused == Scope.of(["a", "b", "c"])


def test_resume_some_queues_narrows_a_hold(store_cluster: Cluster) -> None:
    app = store_cluster.app
    celery_pause.pause(app, queues=["a", "b"])

    result = celery_pause.resume(app, queues=["a"])

    assert celery_pause.status(app).paused == Scope.of(["b"])
    assert len(result.removed) == 1 and not result.remaining


def test_resume_of_one_queue_out_of_an_all_queues_hold_is_refused(store_cluster: Cluster) -> None:
    # Given a manual hold on every queue
    app = store_cluster.app
    celery_pause.pause(app, by="alice")
    generation = celery_pause.status(app).state.generation

    # When one queue is resumed out of it, Then that is refused, saying what to do instead
    with pytest.raises(InvalidInput, match=r"Resume its whole scope \(all queues\)"):
        celery_pause.resume(app, queues=["a"])

    # And nothing changed
    status = celery_pause.status(app)
    assert status.paused.everything and status.state.generation == generation


def test_resume_leaves_breaker_holds_unless_forced(store_cluster: Cluster) -> None:
    app = store_cluster.app
    add_breaker_hold(app, ["payments"])
    celery_pause.pause(app, queues=["payments"])

    result = celery_pause.resume(app)
    assert [h.source for h in result.remaining] == ["breaker:payments"]
    assert celery_pause.status(app).paused == Scope.of(["payments"])

    forced = celery_pause.resume(app, force=True)
    assert [h.source for h in forced.removed] == ["breaker:payments"]
    assert not celery_pause.status(app).paused


def test_breaker_hold_does_not_block_a_manual_pause(store_cluster: Cluster) -> None:
    add_breaker_hold(store_cluster.app)
    result = celery_pause.pause(store_cluster.app, queues=["a"])
    assert result.hold.manual


def test_resume_after_sets_resume_at_by_the_store_clock(store_cluster: Cluster) -> None:
    app = store_cluster.app
    result = celery_pause.pause(app, resume_after=timedelta(minutes=30))
    assert result.hold.resume_at == pytest.approx(result.hold.paused_at + 1800)

    at = datetime.now(timezone.utc) + timedelta(hours=1)
    later = celery_pause.pause(app, resume_at=at, force=True)
    assert later.hold.resume_at == pytest.approx(at.timestamp())


def test_expired_hold_no_longer_pauses_or_conflicts(store_cluster: Cluster) -> None:
    app = store_cluster.app
    celery_pause.pause(app, resume_after=0.2)  # a resume_at in the past is refused
    wait_for(lambda: not celery_pause.status(app).paused, timeout=10, what="the hold to expire")
    celery_pause.pause(app)  # no AlreadyPaused: the expired hold does not count


@pytest.mark.parametrize(
    "arguments",
    [
        {"resume_after": 10, "resume_at": 10.0},
        {"resume_after": 0},
        {"resume_after": -5},
        {"queues": []},
        {"queues": [""]},
        {"queues": ["x" * 201]},
        {"queues": [f"q{i}" for i in range(101)]},
        {"reason": "r" * 1001},
    ],
)
def test_bad_arguments_are_refused_and_record_nothing(
    store_cluster: Cluster, arguments: dict[str, object]
) -> None:
    with pytest.raises(InvalidInput):
        celery_pause.pause(store_cluster.app, **arguments)  # type: ignore[arg-type]
    assert celery_pause.status(store_cluster.app).state.generation == 0


def test_non_redis_broker_without_store_names_the_setting() -> None:
    app = Celery("x", broker="amqp://guest:guest@127.0.0.1:5672//", set_as_current=False)
    with pytest.raises(ConfigurationError, match="pause_store_url"):
        celery_pause.status(app)


def test_unknown_store_scheme_is_refused_with_the_password_masked() -> None:
    app = Celery("x", set_as_current=False)
    app.conf.pause_store_url = "mongodb://user:hunter2@db/pause"
    with pytest.raises(ConfigurationError) as refused:
        celery_pause.status(app)
    assert "hunter2" not in str(refused.value) and "pause_store_url" in str(refused.value)
