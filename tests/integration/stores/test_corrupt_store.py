"""Damaged store contents on a real Redis store with a real worker: paused, reported, repairable."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import redis

import celery_pause
from celery_pause import api
from celery_pause.control import notify_workers
from celery_pause.errors import PauseTimeout
from celery_pause.model.fair import FAIR_REGISTRY
from celery_pause.model.limit_keys import records_prefix, slots_key
from celery_pause.model.parking import REGISTRY
from celery_pause.model.scope import EVERYTHING, Scope, Target
from celery_pause.model.state import UNREADABLE, Hold, PauseState
from celery_pause.settings import config_for
from celery_pause.stores import store_for
from celery_pause.stores.redis import RedisStore
from support.cli import pause, status_doc
from support.harness import REDIS_BROKER, Cluster, Worker, wait_for


@pytest.fixture
def store_client(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url)


def state_key(cluster: Cluster) -> str:
    return f"{celery_pause.stores.store_for(cluster.app).prefix}:state"


def report_of(cluster: Cluster, worker: Worker) -> celery_pause.WorkerReport | None:
    reports = celery_pause.status(cluster.app).workers
    return next((r for r in reports if r.hostname == worker.hostname), None)


def stays_quiet(cluster: Cluster, since: float, seconds: float) -> None:
    """Watch for ``seconds``: fail at the first task that starts after ``since``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert not cluster.started_between(since, float("inf")), "a task started while paused"
        time.sleep(0.05)


def advance(cluster: Cluster, worker: Worker, rounds: int) -> int:
    """Pause and resume ``rounds`` times; the worker's applied generation afterwards."""
    for _ in range(rounds):
        celery_pause.pause(cluster.app, queues=["elsewhere"])
        celery_pause.resume(cluster.app)
    return worker.wait_applied(celery_pause.status(cluster.app).state.generation).generation


def test_an_unreadable_state_pauses_every_queue_until_resume_force(
    tmp_path: Path, store_client: redis.Redis
) -> None:
    # Given a worker that applied a few generations, and a task that runs
    cluster = Cluster(broker=REDIS_BROKER, tmp=tmp_path)
    try:
        worker = cluster.worker("w1")
        applied = advance(cluster, worker, 3)
        assert applied >= 6
        cluster.send("before")
        cluster.wait_records(1)

        # When the stored state is cut short (a damaged write, a bad manual edit)
        raw = celery_pause.status(cluster.app).state.encode()
        store_client.set(state_key(cluster), raw[: len(raw) // 2])

        # Then status reports an unreadable hold that pauses every queue ...
        status = celery_pause.status(cluster.app)
        assert status.paused == EVERYTHING
        [hold] = status.holds
        assert hold.source == UNREADABLE
        assert hold.reason is not None and "unreadable pause state" in hold.reason
        assert "unreadable hold on all queues" in hold.describe()
        # ... the worker applies it by polling, and starts no new task
        wait_for(
            lambda: (r := report_of(cluster, worker)) is not None and r.paused is None,
            timeout=30,
            what="the worker to apply the unreadable state",
        )
        since = time.time()
        task = cluster.send("during")
        stays_quiet(cluster, since, 1.5)

        # When resumed without force: the unreadable hold stays, and the damaged value is kept
        result = celery_pause.resume(cluster.app)
        assert [h.source for h in result.remaining] == [UNREADABLE]
        assert store_client.get(state_key(cluster)) == raw[: len(raw) // 2]

        # When resumed with force: the state is repaired and the held task runs
        repaired = celery_pause.resume(cluster.app, force=True)
        assert [h.source for h in repaired.removed] == [UNREADABLE]
        assert celery_pause.status(cluster.app).paused == Scope()
        records = cluster.wait_records(2, timeout=30)
        assert records[-1]["id"] == task
        worker.check_alive()
    finally:
        cluster.close()


def test_a_wait_after_a_repair_is_not_fooled_by_older_generations(
    tmp_path: Path, store_client: redis.Redis
) -> None:
    # Given a worker that applied a few generations and polls the store only every 30 s
    cluster = Cluster(broker=REDIS_BROKER, tmp=tmp_path, poll_interval=30.0)
    try:
        worker = cluster.worker("w1")
        applied = advance(cluster, worker, 2)

        # When the state becomes unreadable and is repaired, which restarts the generations
        # below the worker's, and a pause is waited for before the worker re-read the store
        store_client.set(state_key(cluster), b'{"schema":1,"generation":')
        repaired = celery_pause.resume(cluster.app, force=True, notify=False)
        assert repaired.generation < applied
        # Then the wait does not take the worker's older, higher generation for the new one
        with pytest.raises(PauseTimeout) as caught:
            celery_pause.pause(cluster.app, wait=True, timeout=2, notify=False)
        assert worker.hostname in caught.value.busy

        # When the worker is told to re-read; Then the wait succeeds and no task starts
        generation = celery_pause.status(cluster.app).state.generation
        notify_workers(cluster.app, config_for(cluster.app), store_for(cluster.app))
        api.wait_until_quiet(cluster.app, generation, timeout=30)
        since = time.time()
        cluster.send("paused")
        stays_quiet(cluster, since, 1.0)
        worker.check_alive()
    finally:
        cluster.close()


def test_damaged_worker_reports_are_skipped_and_waiting_still_works(
    tmp_path: Path, store_client: redis.Redis
) -> None:
    # Given a worker, and foreign or damaged entries among the worker reports
    cluster = Cluster(broker=REDIS_BROKER, tmp=tmp_path)
    try:
        worker = cluster.worker("w1")
        worker.wait_applied()
        workers_key = f"{store_for(cluster.app).prefix}:workers"
        junk = {
            "bytes": b"\xff\xfe",
            "deep": b"[" * 100_000,
            "huge": json.dumps({"hostname": "h", "pid": 1e400, "status": "applied",
                                "generation": 1, "seen": time.time()}),
            "list": b"[1, 2]",
        }  # fmt: skip
        store_client.hset(workers_key, mapping=junk)

        # When the status is read and a pause is waited for
        status = celery_pause.status(cluster.app)
        result = celery_pause.pause(cluster.app, wait=True, timeout=30)

        # Then both work, and only the real worker is listed
        assert [r.hostname for r in status.workers] == [worker.hostname]
        assert [r.hostname for r in result.workers] == [worker.hostname]
        worker.check_alive()
    finally:
        cluster.close()


@pytest.mark.parametrize(
    "damage",
    [b"{not json", b"[1, 2]", b'{"slots": 3, "tat": "soon", "holds": 7}'],
    ids=["cut", "a-list", "foreign-fields"],
)
def test_status_shows_the_rest_and_names_each_damaged_record(
    tmp_path: Path, store_client: redis.Redis, damage: bytes
) -> None:
    # Given a pause by tenant, a fair limit, a limit of 2 at once and one of 1 per tenant ...
    cluster = Cluster(broker=REDIS_BROKER, tmp=tmp_path, pause_labels={"tenant": "tenant_id"})
    try:
        app = cluster.app
        celery_pause.pause(app, labels=["tenant=A"], notify=False)
        fair = celery_pause.throttle(app, fair="tenant", queues=["q1"], notify=False).hold
        limit = celery_pause.throttle(app, concurrency=2, queues=["q2"], notify=False).hold
        per = celery_pause.throttle(app, concurrency=1, per="tenant", queues=["q3"], notify=False)
        store = store_for(app)
        assert isinstance(store, RedisStore)
        # ... and each record they keep beside the state damaged
        damaged = [REGISTRY, FAIR_REGISTRY, slots_key(limit.id)]
        damaged.append(records_prefix(per.hold.id) + "abc:slots")
        for key in damaged:
            store_client.set(store.record_key(key), damage)

        # When the status is asked for, as text and as JSON
        text = pause(cluster, "status")
        doc = status_doc(cluster)

        # Then both show every hold, and a warning for each limit whose use is not shown ...
        assert text.exit_code == 0, text.output
        assert [h["id"] for h in doc["holds"]] == [h.id for h in celery_pause.status(app).holds]
        assert len(doc["holds"]) == 4
        assert {u["id"] for u in doc["limits"]} == {fair.id}
        warned = "\n".join(doc["store_warnings"])
        for hold in (limit, per.hold):
            assert f"limit {hold.id}: its use is not shown" in warned
        assert text.output.count("WARNING") == len(doc["store_warnings"])
        if not damage.startswith(b'{"'):  # ... and one for each record not a JSON object
            for key in (REGISTRY, FAIR_REGISTRY):
                assert f"record {key!r} is " in warned
        # ... the pause still holds, and the damaged records are left as they were
        assert celery_pause.status(app).paused.touches(Target(label=("tenant=A",)))
        assert all(store_client.get(store.record_key(key)) == damage for key in damaged)
    finally:
        cluster.close()


def test_one_unreadable_hold_among_others_is_kept_until_forced_away(
    tmp_path: Path, store_client: redis.Redis
) -> None:
    # Given a stored state with a readable hold on q1 and a hold of a foreign shape
    cluster = Cluster(broker=REDIS_BROKER, tmp=tmp_path)
    try:
        readable = Hold(scope=Scope.of(["q1"]), paused_by="ops", paused_at=time.time(), id="h1")
        doc = json.loads(PauseState(7, (readable,)).encode())
        doc["holds"].append({"id": "h2", "queues": "q2", "source": "manual", "paused_at": "soon"})
        store_client.set(state_key(cluster), json.dumps(doc))

        # Then status lists both, the foreign one as an unreadable hold on every queue
        status = celery_pause.status(cluster.app)
        assert [h.source for h in status.holds] == ["manual", UNREADABLE]
        assert status.paused == EVERYTHING and status.state.generation == 7

        # When q1 is resumed, even with force: the unreadable hold still pauses everything
        celery_pause.resume(cluster.app, queues=["q1"], force=True)
        assert celery_pause.status(cluster.app).paused == EVERYTHING
        # When everything is resumed with force: nothing is paused and generations go on
        result = celery_pause.resume(cluster.app, force=True)
        assert celery_pause.status(cluster.app).paused == Scope()
        assert result.generation == 9
    finally:
        cluster.close()


def test_a_state_key_of_another_redis_type_reads_unreadable_until_resume_force(
    tmp_path: Path, store_client: redis.Redis
) -> None:
    # Given an app whose state key someone made a Redis list
    cluster = Cluster(broker=REDIS_BROKER, tmp=tmp_path)
    try:
        celery_pause.pause(cluster.app, queues=["q1"], notify=False)
        key = state_key(cluster)
        store_client.delete(key)
        store_client.lpush(key, b"oops")

        # Then status reports an unreadable hold on every queue, never "nothing paused"
        status = celery_pause.status(cluster.app)
        assert status.paused == EVERYTHING
        [hold] = status.holds
        assert hold.source == UNREADABLE
        assert hold.reason is not None and "is a Redis list, not a string" in hold.reason

        # When resumed without force: the hold stays, and so does the list
        assert [h.source for h in celery_pause.resume(cluster.app).remaining] == [UNREADABLE]
        assert store_client.type(key) == b"list"

        # When resumed with force: a valid state replaces the key, and the history says so
        repaired = celery_pause.resume(cluster.app, force=True, notify=False)
        assert [h.source for h in repaired.removed] == [UNREADABLE]
        assert store_client.type(key) == b"string"
        assert celery_pause.status(cluster.app).paused == Scope()
        [entry, *_] = celery_pause.history(cluster.app)
        assert entry.forced and entry.ended == (UNREADABLE,)
        assert "resume  unreadable all queues" in entry.describe()
    finally:
        cluster.close()
